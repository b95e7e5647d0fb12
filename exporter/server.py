"""HTTP: /metrics from a per-snapshot cache, /healthz, /readyz and a landing page.

Hardened for a port that every pod on the node can reach (see docs/security.md): a bounded
number of connections, each served by its own thread under read/write deadlines
(exporter.web.http), a bounded number of scrapes in flight, only GET and HEAD on the four
defined paths, and TLS / basic auth / response headers from --web.config.file
(exporter.web.live), re-read when the file changes.
"""

from __future__ import annotations

import contextlib
import gzip
import html
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector

from exporter import __version__
from exporter.collector import SnapshotCollector
from exporter.config import HttpLimits
from exporter.exposition import TextRenderer
from exporter.snapshot import Snapshot
from exporter.web.http import (
    Connection,
    HttpError,
    ReadTimeout,
    Request,
    Response,
    error_response,
    linger,
    render,
)
from exporter.web.live import LiveWebConfig, WebState
from exporter.web.tls import san_allowed

log = logging.getLogger(__name__)

# The classic text format: every name we expose is a legacy-valid name, and every Prometheus
# since 1.x (and other scrapers) reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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

    def get(self, want_gzip: bool) -> bytes:
        snap = self._snapshot()
        with self._lock:
            if self._key != snap.sequence or not self._plain:
                self._pinned = snap
                self._plain = self._renderer.render(self._registry.collect())
                self._gzipped = None
                self._key = snap.sequence
            if not want_gzip:
                return self._plain
            if self._gzipped is None:
                self._gzipped = gzip.compress(self._plain, compresslevel=1)
            return self._gzipped

    def pinned(self) -> Snapshot:
        assert self._pinned is not None
        return self._pinned


class _Pinned(SnapshotCollector):
    """Collects from the snapshot the cache decided to render (not a newer one mid-render)."""

    def __init__(self, cache: ExpositionCache, *, containers: bool) -> None:
        super().__init__(cache.pinned, containers=containers)


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
# Written by the accepting thread, without reading the request, when all connection slots are
# taken: it is short enough to fit any socket buffer, so sending it never blocks.
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

    def handle(self, req: Request) -> Response:
        if req.path not in self.paths:
            return Response(404, b"404 Not Found\n")
        if req.method not in ("GET", "HEAD"):
            return Response(405, b"405 Method Not Allowed\n", headers=ALLOW)
        if req.path == self.telemetry_path:
            want_gzip = _accepts_gzip(req.header("accept-encoding"))
            headers: tuple[tuple[str, str], ...] = (("Vary", "Accept-Encoding"),)
            if want_gzip:
                headers += (("Content-Encoding", "gzip"),)
            return Response(200, self.cache.get(want_gzip), CONTENT_TYPE, headers)
        if req.path == "/healthz":
            ok = self.health.alive()
            return Response(200 if ok else 503, b"ok\n" if ok else b"monitor loop stalled\n")
        if req.path == "/readyz":
            ok = self.health.ready()
            return Response(200 if ok else 503, b"ready\n" if ok else b"first interval not done\n")
        return Response(200, self._landing, "text/html; charset=utf-8")


