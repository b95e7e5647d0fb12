"""HTTP: /metrics from a per-snapshot cache, /healthz, /readyz and a landing page."""

from __future__ import annotations

import gzip
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.collector import SnapshotCollector
from exporter.exposition import TextRenderer
from exporter.snapshot import Snapshot

log = logging.getLogger(__name__)

# The classic text format: every name we expose is a legacy-valid name, and every Prometheus
# since 1.x (and other scrapers) reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ExpositionCache:
    """Renders the exposition once per snapshot; concurrent scrapes share the bytes."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot
        self._registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._key: int | None = None
        self._plain = b""
        self._gzipped = b""
        self._registry.register(_Pinned(self))
        self._pinned: Snapshot | None = None
        self._renderer = TextRenderer()  # generate_latest's output, label sets formatted once

    def get(self, want_gzip: bool) -> bytes:
        snap = self._snapshot()
        with self._lock:
            if self._key != snap.sequence or not self._plain:
                self._pinned = snap
                self._plain = self._renderer.render(self._registry.collect())
                self._gzipped = gzip.compress(self._plain, compresslevel=1)
                self._key = snap.sequence
            return self._gzipped if want_gzip else self._plain

    def pinned(self) -> Snapshot:
        assert self._pinned is not None
        return self._pinned


class _Pinned(SnapshotCollector):
    """Collects from the snapshot the cache decided to render (not a newer one mid-render)."""

    def __init__(self, cache: ExpositionCache) -> None:
        super().__init__(cache.pinned)


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


def make_handler(
    cache: ExpositionCache, health: Health, telemetry_path: str
) -> type[BaseHTTPRequestHandler]:
    landing = LANDING.format(version=__version__, path=telemetry_path).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = f"wattprobe/{__version__}"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == telemetry_path:
                want_gzip = "gzip" in self.headers.get("Accept-Encoding", "")
                body = cache.get(want_gzip)
                headers = {"Content-Type": CONTENT_TYPE}
                if want_gzip:
                    headers["Content-Encoding"] = "gzip"
                self._send(200, body, headers)
            elif path == "/healthz":
                ok = health.alive()
                self._send(200 if ok else 503, b"ok\n" if ok else b"monitor loop stalled\n")
            elif path == "/readyz":
                ok = health.ready()
                self._send(200 if ok else 503, b"ready\n" if ok else b"first interval not done\n")
            elif path == "/":
                self._send(200, landing, {"Content-Type": "text/html; charset=utf-8"})
            else:
                self._send(404, b"not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in (headers or {"Content-Type": "text/plain; charset=utf-8"}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(
    host: str, port: int, snapshot: Callable[[], Snapshot], health: Health, telemetry_path: str
) -> MetricsServer:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("MetricsServer", (MetricsServer,), {"address_family": family})
    handler = make_handler(ExpositionCache(snapshot), health, telemetry_path)
    server: MetricsServer = server_class((host, port), handler)
    return server
