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

This module parses and renders; exporter/web/connection.py does the I/O and keeps the
deadlines, on an event loop. HeadReader looks at each received byte once, so a head trickled a
byte at a time costs what the same head in one piece costs.
"""

from __future__ import annotations

import email.utils
import http
import re
from dataclasses import dataclass, field

from exporter.model.config import HttpLimits

MAX_HEADERS = 100
# Empty lines allowed before a request line (RFC 9112 2.2: a server SHOULD ignore at least one).
# More is refused at once with 400, as Go's server (node_exporter) does: before, a head of
# 100,000 bare CRLFs got no answer until the header timeout (issue 28).
MAX_BLANK_BYTES = 64


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


class HeadReader:
    """Collects a connection's bytes and cuts request heads out of them, in linear time.

    Each received byte is appended once and looked at once: the scan for the end of the head
    resumes where the last one stopped (the old reader rescanned and copied the whole buffer on
    every receive, so a 16 KiB head sent a byte at a time cost 2.3 s of CPU). Bytes after a head
    (a pipelined next request) stay for the next call.
    """

    __slots__ = (
        "_blank",
        "_buf",
        "_first_line",
        "_limits",
        "_line_start",
        "_scan",
        "_start",
        "scanned",
    )

    def __init__(self, limits: HttpLimits) -> None:
        self._limits = limits
        self._buf = bytearray()
        self._start = 0  # where the current head begins (after empty lines before it)
        self._scan = 0  # the next byte to look at
        self._line_start = 0  # where the line being scanned begins
        self._first_line = -1  # length of the request line once its newline was seen
        self._blank = 0  # empty-line bytes skipped before the current request
        self.scanned = 0  # bytes looked at, over the connection's life (the tests' work count)

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes held, consumed ones not yet dropped included (what the connection costs)."""
        return len(self._buf)

    @property
    def pending(self) -> int:
        """Bytes buffered and not yet part of a returned head."""
        return len(self._buf) - self._start

    @property
    def started(self) -> bool:
        """Whether a request has begun: a byte other than the empty lines allowed before it."""
        self._skip_empty_lines()
        return self.pending > 0

    def next_head(self) -> bytes | None:
        """The next complete head (without its blank line), or None if more bytes are needed.

        Raises HttpError(414) for a request line over the limit, HttpError(431) for a head
        over max_header_bytes and HttpError(400) for more than MAX_BLANK_BYTES of empty lines
        before a request, as soon as the bytes show it.
        """
        limits = self._limits
        line_limit = min(limits.max_request_line, limits.max_header_bytes)
        self._skip_empty_lines()
        if self._blank > MAX_BLANK_BYTES:
            raise HttpError(400)
        buf = self._buf
        while True:
            newline = buf.find(b"\n", self._scan)
            if newline < 0:
                self.scanned += len(buf) - self._scan
                self._scan = len(buf)
                break
            self.scanned += newline + 1 - self._scan
            self._scan = newline + 1
            line_end = (
                newline - 1 if newline > self._line_start and buf[newline - 1] == 13 else newline
            )
            if self._first_line < 0:
                self._first_line = line_end - self._start
                if self._first_line > line_limit:
                    raise HttpError(414)
            elif line_end == self._line_start:  # an empty line: the end of the head
                end = self._line_start - 1  # the newline that ended the last header line
                if end > self._start and buf[end - 1] == 13:
                    end -= 1
                head = bytes(buf[self._start : end])
                if len(head) > limits.max_header_bytes:
                    raise HttpError(431)
                self._next_request(newline + 1)
                return head
            self._line_start = newline + 1
        if self._first_line < 0 and len(buf) - self._start > line_limit:
            raise HttpError(414)
        if len(buf) - self._start > limits.max_header_bytes:
            raise HttpError(431)
        return None

    def _skip_empty_lines(self) -> None:
        # empty lines before a request are allowed (RFC 9112 2.2); each is skipped once
        if self._first_line >= 0 or self._scan > self._start:
            return
        buf, start = self._buf, self._start
        while start < len(buf) and buf[start] in (10, 13):
            start += 1
        self.scanned += start - self._start
        self._blank += start - self._start
        self._start = self._scan = self._line_start = start

    def _next_request(self, at: int) -> None:
        self._start = self._scan = self._line_start = at
        self._first_line = -1
        self._blank = 0
        if at > 4096 and at * 2 > len(self._buf):
            # drop consumed bytes now and then, not per head: the copy stays linear overall
            del self._buf[:at]
            self._start = self._scan = self._line_start = 0
