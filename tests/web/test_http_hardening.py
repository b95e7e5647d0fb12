"""HTTP hardening, against a real `wattprobe serve` over loopback with raw sockets and http.client.

Every wait is bounded by the server's own (shortened) limits and a socket timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT, Snapshot
from exporter.web.server import Health, make_server
from tests.support.fixturehost import FixtureHost
from tests.support.running import ExporterProcess, start_exporter
from tests.support.websec_support import raw_connection, read_all, request, status_of

HEADER_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 6
MAX_HEADER_BYTES = 4096
MARKER = "zq7marker"  # never to be found in a response


@pytest.fixture
def limited(host: FixtureHost, tmp_path: Path) -> Iterator[ExporterProcess]:
    proc = start_exporter(
        [
            *host.args(),
            "--web.read-header-timeout",
            f"{HEADER_TIMEOUT_S}s",
            "--web.idle-timeout",
            f"{IDLE_TIMEOUT_S}s",
            "--web.max-connections",
            str(MAX_CONNECTIONS),
            "--web.max-header-bytes",
            str(MAX_HEADER_BYTES),
        ],
        log_dir=tmp_path,
    )
    yield proc
    proc.stop()


def exchange(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, half-close, and read everything the server answers until it closes."""
    with raw_connection(port, timeout) as sock:
        sock.sendall(raw)
        return read_all(sock)


def test_only_get_and_head_on_defined_paths(limited: ExporterProcess) -> None:
    port = limited.port
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "FOO"):
        reply = request(port, "/metrics", method=method)
        assert reply.status == 405, method
        assert reply.headers["allow"] == "GET, HEAD"
        assert reply.headers["content-type"].startswith("text/plain")
        assert request(port, "/nope", method=method).status == 404
    head = request(port, "/metrics", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert int(head.headers["content-length"]) > 0
    assert request(port, "/metrics?debug=1").status == 200
    for path in ("/metrics/", "//metrics", "/metrics/../metrics", "/METRICS", "/%6detrics"):
        assert request(port, path).status == 404, path
    for path, kind in (("/", "text/html"), ("/healthz", "text/plain"), ("/readyz", "text/plain")):
        reply = request(port, path)
        assert reply.headers["content-type"].startswith(kind), path


@pytest.mark.parametrize(
    "raw",
    [
        f"GET /{MARKER}<script> HTTP/1.1\r\n\r\n",
        f"{MARKER} /metrics HTTP/1.1\r\n\r\n",
        f"GET /metrics HTTP/1.1{MARKER}\r\n\r\n",
        f"GET /metrics HTTP/9.{MARKER}\r\n\r\n",
        f"GET /metrics HTTP/1.1\r\n{MARKER}\r\n\r\n",
        f"GET /metrics HTTP/1.1\r\nX-{MARKER}: \x01\r\n\r\n",
        f"GET\t/{MARKER}\r\n\r\n",
    ],
)
def test_no_reflection_of_request_bytes(limited: ExporterProcess, raw: str) -> None:
    answer = exchange(limited.port, raw.encode())
    assert status_of(answer) in (400, 404, 405, 505)
    assert MARKER.encode() not in answer
    assert b"\r\ncontent-type: " in answer.lower()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * MAX_HEADER_BYTES + b"\r\n\r\n", 431),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-H: v\r\n" * 101 + b"\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX-A : b\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX-A: b\x00c\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # TLS to a plain port
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    ],
)
def test_malformed_and_oversized_heads(limited: ExporterProcess, raw: bytes, status: int) -> None:
    answer = exchange(limited.port, raw)
    assert status_of(answer) == status
    assert b"\r\nConnection: close\r\n" in answer


