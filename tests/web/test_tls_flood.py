"""TLS floods cost bounded memory that is freed when they end (issue 28), the short form of
`make bench --only attack`'s TLS attacks.

asyncio's own TLS gave each handshake a 256 KiB buffer and reference cycles that only a full
collection freed: 2,000 stalled handshakes took the agent from 37 to 649 MiB, and it stayed.
The connection now drives TLS over memory BIOs (exporter/web/tlsconn.py): a client that has not
sent a whole first record holds no TLS state, at most MAX_HANDSHAKES handshakes hold any (an
evicted one's is freed at once), and a closed connection leaves no cycle. Counted here in live
objects, with the cyclic collector off so that any cycle would show.
"""

from __future__ import annotations

import gc
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.web import server as web_server
from exporter.web.connection import Connection
from exporter.web.live import LiveWebConfig
from exporter.web.server import Health, MetricsServer, make_server
from exporter.web.tlsconn import NotTls, TlsSession, first_record_complete
from tests.support.attack import TLS_STALL, client_hellos, garbage
from tests.support.pki import Pki
from tests.support.websec_support import client_context, write_config

BOUND = 16
FLOOD = 150


def _live(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def tls_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[MetricsServer, Pki]]:
    monkeypatch.setattr(web_server, "MAX_HANDSHAKES", BOUND)
    monkeypatch.setattr(web_server, "HANDSHAKE_GRACE_S", 0.0)  # always give up the oldest
    pki = Pki.create(tmp_path / "pki")
    tls = {"cert_file": str(pki.server.cert), "key_file": str(pki.server.key)}
    config = write_config(tmp_path / "web.yml", {"tls_server_config": tls})
    server = make_server(
        "127.0.0.1",
        0,
        lambda: EMPTY_SNAPSHOT,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(max_connections=4 * FLOOD, header_timeout_s=60.0),
        web=LiveWebConfig.load(config),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, pki
    server.shutdown()
    server.server_close()


def _get(sock: ssl.SSLSocket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
    return sock.recv(4096)


def _raw(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(data)
    return sock


@pytest.mark.slow
def test_tls_floods_hold_bounded_state_and_leave_nothing(
    tls_server: tuple[MetricsServer, Pki],
) -> None:
    server, pki = tls_server
    port = server.server_address[1]
    context = client_context(pki.ca)
    keepalive = context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="127.0.0.1"
    )
    assert _get(keepalive).startswith(b"HTTP/1.1 200")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    held: list[socket.socket] = []
    try:
        # 1. stalled handshakes: 3 bytes each, no TLS state at all
        held += [_raw(port, TLS_STALL) for _ in range(FLOOD)]
        _until(lambda: len(server.connections) >= FLOOD + 1)
        assert _live(TlsSession) == 1  # the keep-alive scraper's
        assert _live(ssl.SSLObject) == 1

        # 2. silent ClientHellos: at most BOUND hold TLS state; the others were given up
        hellos = client_hellos(8)
        held += [_raw(port, hellos[i % len(hellos)]) for i in range(FLOOD)]
        _until(lambda: server.counters.shed_tls_handshake >= FLOOD - BOUND)
        assert len(server.handshaking) <= BOUND
        assert _live(ssl.SSLObject) <= BOUND + 1

        # 3. bad handshakes, each closed at once
        for _ in range(FLOOD):
            _raw(port, garbage()).close()

        # scrapers: the keep-alive one and a new one are answered all along
        assert _get(keepalive).startswith(b"HTTP/1.1 200")
        with context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="127.0.0.1"
        ) as new:
            assert _get(new).startswith(b"HTTP/1.1 200")
        assert _live(ssl.SSLObject) <= BOUND + 1

        for sock in held:
            sock.close()
        _until(lambda: len(server.connections) == 1)
        time.sleep(0.2)  # the last connection_lost callbacks
        assert _live(Connection) == 1  # the keep-alive scraper's, and nothing left to collect
        assert _live(TlsSession) == 1
        gc.collect()
        cycles = [type(o).__name__ for o in gc.garbage]
        assert not any(
            n in {"Connection", "TlsSession", "SSLObject", "TlsTransport"} for n in cycles
        )
        assert _get(keepalive).startswith(b"HTTP/1.1 200")
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        for sock in held:
            sock.close()
        keepalive.close()


def test_first_record_rules() -> None:
    hello = client_hellos(1)[0]
    assert not first_record_complete(b"")
    assert not first_record_complete(hello[:3])
    assert not first_record_complete(hello[:-1])
    assert first_record_complete(hello)
    with pytest.raises(NotTls):
        first_record_complete(b"GET / HTTP/1.1\r\n")  # plain HTTP on the TLS port
    with pytest.raises(NotTls):
        first_record_complete(b"\x16\x03\x01\xff\xff")  # longer than TLS allows
    with pytest.raises(NotTls):
        first_record_complete(b"\x16\x03\x01\x00\x00")
