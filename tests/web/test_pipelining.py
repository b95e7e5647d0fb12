"""Pipelining clients that read slowly (issue 41): what a connection buffers stays bounded, and
the write timeout cuts them.

Real sockets on 127.0.0.1 against an in-process server; every loop is bounded by a count, so a
regression fails instead of hanging. Before: reading resumed at every answer, so a client
sending 64 requests per write grew its request buffer by a whole socket read per answer
(100 MiB held by 100 such clients in 35 s), and each answer got a fresh write deadline, so a
client that read a little now and then was never cut.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.web.connection import READ_SIZE
from exporter.web.server import Health, MetricsServer, make_server

WRITE_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 4096
# one head and one read, per connection; consumed bytes are dropped once they are half the buffer
BUFFER_BOUND = 2 * (MAX_HEADER_BYTES + READ_SIZE)
PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64
ROUNDS = 1200  # each round sleeps STEP_S: a bound, never reached when the server cuts
STEP_S = 0.05


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    made = make_server(
        "127.0.0.1",
        0,
        lambda: EMPTY_SNAPSHOT,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(
            max_header_bytes=MAX_HEADER_BYTES,
            max_request_line=MAX_HEADER_BYTES,
            write_timeout_s=WRITE_TIMEOUT_S,
            idle_timeout_s=60.0,
        ),
    )
    thread = threading.Thread(target=made.serve_forever, daemon=True)
    thread.start()
    yield made
    made.shutdown()
    made.server_close()
    thread.join(10)


def slow_reader(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def buffered(server: MetricsServer) -> int:
    """The most request bytes any connection holds now (read from the test's thread: ints)."""
    for _ in range(100):
        with contextlib.suppress(RuntimeError):  # the set changed size on the loop's thread
            return max((c.reader.buffered for c in list(server.connections)), default=0)
    raise AssertionError("connections kept changing")


def test_pipelining_slow_readers_stay_bounded_and_are_cut(server: MetricsServer) -> None:
    port = server.server_address[1]
    clients = [slow_reader(port) for _ in range(2)]
    open_ = set(range(len(clients)))
    most = 0
    try:
        for _ in range(ROUNDS):
            for i in list(open_):
                sock = clients[i]
                try:
                    with contextlib.suppress(BlockingIOError):
                        sock.send(PIPELINED)  # as much as the server lets in
                    got = sock.recv(65536)  # what its small window holds, now and then
                except BlockingIOError:
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    got = b""  # cut
                if not got:
                    open_.discard(i)
            most = max(most, buffered(server))
            if not open_:
                break
            time.sleep(STEP_S)
        assert most <= BUFFER_BOUND
        assert not open_, "a pipelining slow reader was never cut by the write timeout"
        assert server.counters.shed_slow_reader >= len(clients)
    finally:
        for sock in clients:
            sock.close()


def test_a_client_that_keeps_up_is_answered_every_pipelined_request(
    server: MetricsServer,
) -> None:
    """Pipelining itself is fine: a client that reads everything gets every answer."""
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        requests = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 200
        sock.sendall(requests[:-4] + b"\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200") == 200