class MetricsServer(socketserver.TCPServer):
    """Accepts on one thread; each connection gets a thread of its own, up to max_connections."""

    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        routes: Routes,
        limits: HttpLimits,
        web: LiveWebConfig | None,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.web = web
        self._connections = threading.BoundedSemaphore(limits.max_connections)
        self._scrapes = (
            threading.BoundedSemaphore(limits.max_requests) if limits.max_requests > 0 else None
        )
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, socketserver.BaseRequestHandler)

    @property
    def scheme(self) -> str:
        return "https" if self.web is not None and self.web.tls else "http"

    # -- accepting ----------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        sock: socket.socket = request
        if not self._connections.acquire(blocking=False):
            self._refuse(sock)
            return
        try:
            threading.Thread(
                target=self._connection_thread,
                args=(sock, client_address),
                name="http-connection",
                daemon=True,
            ).start()
        except BaseException:
            self._connections.release()
            raise

    def _refuse(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            if self.scheme == "http":
                sock.setblocking(False)
                sock.send(BUSY)
        self.shutdown_request(sock)

    def _connection_thread(self, sock: socket.socket, client_address: Any) -> None:
        started = time.monotonic()
        self._track(sock, True)
        try:
            self._serve_connection(sock, started)
        except (OSError, ssl.SSLError, ReadTimeout) as exc:
            log.debug("connection from %r ended: %r", client_address, exc)
        except Exception:
            log.exception("connection from %r failed", client_address)
        finally:
            self._track(sock, False)
            self.shutdown_request(sock)
            self._connections.release()

    def _track(self, sock: socket.socket, opened: bool) -> None:
        with self._open_lock:
            if opened:
                self._open.add(sock)
            else:
                self._open.discard(sock)

    def server_close(self) -> None:
        super().server_close()
        with self._open_lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # -- one connection -----------------------------------------------------------------

    def _serve_connection(self, sock: socket.socket, started: float) -> None:
        deadline = started + self.limits.header_timeout_s
        conn_sock = sock
        if self.web is not None and self.web.tls:
            tls = self._handshake(sock, deadline)
            if tls is None:
                return
            conn_sock = tls
        try:
            self._serve_requests(Connection(conn_sock, self.limits), deadline)
        finally:
            if conn_sock is not sock:
                conn_sock.close()

    def _handshake(self, sock: socket.socket, deadline: float) -> ssl.SSLSocket | None:
        assert self.web is not None
        state = self.web.current()
        if state.context is None:
            return None
        tls = state.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        try:
            # CPython's do_handshake keeps one deadline across all its reads: a client that
            # trickles its hello byte by byte is cut off all the same.
            tls.settimeout(max(deadline - time.monotonic(), 0.001))
            tls.do_handshake()
            tls_config = state.config.tls
            if tls_config is not None and not san_allowed(
                tls.getpeercert(), tls_config.client_allowed_sans
            ):
                log.debug("client certificate has none of client_allowed_sans")
                raise ssl.SSLError("client certificate not allowed")
        except BaseException:
            tls.close()
            raise
        return tls

    def _serve_requests(self, conn: Connection, deadline: float | None) -> None:
        while True:
            try:
                req = conn.read_request(deadline)
            except HttpError as exc:
                refusal = error_response(exc.status, self._extra_headers())
                conn.send(render(refusal, head_only=False))
                linger(conn.sock)
                return
            except ReadTimeout as exc:
                if exc.got_bytes:
                    conn.send(render(error_response(408, self._extra_headers()), head_only=False))
                    linger(conn.sock)
                return
            if req is None:
                return
            deadline = None  # later requests: idle timeout, then header timeout
            response, slot = self._respond(req)
            close = response.close or not req.keep_alive or req.has_body
            if close and not response.close:
                response = Response(
                    response.status, response.body, response.content_type, response.headers, True
                )
            try:
                conn.send(
                    render(
                        response,
                        head_only=req.method == "HEAD",
                        keep_alive_10=req.version == "HTTP/1.0" and not close,
                    )
                )
            finally:
                # a scrape holds its slot until its response is written (a slow reader counts)
                if slot and self._scrapes is not None:
                    self._scrapes.release()
            if close:
                if req.has_body:
                    linger(conn.sock)  # the unread body must not turn into a reset
                return

    def _respond(self, req: Request) -> tuple[Response, bool]:
        """The response, and whether it holds a scrape slot that must be released."""
        extra: tuple[tuple[str, str], ...] = ()
        if self.web is not None:
            state = self.web.current()
            extra = state.config.headers
            if state.auth.enabled and not state.auth.check(req.header("authorization")):
                unauthorized = Response(401, b"401 Unauthorized\n")
                return _with_headers(unauthorized, WWW_AUTHENTICATE + extra), False
        slot = False
        scrape = req.path == self.routes.telemetry_path and req.method in ("GET", "HEAD")
        if scrape and self._scrapes is not None:
            if not self._scrapes.acquire(blocking=False):
                return _with_headers(error_response(503, RETRY_AFTER), extra), False
            slot = True
        try:
            return _with_headers(self.routes.handle(req), extra), slot
        except Exception:
            # a rendering bug must cost one response, not the connection thread or a slot
            log.exception("serving %s failed", self.routes.telemetry_path)
            if slot and self._scrapes is not None:
                self._scrapes.release()
            return _with_headers(error_response(500), extra), False

    def _extra_headers(self) -> tuple[tuple[str, str], ...]:
        if self.web is None:
            return ()
        return self.web.current().config.headers


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
    server_class = type("MetricsServer", (MetricsServer,), {"address_family": family})
    routes = Routes(ExpositionCache(snapshot, containers=containers), health, telemetry_path)
    server: MetricsServer = server_class((host, port), routes, limits or HttpLimits(), web)
    return server


__all__ = [
    "ExpositionCache",
    "Health",
    "HttpLimits",
    "LiveWebConfig",
    "MetricsServer",
    "WebState",
    "make_server",
]
