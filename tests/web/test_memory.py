"""Closed connections are freed when they close, not left to the cyclic garbage collector.

CPython's asyncio socket transport holds a bound method of itself, a reference cycle. With the
exporter's high collector thresholds (exporter/app/runtime.py) a flood of connections left tens of
thousands of closed transports waiting for a full collection, and RSS grew by about 1 MiB every
2 s under tests/benchmarks/attack.py's attack (90 MiB after 44 s, still rising; 55 MiB flat
once the cycle is cut). The server cuts it when a connection is lost.
"""

from __future__ import annotations

import gc
import socket
import threading
import time

from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.web.server import Health, make_server
from tests.support.websec_support import read_all

CONNECTIONS = 60


def test_closed_connections_leave_no_garbage_cycles() -> None:
    server = make_server(
        "127.0.0.1",
        0,
        lambda: EMPTY_SNAPSHOT,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(max_connections=CONNECTIONS // 2, header_timeout_s=5.0),
    )
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        held = []
        for i in range(CONNECTIONS):  # answered, refused as malformed, silent
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 3 == 0:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
                assert read_all(sock).startswith(b"HTTP/1.1 200")
                sock.close()
            elif i % 3 == 1:
                sock.sendall(b"BAD\r\n\r\n")
                assert read_all(sock).startswith(b"HTTP/1.1 400")
                sock.close()
            else:
                held.append(sock)
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while server.connections:
            assert time.monotonic() < deadline, "connections still open"
            time.sleep(0.05)
        time.sleep(0.2)  # the last connection_lost callbacks
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if "Transport" in type(o).__name__]
        assert left == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        server.shutdown()
        server.server_close()
