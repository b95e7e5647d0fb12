"""A loopback attack on an HTTP exporter, run as a process of its own (so that its work never
shares an interpreter lock with the scraper being measured):

    python -m tests.support.attack PORT SECONDS [--trickle N] [--trickle-gap S] [--pipeline N]
                           [--flood N] [--tls-stall N] [--tls-hello N] [--tls-garbage N]
                           [--guess N] [--reconnect RATE]
    python -m tests.support.attack scrape keepalive|fresh PORT SECONDS GAP_S [CA_FILE]

- trickle: N connections that send a request head one byte every S seconds and never finish
  it; each one the server cuts off is opened again at once;
- pipeline: N connections with a 4 KiB receive buffer that pipeline /metrics requests and never
  read a byte; each one the server cuts off is opened again;
- flood: N more connections, opened as fast as the server accepts them and held silent, so the
  open connections go past the server's limit; each one refused or cut off is opened again
  after 0.2 s;
- tls-stall: N connections that send the first 3 bytes of a TLS handshake record and stop; each
  one the server cuts off is opened again at once;
- tls-hello: N connections that send a whole TLS ClientHello and then nothing (once each: "then
  silence");
- tls-garbage: N connections at a time that send a TLS record header and 300 random bytes and
  close at once, each opened again at once (a bad-handshake flood);
- guess: N keep-alive connections that send /metrics with a wrong basic-auth password, again as
  soon as each answer comes (a brute force); each one closed is opened again at once;
- reconnect: RATE new connections per second, each silent until the server closes it (a
  reconnect flood).

One thread and one epoll set, whatever N. It prints what happened as JSON when done: per kind,
the connections opened, those the server closed, and the status lines it answered them with.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import http.client
import json
import os
import random
import resource
import selectors
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field

TRICKLE_HEAD = b"GET /metrics HTTP/1.1\r\nHost: node\r\nX-Trickle: "
PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: node\r\nAccept-Encoding: identity\r\n\r\n" * 64
REOPEN_FLOOD_S = 0.2
CONNECT_TIMEOUT_S = 3.0
TLS_STALL = b"\x16\x03\x01"
GARBAGE_BYTES = 300
ONE_SHOT = frozenset({"tls-hello", "reconnect"})  # not opened again when closed
GUESS = (
    b"GET /metrics HTTP/1.1\r\nHost: node\r\n"
    b"Authorization: Basic " + base64.b64encode(b"scraper0:wrong-password") + b"\r\n\r\n"
)


def client_hellos(count: int) -> list[bytes]:
    """Real ClientHellos (each with its own key share), as a TLS client's first flight."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    hellos = []
    for _ in range(count):
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(incoming, outgoing, server_hostname="node")
        with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
            obj.do_handshake()
        hellos.append(outgoing.read())
    return hellos


def garbage() -> bytes:
    """A handshake record header announcing GARBAGE_BYTES, then random bytes."""
    return b"\x16\x03\x01" + GARBAGE_BYTES.to_bytes(2, "big") + os.urandom(GARBAGE_BYTES)


@dataclass
class Tally:
    opened: int = 0
    closed_by_server: int = 0
    connect_failed: int = 0
    most_open: int = 0
    open_now: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


@dataclass
class _Conn:
    kind: str
    sock: socket.socket
    next_at: float
    sent: int = 0
    answer: bytes = b""
    connecting: bool = False


