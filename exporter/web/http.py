"""A small, strict HTTP/1.1 request reader and response writer with hard limits.

The standard library's http.server trusts its clients: it reads a request head for as long as
the client keeps sending (a slowloris holds a thread forever), accepts 100 header lines of
64 KiB each, and echoes the method or version it did not like into error pages. wattprobe
serves three GET paths, so it needs very little of HTTP and can be strict about all of it:

- the whole request head (request line and headers) must arrive within header_timeout_s of
  the connection opening (first request) or of its first byte (later keep-alive requests), and
  an idle keep-alive connection is closed after idle_timeout_s;
- the head is at most max_header_bytes, the request line at most max_request_line bytes;
- a response must be taken by the client within write_timeout_s;
- request bodies are never read: a request that announces one is answered, then the
  connection is closed, so body bytes can never be taken for a next request;
- error responses carry fixed text only, never anything the client sent.
"""

from __future__ import annotations

import email.utils
import http
import re
import socket
import time
from dataclasses import dataclass, field

from exporter.config import HttpLimits

MAX_HEADERS = 100


class HttpError(Exception):
    """The request cannot be served; answer with this status and close the connection."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class ReadTimeout(Exception):
    """The client did not send in time. got_bytes: whether a request had begun."""

    def __init__(self, got_bytes: bool) -> None:
        super().__init__(got_bytes)
        self.got_bytes = got_bytes


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    path: str
    version: str
    headers: tuple[tuple[str, str], ...] = ()  # names lower-cased, in order

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    @property
    def has_body(self) -> bool:
        length = self.header("content-length")
        chunked = self.header("transfer-encoding") is not None
        return chunked or (length is not None and length != "0")


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = field(default=())
    close: bool = False


_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VERSION = re.compile(rb"^HTTP/(\d)\.(\d)$")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs but HTAB
_TARGET = re.compile(rb"^[\x21-\x7e]+$")


def parse_head(head: bytes) -> Request:
    """Parse a request head (request line and header lines, without the blank line).

    Raises HttpError for anything malformed; never any other exception.
    """
    lines = head.split(b"\n")
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise HttpError(400)
    method, target, version = parts
    v = _VERSION.match(version)
    if v is None:
        raise HttpError(400)
    if v.group(1) != b"1" or v.group(2) not in (b"0", b"1"):
        raise HttpError(505)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):  # obsolete line folding: refused (RFC 9112 5.2)
            raise HttpError(400)
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.match(name):
            raise HttpError(400)
        value = value.strip(b" \t")
        if _FIELD_VALUE_BAD.search(value):
            raise HttpError(400)
        headers.append((name.decode("ascii").lower(), value.decode("latin-1")))
    if len(headers) > MAX_HEADERS:
        raise HttpError(431)
    lengths = {v for k, v in headers if k == "content-length"}
    if len(lengths) > 1 or any(not v.isascii() or not v.isdigit() for v in lengths):
        raise HttpError(400)
    if sum(1 for k, _ in headers if k == "authorization") > 1:
        raise HttpError(400)
    return Request(
        method=method.decode("ascii"),
        target=target.decode("ascii"),
        path=_path_of(target.decode("ascii")),
        version=version.decode("ascii"),
        headers=tuple(headers),
    )


def _path_of(target: str) -> str:
    if target.startswith("/"):
        return target.split("?", 1)[0]
    for scheme in ("http://", "https://"):  # absolute-form (RFC 9112 3.2.2)
        if target.lower().startswith(scheme):
            rest = target[len(scheme) :]
            slash = rest.find("/")
            return "/" if slash < 0 else rest[slash:].split("?", 1)[0]
    raise HttpError(400)


def render(response: Response, *, head_only: bool, keep_alive_10: bool = False) -> bytes:
    """The bytes of a response. keep_alive_10: an HTTP/1.0 client asked to keep the connection."""
    phrase = http.HTTPStatus(response.status).phrase
    lines = [
        f"HTTP/1.1 {response.status} {phrase}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Server: wattprobe",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
    ]
    lines += [f"{name}: {value}" for name, value in response.headers]
    if response.close:
        lines.append("Connection: close")
    elif keep_alive_10:
        lines.append("Connection: keep-alive")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


def error_response(status: int, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A fixed-text error that closes the connection."""
    text = f"{status} {http.HTTPStatus(status).phrase}\n".encode()
    return Response(status, text, headers=headers, close=True)


class Connection:
    """One client socket (plain or TLS) with its read buffer and deadlines."""

    def __init__(self, sock: socket.socket, limits: HttpLimits) -> None:
        self.sock = sock
        self.limits = limits
        self._buf = b""

    def read_request(self, deadline: float | None) -> Request | None:
        """The next request, or None when the client closed between requests.

        deadline: when the whole head must be in (the first request: connection start plus
        header_timeout); None for a keep-alive request (idle_timeout for the first byte, then
        header_timeout for the rest). Raises HttpError or ReadTimeout.
        """
        limits = self.limits
        first_byte_by = deadline if deadline is not None else _now() + limits.idle_timeout_s
        head_by = deadline
        while True:
            self._buf = self._buf.lstrip(b"\r\n")  # empty lines before a request are allowed
            if self._buf and head_by is None:
                head_by = _now() + limits.header_timeout_s
            end = _HEAD_END.search(self._buf)
            if end is not None:
                head, self._buf = self._buf[: end.start()], self._buf[end.end() :]
                if len(head) > limits.max_header_bytes:
                    raise HttpError(431)
                return parse_head(head)
            newline = self._buf.find(b"\n")
            line_len = newline if newline >= 0 else len(self._buf)
            if line_len > min(limits.max_request_line, limits.max_header_bytes):
                raise HttpError(414)
            if len(self._buf) > limits.max_header_bytes:
                raise HttpError(431)
            chunk = self._recv(head_by if head_by is not None else first_byte_by)
            if not chunk:
                if self._buf:
                    raise HttpError(400)  # closed in the middle of a head
                return None
            self._buf += chunk

    def _recv(self, deadline: float) -> bytes:
        remaining = deadline - _now()
        if remaining <= 0:
            raise ReadTimeout(bool(self._buf))
        self.sock.settimeout(remaining)
        try:
            return self.sock.recv(8192)
        except TimeoutError:
            raise ReadTimeout(bool(self._buf)) from None

    def send(self, data: bytes) -> None:
        """Write all of data within write_timeout_s, or raise TimeoutError."""
        deadline = _now() + self.limits.write_timeout_s
        view = memoryview(data)
        while view:
            remaining = deadline - _now()
            if remaining <= 0:
                raise TimeoutError("client too slow to take the response")
            self.sock.settimeout(remaining)
            sent = self.sock.send(view[:65536])
            view = view[sent:]


LINGER_S = 0.5
LINGER_BYTES = 256 * 1024


def linger(sock: socket.socket) -> None:
    """Half-close and discard what the client still sends, briefly, before the caller closes.

    Closing a socket with unread input makes the kernel send a reset, which can destroy the
    error response the client has not read yet. Bounded in time and bytes, like Go's server.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline = _now() + LINGER_S
        drained = 0
        while drained < LINGER_BYTES:
            remaining = deadline - _now()
            if remaining <= 0:
                return
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                return
            drained += len(chunk)
    except OSError:
        return


def _now() -> float:
    return time.monotonic()
