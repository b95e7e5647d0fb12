"""HTTP: /metrics from a per-snapshot cache, /healthz, /readyz and a landing page.

Hardened for a port that every pod on the node can reach (see docs/security.md). One asyncio
event loop on the server's thread serves every connection: a connection that is idle, trickles
its head, or does not read its response costs a socket, a small object and at most one 64 KiB
chunk of buffered response, never a thread or a slot that a scraper needs. Deadlines (head,
idle, write) are timers on the loop. The exposition is rendered off the loop, by one render
thread (Renderer): once the owner says a new snapshot is out (snapshot_published), the thread
renders it and the loop serves the last rendered bytes, so a scrape never waits for a render or
for the monitor's step. Only GET and HEAD on the four defined paths; TLS, basic auth and
response headers from --web.config.file (exporter.web.live), re-read when the file changes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import html
import logging
import resource
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector

from exporter import __version__
from exporter.exposition.collector import SnapshotCollector
from exporter.exposition.text import TextRenderer
from exporter.model.config import HttpLimits
from exporter.model.snapshot import Snapshot
from exporter.web.auth import BasicAuth
from exporter.web.http import (
    HeadReader,
    HttpError,
    ReadTimeout,
    Request,
    Response,
    error_response,
    parse_head,
    render,
)
from exporter.web.live import LiveWebConfig, WebState
from exporter.web.tls import san_allowed

log = logging.getLogger(__name__)

# The classic text format: every name we expose is a legacy-valid name, and every Prometheus
# since 1.x (and other scrapers) reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

BACKLOG = 1024  # a flood waits in the kernel's queue, not in ours
ACCEPT_BATCH = 64  # connections accepted per wake-up: a flood cannot hold the loop for long
CHUNK = 65536  # a response is handed to a transport this much at a time (its buffer's bound)
LINGER_S = 0.5
LINGER_BYTES = 256 * 1024
FD_RESERVE = 256  # descriptors kept for everything but connections (sources, eBPF, kube)
JOIN_TIMEOUT_S = 10.0
# At the connection limit a new connection replaces the oldest one that has not yet had a
# request answered, if that one is at least this old; else the new one is refused. A flood of
# connections that never ask anything then cannot lock out a scraper that reconnects (measured:
# with half the header timeout here, 10 of 15 new-connection scrapes were refused under
# tests/benchmarks/attack.py; with 1 s, none), and a burst of connections younger than this is
# refused, not let in at the cost of each other.
EVICT_AFTER_S = 1.0


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


@dataclass(frozen=True)
class Health:
    """What /healthz and /readyz answer from."""

    alive: Callable[[], bool]
    ready: Callable[[], bool]


LANDING = """<!doctype html>
<html><head><title>wattprobe</title></head>
<body><h1>wattprobe {version}</h1>
<p>Node power and GPU exporter with energy attributed to pods.</p>
<ul><li><a href="{path}">{path}</a></li><li><a href="/healthz">/healthz</a></li>
<li><a href="/readyz">/readyz</a></li></ul></body></html>
"""

ALLOW = (("Allow", "GET, HEAD"),)
WWW_AUTHENTICATE = (("WWW-Authenticate", 'Basic realm="wattprobe", charset="UTF-8"'),)
RETRY_AFTER = (("Retry-After", "1"),)
# Written at accept time, without reading the request, when all connection slots are taken: it
# is short enough to fit any socket buffer, so sending it never waits.
BUSY = render(error_response(503, RETRY_AFTER), head_only=False)


def _accepts_gzip(accept_encoding: str | None) -> bool:
    for item in (accept_encoding or "").split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        if coding.lower() != "gzip":
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


class Routes:
    """What each path answers. Only GET and HEAD; the body never echoes the request."""

    def __init__(self, cache: ExpositionCache, health: Health, telemetry_path: str) -> None:
        self.cache = cache
        self.health = health
        self.telemetry_path = telemetry_path
        self.paths = (telemetry_path, "/healthz", "/readyz", "/")
        self._landing = LANDING.format(
            version=html.escape(__version__), path=html.escape(telemetry_path)
        ).encode()

    def is_scrape(self, req: Request) -> bool:
        return req.path == self.telemetry_path and req.method in ("GET", "HEAD")

    @staticmethod
    def wants_gzip(req: Request) -> bool:
        return _accepts_gzip(req.header("accept-encoding"))

    @staticmethod
    def metrics(body: bytes, gzipped: bool) -> Response:
        headers: tuple[tuple[str, str], ...] = (("Vary", "Accept-Encoding"),)
        if gzipped:
            headers += (("Content-Encoding", "gzip"),)
        return Response(200, body, CONTENT_TYPE, headers)

    def handle(self, req: Request) -> Response:
        if req.path not in self.paths:
            return Response(404, b"404 Not Found\n")
        if req.method not in ("GET", "HEAD"):
            return Response(405, b"405 Method Not Allowed\n", headers=ALLOW)
        if req.path == self.telemetry_path:  # the server serves scrapes from its Renderer
            want_gzip = self.wants_gzip(req)
            return self.metrics(self.cache.get(want_gzip), want_gzip)
        if req.path == "/healthz":
            ok = self.health.alive()
            return Response(200 if ok else 503, b"ok\n" if ok else b"monitor loop stalled\n")
        if req.path == "/readyz":
            ok = self.health.ready()
            return Response(200 if ok else 503, b"ready\n" if ok else b"first interval not done\n")
        return Response(200, self._landing, "text/html; charset=utf-8")


def _connection_budget(wanted: int) -> int:
    """max_connections, within the descriptors this process may open.

    Go raises its soft RLIMIT_NOFILE to the hard limit at start; Python does not, and containers
    often start with a soft limit of 1024. An accept() that fails with EMFILE makes asyncio stop
    accepting for a second, scrapers included, so the limit is raised here, and if the hard
    limit is too low the connection limit is lowered below it instead.
    """
    need = wanted + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(hard, need)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError) as exc:
                log.debug("cannot raise RLIMIT_NOFILE to %d: %s", target, exc)
    if soft != resource.RLIM_INFINITY and soft < need:
        budget = max(1, soft - FD_RESERVE)
        log.warning(
            "--web.max-connections %d lowered to %d: the open-files limit is %d",
            wanted,
            budget,
            soft,
        )
        return budget
    return wanted


class MetricsServer:
    """Serves from an asyncio loop run by serve_forever() on the caller's thread.

    The socketserver-like surface (server_address, serve_forever, shutdown, server_close) is
    what the agent and the tests drive.
    """

    def __init__(
        self,
        address: tuple[str, int],
        routes: Routes,
        limits: HttpLimits,
        web: LiveWebConfig | None,
        family: socket.AddressFamily = socket.AF_INET,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.web = web
        self.max_connections = _connection_budget(limits.max_connections)
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(BACKLOG)
            self.socket.setblocking(False)
        except BaseException:
            self.socket.close()
            raise
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.renderer = Renderer(routes.cache)
        # every open connection, and apart those that have not had a request answered yet
        # (oldest first: dicts keep insertion order), the ones given up at the limit
        self.connections: set[_Connection] = set()
        self.unproven: dict[_Connection, float] = {}
        self.scrapes = 0  # scrapes waiting for a render (touched on the loop only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._shutdown_asked = False
        self._serving = threading.Event()
        self._done = threading.Event()
        self._auth_pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def tls(self) -> bool:
        return self.web is not None and self.web.tls

    def snapshot_published(self) -> None:
        """The owner's monitor published a snapshot: render it off the request path now."""
        self.renderer.changed()

    # -- running ------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        del poll_interval  # socketserver's signature; the loop needs no polling
        if self._shutdown_asked:
            self._done.set()
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        self.renderer.start()
        self._serving.set()
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                self._close_connections(loop)
            finally:
                loop.close()
                self.renderer.stop()
                if self._auth_pool is not None:
                    self._auth_pool.shutdown(wait=True, cancel_futures=True)
                self._done.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # asyncio accepts `backlog` connections per wake-up and listens with the same number:
        # a small batch keeps the loop turning under a flood, then the queue is deepened again
        server = await loop.create_server(
            lambda: _Connection(self), sock=self.socket, backlog=ACCEPT_BATCH
        )
        self.socket.listen(BACKLOG)
        try:
            if not self._shutdown_asked:
                await self._stop.wait()
        finally:
            server.close()

    def _close_connections(self, loop: asyncio.AbstractEventLoop) -> None:
        for conn in list(self.connections):
            conn.abort()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(asyncio.sleep(0))  # connection_lost callbacks

    def shutdown(self) -> None:
        """Stop serve_forever and wait until it has returned (callable from another thread)."""
        self._shutdown_asked = True
        if not self._serving.is_set():
            return
        loop = self._loop
        if loop is not None and not self._done.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._stop_on_loop)
        self._done.wait(JOIN_TIMEOUT_S)

    def _stop_on_loop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def server_close(self) -> None:
        self.socket.close()

    # -- what connections share ---------------------------------------------------------

    def evict_one(self, now: float) -> bool:
        """Close the oldest connection that has had no request answered, if it is old enough."""
        for conn, opened in self.unproven.items():
            if now - opened < EVICT_AFTER_S:
                return False  # the oldest is too young, so are all the others
            del self.unproven[conn]
            self.connections.discard(conn)
            log.debug("connection from %r given up for a new one at the limit", conn.peer)
            conn.abort()
            return True
        return False

    async def exposition(self, want_gzip: bool) -> bytes | None:
        """The bytes for a scrape; None when every scrape slot is taken (503)."""
        body = self.renderer.ready(want_gzip)
        if body is not None:
            return body
        if self.limits.max_requests > 0 and self.scrapes >= self.limits.max_requests:
            return None
        self.scrapes += 1  # held while this scrape waits for a render (a slow reader holds none)
        try:
            return await asyncio.wrap_future(self.renderer.request(want_gzip))
        finally:
            self.scrapes -= 1

    async def authorized(self, auth: BasicAuth, header: str | None) -> bool:
        if auth.cached(header):
            return True
        if self._auth_pool is None:
            # bcrypt takes ~70 ms at cost 10: never on the loop. One thread, as BasicAuth runs
            # one bcrypt at a time anyway, so a flood of guesses costs at most one core.
            self._auth_pool = concurrent.futures.ThreadPoolExecutor(1, "http-auth")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._auth_pool, auth.check, header)

    def extra_headers(self, state: WebState | None = None) -> tuple[tuple[str, str], ...]:
        if self.web is None:
            return ()
        return (state or self.web.current()).config.headers


