"""TLS for one connection over memory BIOs, with memory bounded by what the client has proven.

asyncio's own TLS (loop.start_tls, SSLProtocol) gives every connection a 256 KiB receive buffer
the moment its handshake starts, and its protocol, transport and waiter objects form reference
cycles that only a full collection frees: 2,000 stalled handshakes took the agent from 37 to
649 MiB, and it stayed there (issue 28). Here the connection's own protocol drives an
ssl.SSLObject over two MemoryBIOs:

- nothing TLS is allocated until the client's first record is complete: a client that sends
  3 bytes and stops holds those bytes, not an SSL object; a first byte that is not a TLS
  handshake record, or a record longer than TLS allows, ends the connection at once;
- each received chunk is decrypted at once and the BIOs are drained after every call, so the
  incoming BIO never holds more than one read from the socket, and the outgoing one nothing
  once the call returns (OpenSSL's own record buffers are released between records: CPython
  sets SSL_MODE_RELEASE_BUFFERS on every context);
- no object here refers back to the connection, so a closed one is freed by reference counts.

TlsTransport is the plaintext transport the HTTP connection writes to once the handshake is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

RECORD_HEADER = 5
HANDSHAKE_RECORD = 0x16
# RFC 8446 5.1: a TLSPlaintext fragment is at most 2^14 bytes; a ClientHello fits one record in
# practice (post-quantum key shares included, ~1.8 KiB).
MAX_FIRST_RECORD = 2**14
READ_CHUNK = 2**14


class NotTls(Exception):
    """The client's first bytes cannot start a TLS handshake."""


def first_record_complete(data: bytes | bytearray) -> bool:
    """Whether data holds the whole first TLS record; raises NotTls when it cannot be TLS."""
    if not data:
        return False
    if data[0] != HANDSHAKE_RECORD:
        raise NotTls("not a TLS handshake record")
    if len(data) < RECORD_HEADER:
        return False
    length = int.from_bytes(data[3:5], "big")
    if length == 0 or length > MAX_FIRST_RECORD:
        raise NotTls("first record of an impossible length")
    return len(data) >= RECORD_HEADER + length


class TlsSession:
    """The server side of one TLS connection: socket bytes in, plaintext out, and back."""

    __slots__ = ("_in", "_obj", "_out", "closed_by_peer", "handshaken")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self.handshaken = False
        self.closed_by_peer = False

    def receive(self, data: bytes | bytearray) -> bytes:
        """Feed socket bytes; the plaintext they complete (b"" during the handshake).

        Raises ssl.SSLError when the client sends something TLS refuses. Call outgoing() after
        it: the handshake and alerts have bytes to send.
        """
        self._in.write(data)
        if not self.handshaken:
            try:
                self._obj.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self.handshaken = True
        plain = bytearray()
        while True:
            try:
                chunk = self._obj.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify
                self.closed_by_peer = True
                break
            if not chunk:
                self.closed_by_peer = True
                break
            plain += chunk
        return bytes(plain)

    def outgoing(self) -> bytes:
        """What TLS has to send now (handshake messages, records, alerts)."""
        return self._out.read() if self._out.pending else b""

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        self._obj.write(data)
        return self._out.read()

    def close_notify(self) -> bytes:
        """The close_notify alert to send before closing (b"" if none can be made)."""
        # the alert is written; the peer's own close_notify is not waited for
        with contextlib.suppress(ssl.SSLError):
            self._obj.unwrap()
        return self.outgoing()

    def peer_certificate(self) -> dict[str, Any] | None:
        cert = self._obj.getpeercert()
        return cert or None

    def version(self) -> str | None:
        return self._obj.version()


class TlsTransport(asyncio.Transport):
    """The plaintext side of a TLS connection, written through to the socket's transport.

    Flow control is the socket transport's: its protocol (the HTTP connection) is paused when
    the encrypted bytes are not taken, exactly as on a plain connection.
    """

    def __init__(self, raw: asyncio.Transport, session: TlsSession) -> None:
        super().__init__()
        self._raw = raw
        self._session = session
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        try:
            self._raw.write(self._session.encrypt(data))
        except ssl.SSLError:
            self.abort()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        alert = self._session.close_notify()
        if alert and not self._raw.is_closing():
            self._raw.write(alert)
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False  # TLS has no half-close: close_notify ends both directions

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return self._session.peer_certificate()
        if name == "tls_version":
            return self._session.version()
        return self._raw.get_extra_info(name, default)
