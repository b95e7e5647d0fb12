"""The exposition rendered once per snapshot, off the event loop.

ExpositionCache renders the latest snapshot's series (and wattprobe's own process_* series)
into the text format once per snapshot; Renderer is the one thread that does it, so the web
server's event loop serves the last rendered bytes and never renders (exporter/web/server.py).
"""

from __future__ import annotations

import concurrent.futures
import gzip
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.registry import Collector

from exporter.exposition.collector import SnapshotCollector
from exporter.exposition.text import TextRenderer
from exporter.model.snapshot import Snapshot

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Rendered:
    sequence: int
    plain: bytes
    gzipped: bytes | None  # None until some scrape has asked for gzip


class ExpositionCache:
    """Renders the exposition once per snapshot; concurrent scrapes share the bytes."""

    def __init__(self, snapshot: Callable[[], Snapshot], *, containers: bool = True) -> None:
        self._snapshot = snapshot
        self._registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._key: int | None = None
        self._plain = b""
        self._gzipped: bytes | None = None  # made by the first scrape that asks for gzip
        self._registry.register(_Pinned(self, containers=containers))
        # process_* (CPU seconds, memory, open fds, start time) of wattprobe itself, from its own
        # /proc/self (not --path.procfs), as every Prometheus client exports. Read when a snapshot
        # is rendered, so they are as fresh as the snapshot they are served with.
        ProcessCollector(registry=self._registry)
        self._pinned: Snapshot | None = None
        self._renderer = TextRenderer()  # generate_latest's output, label sets formatted once

    def register(self, collector: Collector) -> None:
        """More series for every render (the web server's own, exporter/web/telemetry.py)."""
        self._registry.register(collector)

    def render(self, want_gzip: bool) -> Rendered:
        """The latest snapshot's bytes, rendered now if they are not yet."""
        snap = self._snapshot()
        with self._lock:
            if self._key != snap.sequence or not self._plain:
                self._pinned = snap
                self._plain = self._renderer.render(self._registry.collect())
                self._gzipped = None
                self._key = snap.sequence
            if want_gzip and self._gzipped is None:
                self._gzipped = gzip.compress(self._plain, compresslevel=1)
            return Rendered(snap.sequence, self._plain, self._gzipped)

    def get(self, want_gzip: bool) -> bytes:
        rendered = self.render(want_gzip)
        if want_gzip:
            assert rendered.gzipped is not None
            return rendered.gzipped
        return rendered.plain

    def pinned(self) -> Snapshot:
        assert self._pinned is not None
        return self._pinned


class _Pinned(SnapshotCollector):
    """Collects from the snapshot the cache decided to render (not a newer one mid-render)."""

    def __init__(self, cache: ExpositionCache, *, containers: bool) -> None:
        super().__init__(cache.pinned, containers=containers)


class Renderer:
    """The thread that renders, so that the event loop never does.

    Two modes. Until the owner calls changed() (the agent does after every monitor step), every
    scrape asks the thread (request()) and waits for the answer: the snapshot is checked and
    rendered if new, exactly as before. Once changed() has been called, the thread renders each
    new snapshot as soon as it is out and publishes the bytes; a scrape takes the last published
    bytes at once (ready()), and asks the thread only when nothing is published (start-up, a
    failed render, or gzip before anyone had asked for it).
    """

    def __init__(self, cache: ExpositionCache) -> None:
        self._cache = cache
        self._cond = threading.Condition()
        self._queue: list[tuple[bool, concurrent.futures.Future[bytes]]] = []
        self._dirty = False
        self._stopping = False
        self._gzip_wanted = False
        self._eager = False
        self._published: Rendered | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="http-render", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            queue, self._queue = self._queue, []
            self._cond.notify()
        for _, future in queue:
            future.cancel()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)

    def changed(self) -> None:
        """A new snapshot is out: render it now (from any thread; cheap)."""
        with self._cond:
            self._eager = True
            self._dirty = True
            self._cond.notify()

    def ready(self, want_gzip: bool) -> bytes | None:
        """The last published bytes, or None when the caller must request() them."""
        if want_gzip:
            self._gzip_wanted = True
        published = self._published
        if not self._eager or published is None:
            return None
        return published.gzipped if want_gzip else published.plain

    def request(self, want_gzip: bool) -> concurrent.futures.Future[bytes]:
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        with self._cond:
            if self._stopping:
                future.cancel()
                return future
            self._queue.append((want_gzip, future))
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._queue or self._dirty or self._stopping):
                    self._cond.wait()
                if self._stopping:
                    return
                queue, self._queue = self._queue, []
                dirty, self._dirty = self._dirty, False
            if dirty:
                try:
                    self._published = self._cache.render(self._gzip_wanted)
                except Exception:
                    # nothing stale is served as if it were fresh: scrapes ask, and get a 500
                    self._published = None
                    log.exception("rendering the exposition failed")
            for want_gzip, future in queue:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    rendered = self._cache.render(want_gzip)
                except Exception as exc:
                    future.set_exception(exc)
                    continue
                self._published = rendered
                body = rendered.gzipped if want_gzip else rendered.plain
                assert body is not None  # render() made the gzip asked for
                future.set_result(body)
