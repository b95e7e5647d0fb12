from __future__ import annotations

import gzip
import http.client
import threading
from collections.abc import Iterator

import pytest

from exporter.model.snapshot import EMPTY_SNAPSHOT, Snapshot
from exporter.web.server import Health, make_server
from tests.support.running import parse_samples


@pytest.fixture
def server() -> Iterator[tuple[str, int, list[Snapshot], list[bool]]]:
    snaps = [EMPTY_SNAPSHOT]
    flags = [True]
    health = Health(alive=lambda: flags[0], ready=lambda: snaps[-1].ready)
    srv = make_server("127.0.0.1", 0, lambda: snaps[-1], health, "/metrics")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    host, port = srv.server_address[:2]
    yield str(host), int(port), snaps, flags
    srv.shutdown()
    srv.server_close()


def request(
    host: str, port: int, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), body


def test_metrics_plain_and_gzip(server: tuple[str, int, list[Snapshot], list[bool]]) -> None:
    host, port, _, _ = server
    status, headers, body = request(host, port, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = parse_samples(body.decode())
    assert (
        "wattprobe_build_info",
        frozenset({("version", "0.1.0"), ("python", __import__("platform").python_version())}),
    ) in samples
    status, headers, zipped = request(host, port, "/metrics", headers={"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped) == body


def test_health_ready_landing_and_unknown(
    server: tuple[str, int, list[Snapshot], list[bool]],
) -> None:
    host, port, snaps, flags = server
    assert request(host, port, "/healthz")[0] == 200
    assert request(host, port, "/readyz")[0] == 503
    snaps.append(Snapshot(**{**EMPTY_SNAPSHOT.__dict__, "ready": True, "sequence": 1}))
    assert request(host, port, "/readyz")[0] == 200
    flags[0] = False
    assert request(host, port, "/healthz")[0] == 503
    status, _, body = request(host, port, "/")
    assert status == 200 and b'href="/metrics"' in body
    assert request(host, port, "/nope")[0] == 404


def test_exposition_is_rendered_once_per_snapshot(
    server: tuple[str, int, list[Snapshot], list[bool]],
) -> None:
    host, port, snaps, _ = server
    first = request(host, port, "/metrics")[2]
    assert request(host, port, "/metrics")[2] == first
    snaps.append(Snapshot(**{**EMPTY_SNAPSHOT.__dict__, "sequence": 7}))
    assert b"wattprobe_intervals_total 7.0" in request(host, port, "/metrics")[2]
