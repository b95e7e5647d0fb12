"""What each path answers: /metrics (from the rendered exposition), /healthz, /readyz, a landing
page. Only GET and HEAD; a body never echoes the request."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from exporter import __version__
from exporter.exposition.cache import ExpositionCache
from exporter.web.http import Request, Response

# The classic text format: every name we expose is a legacy-valid name, and every Prometheus
# since 1.x (and other scrapers) reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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


def with_headers(response: Response, headers: tuple[tuple[str, str], ...]) -> Response:
    if not headers:
        return response
    return Response(
        response.status,
        response.body,
        response.content_type,
        response.headers + headers,
        response.close,
    )


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