class Attack:
    def __init__(self, port: int, trickle_gap_s: float) -> None:
        self.addr = ("127.0.0.1", port)
        self.gap = trickle_gap_s
        self.sel = selectors.DefaultSelector()
        self.tally: dict[str, Tally] = {}
        self.pending: list[tuple[float, str]] = []  # (when, kind) connections to open
        self.conns: dict[int, _Conn] = {}
        self.hellos: list[bytes] = []

    def open(self, kind: str) -> None:
        """Start a non-blocking connect: a server whose accept queue is full stalls nothing."""
        self.tally.setdefault(kind, Tally())
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if kind == "pipeline":  # a small window: the server's writes stall at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        err = sock.connect_ex(self.addr)
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self._connect_failed(kind)
            return
        conn = _Conn(kind, sock, time.monotonic() + CONNECT_TIMEOUT_S, connecting=True)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_WRITE, conn)

    def _connect_failed(self, kind: str) -> None:
        self.tally[kind].connect_failed += 1
        self.pending.append((time.monotonic() + REOPEN_FLOOD_S, kind))

    def _connected(self, conn: _Conn) -> None:
        sock = conn.sock
        self.sel.unregister(sock)
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            del self.conns[sock.fileno()]
            sock.close()
            self._connect_failed(conn.kind)
            return
        conn.connecting = False
        now = time.monotonic()
        conn.next_at = now + random.uniform(0, self.gap)
        tally = self.tally[conn.kind]
        tally.opened += 1
        tally.open_now += 1
        tally.most_open = max(tally.most_open, tally.open_now)
        if conn.kind != "pipeline":  # a pipeliner never reads: its closing shows on a send
            self.sel.register(sock, selectors.EVENT_READ, conn)
        if conn.kind == "trickle":
            self._send(conn, TRICKLE_HEAD)
        elif conn.kind == "pipeline":
            conn.next_at = now + 1.0
            self._send(conn, PIPELINED)
        elif conn.kind == "tls-stall":
            conn.next_at = float("inf")
            self._send(conn, TLS_STALL)
        elif conn.kind == "tls-hello":
            conn.next_at = float("inf")
            self._send(conn, self.hellos[tally.opened % len(self.hellos)])
        elif conn.kind == "guess":
            conn.next_at = float("inf")
            self._send(conn, GUESS)
        elif conn.kind == "reconnect":
            conn.next_at = float("inf")
        elif conn.kind == "tls-garbage" and self._send(conn, garbage()):
            self._closed(conn, by_server=False)

    def _send(self, conn: _Conn, data: bytes) -> bool:
        try:
            conn.sent += conn.sock.send(data)
        except BlockingIOError:
            pass  # the server stopped reading us: still open
        except OSError:
            self._closed(conn)
            return False
        return True

    def _closed(self, conn: _Conn, by_server: bool = True) -> None:
        fd = conn.sock.fileno()
        if fd in self.conns:
            del self.conns[fd]
            if conn.kind != "pipeline":
                self.sel.unregister(conn.sock)
        conn.sock.close()
        tally = self.tally[conn.kind]
        tally.open_now -= 1
        if by_server:
            tally.closed_by_server += 1
            if conn.kind.startswith("tls"):
                status = "tls" if conn.answer else "none"  # records or alerts, not HTTP
            else:
                status = conn.answer.split(b"\r\n", 1)[0][9:12].decode("ascii", "replace")
            status = status or "none"
            tally.statuses[status] = tally.statuses.get(status, 0) + 1
        if conn.kind in ONE_SHOT:
            return
        delay = REOPEN_FLOOD_S if conn.kind == "flood" else 0.0
        self.pending.append((time.monotonic() + delay, conn.kind))

    def run(self, seconds: float, counts: dict[str, int]) -> dict[str, Tally]:
        end = time.monotonic() + seconds
        if counts.get("tls-hello"):
            self.hellos = client_hellos(min(64, counts["tls-hello"]))
        for kind, n in counts.items():
            if kind == "reconnect":  # n per second, spread evenly
                start = time.monotonic()
                self.pending += [(start + i / n, kind) for i in range(int(n * seconds))]
                continue
            self.pending += [(0.0, kind)] * n
        while (now := time.monotonic()) < end:
            due = [p for p in self.pending if p[0] <= now]
            self.pending = [p for p in self.pending if p[0] > now]
            for _, kind in due:
                self.open(kind)
                if time.monotonic() >= end:
                    break
            for key, _ in self.sel.select(timeout=0.05):
                conn: _Conn = key.data
                if conn.connecting:
                    self._connected(conn)
                    continue
                try:
                    data = conn.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    conn.answer = (conn.answer + data)[:4096]
                    if conn.kind == "guess" and conn.answer.endswith(b"\n"):
                        self._answered_guess(conn)
                else:
                    self._closed(conn)
            now = time.monotonic()
            for conn in list(self.conns.values()):
                if conn.next_at > now:
                    continue
                if conn.connecting:  # not accepted in time
                    self.sel.unregister(conn.sock)
                    del self.conns[conn.sock.fileno()]
                    conn.sock.close()
                    self._connect_failed(conn.kind)
                elif conn.kind == "trickle":
                    conn.next_at = now + self.gap
                    self._send(conn, b"a")
                elif conn.kind == "pipeline":
                    conn.next_at = now + 1.0
                    self._probe_pipeliner(conn)
        for conn in list(self.conns.values()):
            conn.sock.close()
        return self.tally

    def _answered_guess(self, conn: _Conn) -> None:
        status = conn.answer.split(b"\r\n", 1)[0][9:12].decode("ascii", "replace") or "none"
        tally = self.tally[conn.kind]
        tally.statuses[status] = tally.statuses.get(status, 0) + 1
        conn.answer = b""
        self._send(conn, GUESS)

    def _probe_pipeliner(self, conn: _Conn) -> None:
        # one more pipelined request: EAGAIN means open and stalled, an error means cut off
        try:
            conn.sock.send(PIPELINED[:16])
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self._closed(conn)