def test_slowloris_is_cut_off_at_the_header_timeout(limited: ExporterProcess) -> None:
    with raw_connection(limited.port, timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        answer = b""
        for _ in range(40):  # would take 8 s to finish; the server must not wait that long
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            time.sleep(0.2)
            if time.monotonic() - start > HEADER_TIMEOUT_S + 0.5:
                answer = read_all(sock)
                break
        elapsed = time.monotonic() - start
    assert status_of(answer) == 408
    assert elapsed < HEADER_TIMEOUT_S + 3


def test_silent_and_idle_connections_are_closed(limited: ExporterProcess) -> None:
    with raw_connection(limited.port, timeout=10) as sock:
        start = time.monotonic()
        assert read_all(sock) == b""  # never sent a byte: closed without an answer
        assert time.monotonic() - start < HEADER_TIMEOUT_S + 2
    conn = http.client.HTTPConnection("127.0.0.1", limited.port, timeout=10)
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200 and not resp.will_close
    assert conn.sock is not None
    start = time.monotonic()
    assert conn.sock.recv(1) == b""  # idle keep-alive connection closed by the server
    assert IDLE_TIMEOUT_S - 0.5 < time.monotonic() - start < IDLE_TIMEOUT_S + 2
    conn.close()


def test_keep_alive_pipelining_and_bodies(limited: ExporterProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", limited.port, timeout=5)
    for _ in range(3):
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and b"wattprobe_build_info" in resp.read()
    conn.close()
    two = exchange(
        limited.port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    assert two.count(b"HTTP/1.1 ") == 2
    # a body is never read: the request is answered and the connection closed, so the body
    # cannot be taken for a second request
    smuggled = b"GET /nope HTTP/1.1\r\n\r\n"
    answer = exchange(
        limited.port,
        b"GET /healthz HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled),
    )
    assert answer.count(b"HTTP/1.1 ") == 1 and status_of(answer) == 200
    assert b"Connection: close" in answer
    http10 = exchange(limited.port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status_of(http10) == 200


def test_connection_limit_lets_a_newcomer_in_past_held_connections(
    limited: ExporterProcess,
) -> None:
    held = [socket.create_connection(("127.0.0.1", limited.port), timeout=5)]
    try:
        for _ in range(MAX_CONNECTIONS - 1):
            held.append(socket.create_connection(("127.0.0.1", limited.port), timeout=5))
        for sock in held:  # answered keep-alive connections, then idle
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert status_of(sock.recv(4096)) == 200
        # the one idle longest gives way (issue 41: before, the newcomer got 503 until the
        # idle timeout)
        assert request(limited.port).status == 200
        held[0].settimeout(5)
        assert held[0].recv(4096) == b""
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while request(limited.port).status != 200:
        assert time.monotonic() < deadline, "did not recover after the connections closed"
        time.sleep(0.05)


def test_scrapes_in_flight_are_bounded() -> None:
    """A scrape that cannot finish (its snapshot blocks) holds a slot; over the limit -> 503."""
    release = threading.Event()

    def slow_snapshot() -> Snapshot:
        release.wait(10)
        return EMPTY_SNAPSHOT

    server = make_server(
        "127.0.0.1",
        0,
        slow_snapshot,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(max_requests=2, max_connections=8),
    )
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    results: list[int] = []
    blocked = [
        threading.Thread(target=lambda: results.append(request(port, timeout=15).status))
        for _ in range(2)
    ]
    try:
        for t in blocked:
            t.start()
        time.sleep(0.5)
        start = time.monotonic()
        over = request(port)
        assert over.status == 503 and over.headers["retry-after"] == "1"
        assert time.monotonic() - start < 2  # answered at once, not queued
        assert request(port, "/healthz").status == 200  # other paths unaffected
        release.set()
        for t in blocked:
            t.join(15)
        assert results == [200, 200]
        assert request(port).status == 200  # slots came back
    finally:
        release.set()
        server.shutdown()
        server.server_close()


# -- abuse ------------------------------------------------------------------------------

SLOW_CLIENTS = 12
HUGE_HEADER_CLIENTS = 3
SILENT_CLIENTS = 4
ABUSE_S = 6.0


def _slow_client(port: int, stop: threading.Event, cut_off: list[int]) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                while not stop.is_set():
                    sock.sendall(b"X")  # one byte at a time, never a full header line
                    time.sleep(0.1)
        except OSError:
            cut_off.append(1)  # the server hung up on us
            time.sleep(0.05)


def _huge_header_client(port: int, stop: threading.Event, statuses: list[int]) -> None:
    head = b"GET /metrics HTTP/1.1\r\nCookie: " + b"c" * (1 << 20) + b"\r\n\r\n"
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                with contextlib.suppress(OSError):  # the server stops reading at its limit
                    sock.sendall(head)
                answer = read_all(sock)
                if answer:
                    statuses.append(status_of(answer))
        except OSError:
            time.sleep(0.05)


def _silent_client(port: int, stop: threading.Event, cut_off: list[int]) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
                start = time.monotonic()
                read_all(sock)  # hold the connection until the server drops it
                if time.monotonic() - start < 3:
                    cut_off.append(1)
        except OSError:
            time.sleep(0.05)


def _socket_count(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def test_abuse_leaves_scrapes_served(host: FixtureHost, tmp_path: Path) -> None:
    exporter = start_exporter([*host.args(), "--web.read-header-timeout", "2s"], log_dir=tmp_path)
    try:
        baseline = _socket_count(exporter.proc.pid)
        stop = threading.Event()
        statuses: list[int] = []
        slow_cut: list[int] = []
        silent_cut: list[int] = []
        threads = [
            threading.Thread(target=_slow_client, args=(exporter.port, stop, slow_cut), daemon=True)
            for _ in range(SLOW_CLIENTS)
        ]
        threads += [
            threading.Thread(
                target=_huge_header_client, args=(exporter.port, stop, statuses), daemon=True
            )
            for _ in range(HUGE_HEADER_CLIENTS)
        ]
        threads += [
            threading.Thread(
                target=_silent_client, args=(exporter.port, stop, silent_cut), daemon=True
            )
            for _ in range(SILENT_CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)
        latencies: list[float] = []
        end = time.monotonic() + ABUSE_S
        while time.monotonic() < end:
            start = time.monotonic()
            status, body = exporter.get(timeout=5)
            latencies.append(time.monotonic() - start)
            assert status == 200 and "wattprobe_build_info" in body
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert len(latencies) >= 10
        assert max(latencies) < 3.0, latencies  # a loose bound: served, not starved
        assert statuses and set(statuses) == {431}
        # the abusers were cut off by the header deadline (2 s), not left to hold on
        assert len(slow_cut) >= SLOW_CLIENTS and len(silent_cut) >= SILENT_CLIENTS
        assert exporter.proc.poll() is None
        # every abusive connection is gone again once the abuse stops
        deadline = time.monotonic() + 10
        while _socket_count(exporter.proc.pid) > baseline:
            assert time.monotonic() < deadline, "connections left open after the abuse"
            time.sleep(0.1)
    finally:
        exporter.stop()


def test_a_failing_render_is_a_500_not_a_dead_server() -> None:
    calls = [0]

    def broken_snapshot() -> Snapshot:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("collector bug")
        return EMPTY_SNAPSHOT

    server = make_server(
        "127.0.0.1",
        0,
        broken_snapshot,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(max_requests=1),
    )
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reply = request(port)
        assert reply.status == 500 and b"collector bug" not in reply.body
        assert request(port).status == 200  # the one scrape slot was given back
    finally:
        server.shutdown()
        server.server_close()