class _Closed(Exception):
    """The client went away, or took too long to read its response."""


class _Connection(asyncio.Protocol):
    """One client connection: the protocol callbacks feed it, one task answers it."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self._raw: asyncio.BaseTransport | None = None  # the socket's own, under any TLS
        self.reader = HeadReader(server.limits)
        self.peer: Any = None
        self._waiter: asyncio.Future[bool] | None = None
        self._eof = False
        self._lost = False
        self._refused = False
        self._write_paused = False
        self._read_paused = False
        self._lingering = False
        self._discarded = 0
        self._task: asyncio.Task[None] | None = None

    # -- protocol callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        server = self.server
        loop = asyncio.get_running_loop()
        if len(server.connections) >= server.max_connections and not server.evict_one(loop.time()):
            self._refused = True
            if server.tls:
                transport.abort()
            else:
                transport.write(BUSY)
                transport.close()
            return
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        server.connections.add(self)
        server.unproven[self] = loop.time()
        # pause at any unsent byte: a response is handed over one CHUNK at a time, so a client
        # that does not read holds at most one chunk here, never a copy of the whole page
        transport.set_write_buffer_limits(high=0)
        if server.tls:
            transport.pause_reading()  # the handshake must see the ClientHello, not us
            self._read_paused = True
        self._task = loop.create_task(self._run())  # held: the loop keeps only a weak ref

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.abort()
            return
        self.reader.feed(data)
        if self.reader.pending > self.limits.max_header_bytes and not self._read_paused:
            # a pipelining client that does not read cannot make us buffer more than one head
            assert self.transport is not None
            self.transport.pause_reading()
            self._read_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self.server.tls  # keep a plain socket open to answer; TLS closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        # CPython's socket transport keeps a bound method of itself (_read_ready_cb): a cycle
        # that only the cyclic collector frees, and with wattprobe's high GC thresholds
        # (exporter/app/runtime.py) tens of thousands of closed transports piled up under a
        # connection flood (RSS kept growing). Nothing reads from a lost transport: cut it.
        if self._raw is not None:
            vars(self._raw).pop("_read_ready_cb", None)
            self._raw = None
        self._wake()
        if not self._refused:
            self.server.connections.discard(self)
            self.server.unproven.pop(self, None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    def abort(self) -> None:
        if self.transport is not None and not self._lost:
            self.transport.abort()

    # -- waiting ------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def _wait(self, deadline: float) -> bool:
        """Until a callback wakes us (True) or the deadline passes (False)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    # -- the connection's task ----------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.header_timeout_s
        try:
            if self.server.tls and not await self._handshake(deadline):
                return
            await self._serve_requests(deadline)
        except (OSError, ssl.SSLError, _Closed) as exc:
            log.debug("connection from %r ended: %r", self.peer, exc)
        except asyncio.CancelledError:
            pass  # the server is stopping
        except Exception:
            log.exception("connection from %r failed", self.peer)
        finally:
            transport = self.transport
            if transport is not None and not self._lost:
                if transport.get_write_buffer_size() > 0:
                    transport.abort()  # a client that does not read gets no more time
                else:
                    transport.close()

    async def _handshake(self, deadline: float) -> bool:
        assert self.server.web is not None and self.transport is not None
        state = self.server.web.current()
        if state.context is None:
            return False
        loop = asyncio.get_running_loop()
        try:
            # the handshake timeout is one deadline over all of the handshake's reads: a client
            # that trickles its hello byte by byte is cut off all the same
            tls = await loop.start_tls(
                self.transport,
                self,
                state.context,
                server_side=True,
                ssl_handshake_timeout=max(deadline - loop.time(), 0.001),
                ssl_shutdown_timeout=min(self.limits.write_timeout_s, 5.0),
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            log.debug("TLS handshake with %r failed: %r", self.peer, exc)
            self.abort()
            return False
        if tls is None:
            return False
        self.transport = tls
        self._read_paused = False  # start_tls resumed reading, now through TLS
        tls_config = state.config.tls
        if tls_config is not None and not san_allowed(
            tls.get_extra_info("peercert"), tls_config.client_allowed_sans
        ):
            log.debug("client certificate has none of client_allowed_sans")
            tls.abort()
            return False
        return True

    async def _serve_requests(self, deadline: float | None) -> None:
        while True:
            try:
                req = await self._read_request(deadline)
            except HttpError as exc:
                await self._refuse(exc.status)
                return
            except ReadTimeout as exc:
                if exc.got_bytes:
                    await self._refuse(408)
                return
            if req is None:
                return
            deadline = None  # later requests: idle timeout, then header timeout
            response = await self._respond(req)
            if response.status < 400:
                self.server.unproven.pop(self, None)  # a client that asks what it may
            close = response.close or not req.keep_alive or req.has_body
            if close and not response.close:
                response = Response(
                    response.status, response.body, response.content_type, response.headers, True
                )
            head = render(
                response, head_only=True, keep_alive_10=req.version == "HTTP/1.0" and not close
            )
            await self._send(head, b"" if req.method == "HEAD" else response.body)
            if close:
                if req.has_body:
                    await self._linger()  # the unread body must not turn into a reset
                return

    async def _read_request(self, deadline: float | None) -> Request | None:
        """The next request, or None when the client closed (or went silent) between requests.

        deadline: when the whole head must be in (the first request: connection start plus
        header_timeout); None for a keep-alive request (idle_timeout for the first byte, then
        header_timeout from it). Raises HttpError or ReadTimeout.
        """
        loop = asyncio.get_running_loop()
        limits = self.limits
        first_byte_by = deadline if deadline is not None else loop.time() + limits.idle_timeout_s
        head_by = deadline
        if self._read_paused and self.transport is not None:
            self.transport.resume_reading()
            self._read_paused = False
        while True:
            if head_by is None and self.reader.started:
                head_by = loop.time() + limits.header_timeout_s
            head = self.reader.next_head()
            if head is not None:
                return parse_head(head)
            if self._eof or self._lost:
                if self.reader.started:
                    raise HttpError(400)  # closed in the middle of a head
                return None
            if not await self._wait(head_by if head_by is not None else first_byte_by):
                raise ReadTimeout(self.reader.started)

    async def _respond(self, req: Request) -> Response:
        server = self.server
        extra: tuple[tuple[str, str], ...] = ()
        if server.web is not None:
            state = server.web.current()
            extra = server.extra_headers(state)
            if state.auth.enabled and not await server.authorized(
                state.auth, req.header("authorization")
            ):
                unauthorized = Response(401, b"401 Unauthorized\n")
                return _with_headers(unauthorized, WWW_AUTHENTICATE + extra)
        routes = server.routes
        try:
            if routes.is_scrape(req):
                want_gzip = routes.wants_gzip(req)
                body = await server.exposition(want_gzip)
                if body is None:
                    return _with_headers(error_response(503, RETRY_AFTER), extra)
                return _with_headers(routes.metrics(body, want_gzip), extra)
            return _with_headers(routes.handle(req), extra)
        except Exception:
            # a rendering bug must cost one response, not the connection or the server
            log.exception("serving %s failed", req.path if req.path in routes.paths else "?")
            return _with_headers(error_response(500), extra)

    async def _refuse(self, status: int) -> None:
        await self._send(
            render(error_response(status, self.server.extra_headers()), head_only=False)
        )
        await self._linger()

    async def _send(self, data: bytes, body: bytes = b"") -> None:
        """Hand data, then body, to the kernel within write_timeout_s, or raise _Closed.

        body is the shared cached exposition: it is written in slices, never copied whole (a
        head + body concatenation per response was 380 KiB per slow reader on a 5,000-process
        node); only the head and the first slice are joined, into one packet.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.write_timeout_s
        view = memoryview(body)
        first = max(0, CHUNK - len(data))
        for chunk in _slices(data + view[:first], view, first):
            if self._lost or self.transport is None:
                raise _Closed("client gone")
            self.transport.write(chunk)
            while self._write_paused:
                if self._lost:
                    raise _Closed("client gone")
                if not await self._wait(deadline):
                    raise _Closed("client too slow to take the response")

    async def _linger(self) -> None:
        """Half-close and discard what the client still sends, briefly, before closing.

        Closing a socket with unread input makes the kernel send a reset, which can destroy the
        error response the client has not read yet. Bounded in time and bytes, like Go's server.
        """
        transport = self.transport
        if transport is None or self._lost:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER_S
        self._lingering = True
        self._discarded = self.reader.pending
        if transport.can_write_eof():
            transport.write_eof()
        if self._read_paused:
            transport.resume_reading()
            self._read_paused = False
        while not (self._eof or self._lost):
            if not await self._wait(deadline):
                return


def _slices(head: bytes, view: memoryview, offset: int) -> Iterator[bytes | memoryview]:
    yield head
    for at in range(offset, len(view), CHUNK):
        yield view[at : at + CHUNK]


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def _with_headers(response: Response, headers: tuple[tuple[str, str], ...]) -> Response:
    if not headers:
        return response
    return Response(
        response.status,
        response.body,
        response.content_type,
        response.headers + headers,
        response.close,
    )


def make_server(
    host: str,
    port: int,
    snapshot: Callable[[], Snapshot],
    health: Health,
    telemetry_path: str,
    *,
    limits: HttpLimits | None = None,
    web: LiveWebConfig | None = None,
    containers: bool = True,
) -> MetricsServer:
    """containers: serve per-container series of pods' containers (--collector.container)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    routes = Routes(ExpositionCache(snapshot, containers=containers), health, telemetry_path)
    return MetricsServer((host, port), routes, limits or HttpLimits(), web, family)


__all__ = [
    "ExpositionCache",
    "Health",
    "HttpLimits",
    "LiveWebConfig",
    "MetricsServer",
    "Renderer",
    "WebState",
    "make_server",
]
