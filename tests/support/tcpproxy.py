"""A TCP proxy on 127.0.0.1 that a test can cut like a dead WAN link.

While cut, nothing crosses it in either direction and nothing is refused or reset: bytes sent
into it vanish, new connections are accepted and then ignored, so a client sees what a dead link
shows it (a request that never gets an answer, until the client's own timeout). Restored,
new connections are forwarded again; the ones opened during the cut stay dead, as a TCP
connection over a link that dropped for minutes would.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass
class _Pipe:
    client: socket.socket
    upstream: socket.socket | None  # None: opened during a cut, a black hole


@dataclass
class TcpProxy:
    upstream_port: int
    port: int = 0
    _cut: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pipes: list[_Pipe] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._spawn(self._accept)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self._cut.set()

    def restore(self) -> None:
        """New connections are forwarded again; connections from before or during the cut stay
        dead (their peers time out), as after a real link outage."""
        with self._lock:
            dead = [p for p in self._pipes if p.upstream is None]
            for pipe in self._pipes:
                if pipe.upstream is not None:
                    pipe.upstream.close()
                    pipe.upstream = None  # its client's next request goes nowhere
            self._pipes = dead
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            for pipe in self._pipes:
                pipe.client.close()
                if pipe.upstream is not None:
                    pipe.upstream.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream: socket.socket | None = None
            if not self._cut.is_set():
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 5)
                except OSError:
                    client.close()  # the receiver is down: refused, as the receiver would
                    continue
            pipe = _Pipe(client, upstream)
            with self._lock:
                self._pipes.append(pipe)
            self._spawn(self._pump, pipe, True)
            if upstream is not None:
                self._spawn(self._pump, pipe, False)

    def _pump(self, pipe: _Pipe, from_client: bool) -> None:
        """Copy one direction; during a cut (or on a dead pipe) read and drop."""
        source = pipe.client if from_client else pipe.upstream
        assert source is not None
        source.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            if self._cut.is_set():
                continue  # vanishes on the dead link
            dest = pipe.upstream if from_client else pipe.client
            if dest is None:
                continue
            try:
                dest.sendall(data)
            except OSError:
                return
