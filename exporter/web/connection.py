"""One HTTP/1.1 connection on the server's event loop: plain, or TLS over memory BIOs.

The protocol callbacks feed the connection; one task per connection reads request heads,
answers them and keeps the deadlines (head, idle, write) as timers on the loop. A connection
costs a socket, this object and at most one CHUNK of buffered response, never a thread.

TLS (exporter/web/tlsconn.py) is driven here, not by asyncio's start_tls: the first record is
collected before any TLS state exists, at most MAX_HANDSHAKES handshakes hold TLS state at once
(a new one gives up the oldest), and a connection has no reference cycle once closed, so a flood
of handshakes costs bounded memory that is freed when the flood ends (issue 28).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import ssl
import sys
import termios
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from exporter.web.http import (
    HeadReader,
    HttpError,
    ReadTimeout,
    Request,
    Response,
    error_response,
    parse_head,
    render,
)
from exporter.web.live import WebState
from exporter.web.routes import RETRY_AFTER, WWW_AUTHENTICATE, with_headers
from exporter.web.tls import san_allowed
from exporter.web.tlsconn import NotTls, TlsSession, TlsTransport, first_record_complete

if TYPE_CHECKING:
    from exporter.web.server import MetricsServer

log = logging.getLogger(__name__)

CHUNK = 65536  # a response is handed to a transport this much at a time (its buffer's bound)
# Bytes taken from the socket per read (asyncio's default is 256 KiB). A request head is at most
# max_header_bytes; what a connection buffers is bounded by that plus one read, so this keeps a
# pipelining client that does not read its answers at ~32 KiB, not ~270 KiB (4,096 of them: 128
# MiB rather than a gigabyte). TLS records are at most 16 KiB, so TLS reads are not split more.
READ_SIZE = 16384
LINGER_S = 0.5
LINGER_BYTES = 256 * 1024
# Written at accept time, without reading the request, when all connection slots are taken: it
# is short enough to fit any socket buffer, so sending it never waits.
BUSY = render(error_response(503, RETRY_AFTER), head_only=False)
# Answered at once when the bcrypt queue is full (exporter/web/authgate.py): the client may try
# again in a second, and the guesser's flood costs no waiting slot.
TOO_MANY = error_response(429, RETRY_AFTER)


class _Closed(Exception):
    """The client went away, or took too long to read its response."""


class Connection(asyncio.Protocol):
    """One client connection: the protocol callbacks feed it, one task answers it."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self._raw: asyncio.Transport | None = None  # the socket's own, under any TLS
        self.reader = HeadReader(server.limits)
        self.peer: Any = None
        self._waiter: asyncio.Future[bool] | None = None
        self._eof = False
        self._lost = False
        self._refused = False
        self._write_paused = False
        self._read_paused = False
        self._lingering = False
        self._discarded = 0
        self._task: asyncio.Task[None] | None = None
        # TLS: the first record as it arrives (None once complete), then the session; _state is
        # the web config the handshake was made with (client_allowed_sans are checked against it)
        self._hello: bytearray | None = None
        self._session: TlsSession | None = None
        self._state: WebState | None = None
        self._tls_ready = False
        self._tls_failed = False
        self._fd = -1

    def has_unread_bytes(self) -> bool:
        """Whether the client has sent bytes the loop has not read yet (a request on its way):
        such a connection is not given up as silent at the limit."""
        if self._fd < 0 or self._lost:
            return False
        try:
            got = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return False
        return int.from_bytes(got, sys.byteorder) > 0

    # -- protocol callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        server = self.server
        loop = asyncio.get_running_loop()
        if len(server.connections) >= server.max_connections and not server.evict_one():
            self._refused = True
            server.counters.shed("refused")
            server.shed_log.event("refused")
            if server.tls:
                transport.abort()
            else:
                transport.write(BUSY)
                transport.close()
            return
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        server.connections.add(self)
        server.unproven[self] = loop.time()
        # pause at any unsent byte: a response is handed over one CHUNK at a time, so a client
        # that does not read holds at most one chunk here, never a copy of the whole page
        transport.set_write_buffer_limits(high=0)
        if hasattr(transport, "max_size"):  # asyncio's selector transport: its recv() size
            transport.max_size = READ_SIZE
        if server.tls:
            self._hello = bytearray()
        self._task = loop.create_task(self._run())  # held: the loop keeps only a weak ref

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.abort()
            return
        if self.server.tls:
            data = self._tls_received(data)
            if not data:
                return
        self.reader.feed(data)
        if self.reader.pending > self.limits.max_header_bytes and not self._read_paused:
            # a pipelining client that does not read cannot make us buffer more than one head
            # (and one read): reading resumes only once what is buffered holds no whole request
            self._pause_reading()
        self._wake()

    def _pause_reading(self) -> None:
        if self._raw is not None and not self._lost:
            self._raw.pause_reading()
            self._read_paused = True

    def _resume_reading(self) -> None:
        if self._read_paused and self._raw is not None and not self._lost:
            self._raw.resume_reading()
        self._read_paused = False

    def _tls_received(self, data: bytes) -> bytes:
        """Socket bytes through TLS: the plaintext they carry (b"" during the handshake)."""
        session = self._session
        if session is None:
            session = self._start_tls(data)
            if session is None:
                return b""
            data = b""  # _start_tls fed the whole first record
        try:
            plain = session.receive(data) if data else b""
        except ssl.SSLError as exc:
            self._tls_failure(exc)
            return b""
        out = session.outgoing()
        if out and self._raw is not None:
            self._raw.write(out)
        if not self._tls_ready and session.handshaken:
            self._tls_ready = True
            self.server.handshake_done(self)
            assert self._raw is not None
            self.transport = TlsTransport(self._raw, session)
            self._wake()
        if session.closed_by_peer:
            self._eof = True
            self._wake()
        return plain

    def _start_tls(self, data: bytes) -> TlsSession | None:
        """Collect the first record; once it is whole, a session fed with it (None before)."""
        hello = self._hello
        if hello is None:  # failed already
            return None
        hello += data
        try:
            if not first_record_complete(hello):
                return None  # a stalled client holds these bytes and no TLS state
        except NotTls as exc:
            self._tls_failure(exc)
            return None
        assert self.server.web is not None
        state = self.server.web.current_nowait()
        self._hello = None
        if state.context is None or not self.server.handshake_may_start(
            self, asyncio.get_running_loop().time()
        ):
            self._tls_failure(NotTls("too many handshakes in progress, or no TLS context"))
            return None
        self._state = state
        session = self._session = TlsSession(state.context)
        try:
            session.receive(hello)
        except ssl.SSLError as exc:
            self._tls_failure(exc)
            return None
        return session

    def _tls_failure(self, exc: Exception) -> None:
        log.debug("TLS handshake with %r failed: %r", self.peer, exc)
        self.give_up_tls()

    def give_up_tls(self) -> None:
        """End the handshake now and drop its TLS state at once: a flood evicts hundreds of
        handshakes in one turn of the loop, and each one's ~45 KiB must not wait for its
        connection_lost callback to be freed."""
        self._tls_failed = True
        self._hello = None
        self._session = None
        self.abort()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self.server.tls  # keep a plain socket open to answer; TLS closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        # CPython's socket transport keeps a bound method of itself (_read_ready_cb): a cycle
        # that only the cyclic collector frees, and with wattprobe's high GC thresholds
        # (exporter/runtime.py) tens of thousands of closed transports piled up under a
        # connection flood (RSS kept growing). Nothing reads from a lost transport: cut it.
        if self._raw is not None:
            vars(self._raw).pop("_read_ready_cb", None)
            self._raw = None
        self._wake()
        if not self._refused:
            self.server.connection_closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    def abort(self) -> None:
        if self.transport is not None and not self._lost:
            self.transport.abort()

    # -- waiting ------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def _wait(self, deadline: float) -> bool:
        """Until a callback wakes us (True) or the deadline passes (False)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    # -- the connection's task ----------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.header_timeout_s
        try:
            if self.server.tls and not await self._handshake(deadline):
                return
            await self._serve_requests(deadline)
        except (OSError, ssl.SSLError, _Closed) as exc:
            log.debug("connection from %r ended: %r", self.peer, exc)
        except asyncio.CancelledError:
            pass  # the server is stopping
        except Exception:
            log.exception("connection from %r failed", self.peer)
        finally:
            transport = self.transport
            if transport is not None and not self._lost:
                if transport.get_write_buffer_size() > 0:
                    transport.abort()  # a client that does not read gets no more time
                else:
                    transport.close()

    async def _handshake(self, deadline: float) -> bool:
        """Wait for data_received to complete the handshake; one deadline over all of it, so a
        client that trickles its hello byte by byte is cut off all the same."""
        while not self._tls_ready:
            if self._lost or self._tls_failed or self._eof:
                return False
            if not await self._wait(deadline):
                log.debug("TLS handshake with %r timed out", self.peer)
                self.abort()
                return False
        state, transport = self._state, self.transport
        assert state is not None and transport is not None
        tls_config = state.config.tls
        if tls_config is not None and not san_allowed(
            transport.get_extra_info("peercert"), tls_config.client_allowed_sans
        ):
            log.debug("client certificate has none of client_allowed_sans")
            transport.abort()
            return False
        return True

    async def _serve_requests(self, deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        waited_s = 0.0  # time the client made us wait while it kept requests queued
        while True:
            try:
                req = await self._read_request(deadline)
            except HttpError as exc:
                await self._refuse(exc.status)
                return
            except ReadTimeout as exc:
                if exc.got_bytes:
                    await self._refuse(408)
                return
            if req is None:
                return
            deadline = None  # later requests: idle timeout, then header timeout
            # a request being answered is not given up for a newcomer at the limit ...
            unproven = self.server.unproven.pop(self, None) is not None
            self.server.idle.pop(self, None)
            response = await self._respond(req)
            if response.status >= 400 and (unproven or response.status in (401, 429)):
                # ... but a client refused what it asked is given up again (from the youngest
                # end): connections answered only 401, 404 or 429 cannot hold the slots
                self.server.unproven[self] = asyncio.get_running_loop().time()
            close = response.close or not req.keep_alive or req.has_body
            if close and not response.close:
                response = Response(
                    response.status, response.body, response.content_type, response.headers, True
                )
            head = render(
                response, head_only=True, keep_alive_10=req.version == "HTTP/1.0" and not close
            )
            # A pipelining client (its next request is here before its answer is handed over)
            # shares one write timeout among its queued answers: the time it made us wait adds
            # up, so a client that reads slowly while it keeps asking is cut (issue 41), not
            # given a fresh timeout per answer. Once nothing is queued, the sum starts afresh.
            started = loop.time()
            await self._send(
                head,
                b"" if req.method == "HEAD" else response.body,
                started + self.limits.write_timeout_s - waited_s,
            )
            waited_s = waited_s + (loop.time() - started) if self.reader.pending else 0.0
            if close:
                if req.has_body:
                    await self._linger()  # the unread body must not turn into a reset
                return
            if self not in self.server.unproven:  # answered: waits for its next request
                self.server.idle[self] = asyncio.get_running_loop().time()

    async def _read_request(self, deadline: float | None) -> Request | None:
        """The next request, or None when the client closed (or went silent) between requests.

        deadline: when the whole head must be in (the first request: connection start plus
        header_timeout); None for a keep-alive request (idle_timeout for the first byte, then
        header_timeout from it). Raises HttpError or ReadTimeout.
        """
        loop = asyncio.get_running_loop()
        limits = self.limits
        first_byte_by = deadline if deadline is not None else loop.time() + limits.idle_timeout_s
        head_by = deadline
        while True:
            if head_by is None and self.reader.started:
                head_by = loop.time() + limits.header_timeout_s
            head = self.reader.next_head()
            if head is not None:
                # pipelined requests already buffered are served before more is read: before
                # issue 41 reading resumed at every request, and a client sending 64 requests
                # per write while reading slowly grew this buffer by a read per answer
                if self.reader.pending <= self.limits.max_header_bytes:
                    self._resume_reading()
                return parse_head(head)
            self._resume_reading()  # no whole request buffered: more bytes are needed
            if self._eof or self._lost:
                if self.reader.started:
                    raise HttpError(400)  # closed in the middle of a head
                return None
            if not await self._wait(head_by if head_by is not None else first_byte_by):
                raise ReadTimeout(self.reader.started)

    async def _respond(self, req: Request) -> Response:
        server = self.server
        extra: tuple[tuple[str, str], ...] = ()
        if server.web is not None:
            state = server.web.current_nowait()
            extra = server.extra_headers(state)
            if state.auth.enabled:
                verdict = await server.authorize(state.auth, req.header("authorization"), self.peer)
                if verdict is None:  # the bcrypt queue is full: no waiting, try again later
                    return with_headers(TOO_MANY, extra)
                if not verdict:
                    unauthorized = Response(401, b"401 Unauthorized\n")
                    return with_headers(unauthorized, WWW_AUTHENTICATE + extra)
        routes = server.routes
        try:
            if routes.is_scrape(req):
                want_gzip = routes.wants_gzip(req)
                body = await server.exposition(want_gzip)
                if body is None:
                    return with_headers(error_response(503, RETRY_AFTER), extra)
                return with_headers(routes.metrics(body, want_gzip), extra)
            return with_headers(routes.handle(req), extra)
        except Exception:
            # a rendering bug must cost one response, not the connection or the server
            log.exception("serving %s failed", req.path if req.path in routes.paths else "?")
            return with_headers(error_response(500), extra)

    async def _refuse(self, status: int) -> None:
        await self._send(
            render(error_response(status, self.server.extra_headers()), head_only=False)
        )
        await self._linger()

    async def _send(self, data: bytes, body: bytes = b"", deadline: float | None = None) -> None:
        """Hand data, then body, to the kernel by deadline (default: write_timeout_s from now),
        or raise _Closed.

        body is the shared cached exposition: it is written in slices, never copied whole (a
        head + body concatenation per response was 380 KiB per slow reader on a 5,000-process
        node); only the head and the first slice are joined, into one packet.
        """
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.limits.write_timeout_s
        view = memoryview(body)
        first = max(0, CHUNK - len(data))
        for chunk in _slices(data + view[:first], view, first):
            if self._lost or self.transport is None:
                raise _Closed("client gone")
            self.transport.write(chunk)
            while self._write_paused:
                if self._lost:
                    raise _Closed("client gone")
                if not await self._wait(deadline):
                    self.server.counters.shed("slow_reader")
                    self.server.shed_log.event("slow_reader")
                    raise _Closed("client too slow to take the response")

    async def _linger(self) -> None:
        """Half-close and discard what the client still sends, briefly, before closing.

        Closing a socket with unread input makes the kernel send a reset, which can destroy the
        error response the client has not read yet. Bounded in time and bytes, like Go's server.
        """
        transport = self.transport
        if transport is None or self._lost:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER_S
        self._lingering = True
        self._discarded = self.reader.pending
        if transport.can_write_eof():
            transport.write_eof()
        self._resume_reading()
        while not (self._eof or self._lost):
            if not await self._wait(deadline):
                return


def _slices(head: bytes, view: memoryview, offset: int) -> Iterator[bytes | memoryview]:
    yield head
    for at in range(offset, len(view), CHUNK):
        yield view[at : at + CHUNK]


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