@dataclass(frozen=True)
class Scrape:
    at: float  # time.monotonic() at its start
    latency_s: float
    status: int  # 0: no answer (a timeout or a closed connection)


def _connection(
    port: int, timeout_s: float, context: ssl.SSLContext | None
) -> http.client.HTTPConnection:
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout_s, context=context)


def scrape_keepalive(
    port: int,
    seconds: float,
    gap_s: float,
    timeout_s: float = 1.0,
    path: str = "/metrics",
    *,
    context: ssl.SSLContext | None = None,
) -> list[Scrape]:
    """A well-behaved scraper: one keep-alive connection, as Prometheus keeps its own, with
    Prometheus's headers; a request that gets no answer within timeout_s counts as missed and
    the connection is opened again."""
    headers = {"Accept-Encoding": "gzip", "User-Agent": "wattprobe-test/scraper"}
    out: list[Scrape] = []
    conn: http.client.HTTPConnection | None = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            if conn is None:
                conn = _connection(port, timeout_s, context)
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException):
            status = 0
            if conn is not None:
                conn.close()
            conn = None
        latency = time.monotonic() - start
        out.append(Scrape(start, latency, status if latency <= timeout_s else 0))
        time.sleep(max(0.0, gap_s - latency))
    if conn is not None:
        conn.close()
    return out


def scrape_fresh(
    port: int,
    seconds: float,
    gap_s: float,
    timeout_s: float = 1.0,
    path: str = "/metrics",
    *,
    context: ssl.SSLContext | None = None,
) -> list[Scrape]:
    """A scraper that opens a new connection for every scrape (a restarted Prometheus, or one
    whose connection was dropped, must get in too)."""
    out: list[Scrape] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        conn = _connection(port, timeout_s, context)
        try:
            conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        latency = time.monotonic() - start
        out.append(Scrape(start, latency, status if latency <= timeout_s else 0))
        time.sleep(max(0.0, gap_s - latency))
    return out


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def scrape_main(argv: list[str]) -> None:
    """python -m tests.support.attack scrape keepalive|fresh PORT SECONDS GAP_S [CA_FILE]: the
    scrapes as JSON; over TLS (verified against CA_FILE) when a CA is given.

    A process of its own, so that the scraper waits for no interpreter lock of the benchmark's.
    """
    how, port, seconds, gap = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    context = ssl.create_default_context(cafile=argv[4]) if len(argv) > 4 else None
    scrape = scrape_keepalive if how == "keepalive" else scrape_fresh
    print(json.dumps([vars(s) for s in scrape(port, seconds, gap, context=context)]))


def main() -> None:
    if sys.argv[1:2] == ["scrape"]:
        scrape_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m tests.support.attack")
    parser.add_argument("port", type=int)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--trickle", type=int, default=0)
    parser.add_argument("--trickle-gap", type=float, default=3.0)
    parser.add_argument("--pipeline", type=int, default=0)
    parser.add_argument("--flood", type=int, default=0)
    parser.add_argument("--tls-stall", type=int, default=0)
    parser.add_argument("--tls-hello", type=int, default=0)
    parser.add_argument("--tls-garbage", type=int, default=0)
    parser.add_argument("--guess", type=int, default=0)
    parser.add_argument("--reconnect", type=int, default=0)
    args = parser.parse_args()
    # On a node the attacker is another pod with its own CPU; here it shares the machine with
    # the exporter, so it yields the CPU first rather than win by taking it (the same for every
    # exporter it attacks)
    os.nice(10)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.trickle + args.pipeline + args.flood + args.tls_stall + args.tls_hello
    need += args.tls_garbage + args.guess + args.reconnect * int(args.seconds) + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    attack = Attack(args.port, args.trickle_gap)
    counts = {
        "trickle": args.trickle,
        "pipeline": args.pipeline,
        "flood": args.flood,
        "tls-stall": args.tls_stall,
        "tls-hello": args.tls_hello,
        "tls-garbage": args.tls_garbage,
        "guess": args.guess,
        "reconnect": args.reconnect,
    }
    tally = attack.run(args.seconds, {k: v for k, v in counts.items() if v})
    print(json.dumps({k: vars(v) for k, v in tally.items()}))


if __name__ == "__main__":
    main()
