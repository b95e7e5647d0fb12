"""Where `wattprobe top` gets its scrapes: its own Monitor, or a running exporter's /metrics.

A feed runs in a thread and hands each new scrape (or a one-line problem) to a callback; it never
raises into the screen.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from exporter.accounting.monitor import Monitor
from exporter.app.top.scrape import Scrape, from_snapshot, from_text

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 5.0
INTERVAL_LINES = ("wattprobe_intervals_total", "wattprobe_last_interval_timestamp_seconds")
MAX_BODY_BYTES = 64 << 20  # a /metrics page is a few MB at most; more is not an exporter


@dataclass(frozen=True)
class Scraped:
    scrape: Scrape


@dataclass(frozen=True)
class Problem:
    message: str  # one line, shown until the next scrape
    retrying: bool = False  # the feed keeps trying


FeedEvent = Scraped | Problem
Emit = Callable[[FeedEvent], None]


class MonitorFeed:
    """Steps this process's own Monitor every interval, as `serve` does."""

    def __init__(
        self, monitor: Monitor, interval_s: float, close: Callable[[], None] | None = None
    ) -> None:
        """close: releases what the monitor was built with (wiring.Parts.close); None: the
        monitor alone."""
        self.label = "this node"
        self.interval_s = interval_s
        # what the screen says until the first frame: before the first scrape, then after it
        self.starting = "reading the sources"
        self.waiting = "measuring the first interval"
        self.expected_s: float | None = interval_s
        self._monitor = monitor
        self._close = close or monitor.close
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, emit: Emit) -> None:
        def stepped() -> None:
            emit(Scraped(from_snapshot(self._monitor.snapshot, time.monotonic())))

        def loop() -> None:
            self._monitor.run(self.interval_s, self._stop, on_step=stepped)

        self._thread = threading.Thread(target=loop, name="monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close()


def fetch(url: str, timeout: float = FETCH_TIMEOUT_S) -> str:
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})  # noqa: S310 (http and https only, checked by the caller)
    with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310
        body: bytes = resp.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"more than {MAX_BODY_BYTES >> 20} MiB: not a wattprobe /metrics page")
    return body.decode("utf-8", errors="replace")


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        return getattr(reason, "strerror", None) or str(reason)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class HttpFeed:
    """Reads an exporter's /metrics every poll_s; hands on a scrape when an interval ended."""

    def __init__(
        self,
        url: str,
        poll_s: float,
        read: Callable[[str], str] = fetch,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = url
        self.interval_s = poll_s
        self.starting = f"reading {url}"
        self.waiting = "waiting for the exporter's next interval"
        self.expected_s: float | None = None  # the exporter's interval is not in its metrics
        self._url = url
        self._read = read
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, emit: Emit) -> None:
        self._thread = threading.Thread(target=self._loop, args=(emit,), name="fetch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=FETCH_TIMEOUT_S + 1)

    def _loop(self, emit: Emit) -> None:
        last = ""
        while not self._stop.is_set():
            try:
                text = self._read(self._url)
                marker = interval_marker(text)
                # parsing a large page costs far more than fetching it: parse new intervals only
                scrape = from_text(text, self._clock()) if marker and marker != last else None
            except Exception as exc:  # unreachable, refused, not an exposition: say so, retry
                emit(Problem(f"cannot read {self._url}: {describe_error(exc)}", retrying=True))
            else:
                if not marker:
                    emit(Problem(f"{self._url} is not wattprobe's /metrics", retrying=True))
                elif scrape is not None:
                    last = marker
                    emit(Scraped(scrape))
            self._stop.wait(self.interval_s)


def interval_marker(text: str) -> str:
    """The lines that change with each interval (its count and end time); "" when not there."""
    found = []
    for name in INTERVAL_LINES:
        start = text.find(f"\n{name} ")
        if start >= 0:
            end = text.find("\n", start + 1)
            found.append(text[start + 1 : end if end >= 0 else len(text)])
    return "\n".join(found) if found and found[0].startswith(INTERVAL_LINES[0]) else ""
