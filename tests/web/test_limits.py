"""The connection limit on the event loop (docs/security.md): at the limit a new connection
replaces the oldest connection that has had no request answered once that one is a second old;
a connection that has been answered (a scraper keeping its connection) is never given up, and
a new connection finding none to replace gets 503."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.web.server import EVICT_AFTER_S, Health, MetricsServer, make_server
from tests.support.websec_support import read_all, status_of

LIMIT = 4


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = make_server(
        "127.0.0.1",
        0,
        lambda: EMPTY_SNAPSHOT,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(max_connections=LIMIT, header_timeout_s=10.0),
    )
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _connect(srv: MetricsServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=5)


def _healthz(sock: socket.socket) -> int:
    sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
    return status_of(sock.recv(4096))


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return True


def test_a_new_connection_replaces_the_oldest_silent_one(server: MetricsServer) -> None:
    silent = [_connect(server) for _ in range(LIMIT)]
    time.sleep(EVICT_AFTER_S + 0.3)
    with _connect(server) as scraper:
        assert _healthz(scraper) == 200
    assert _closed(silent[0])  # the oldest was given up
    for sock in silent:
        sock.close()


def test_answered_and_young_connections_are_kept(server: MetricsServer) -> None:
    kept = [_connect(server) for _ in range(LIMIT)]
    for sock in kept:
        assert _healthz(sock) == 200  # each one a scraper holding its connection
    time.sleep(EVICT_AFTER_S + 0.3)
    with _connect(server) as extra:
        answer = read_all(extra)
    assert status_of(answer) == 503 and b"Retry-After: 1" in answer
    for sock in kept:
        assert _healthz(sock) == 200  # none was closed for the newcomer
        sock.close()
