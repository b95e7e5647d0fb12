"""A small HTTP(S) client for the two Kubernetes endpoints wattprobe reads: the kubelet's /pods and
the apiserver's pod list + watch (or KubeEdge's MetaServer, which speaks the same API).

Why not the official `kubernetes` client: measured with the exporter's own imports
(scripts/measure-kube-client.sh, docs/kubernetes.md), it adds about 22 MiB RSS and 0.2-0.45 s of
start-up over http.client + ssl, and the exporter's budget is 60 MiB. wattprobe needs two GET
requests and a line-delimited stream; this module does them with timeouts on every call, errors
turned into short reasons, and the service-account token re-read when it rotates.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter import __version__
from exporter.host.hostfile import read_text_bounded
from exporter.model.config import SERVICE_ACCOUNT_DIR
from exporter.model.readings import SourceError

DEFAULT_TOKEN_FILE = SERVICE_ACCOUNT_DIR / "token"
DEFAULT_CA_FILE = SERVICE_ACCOUNT_DIR / "ca.crt"
_MAX_TOKEN_BYTES = 1 << 16  # a service-account JWT is ~1 KiB; OIDC tokens a few
MAX_BODY_BYTES = 64 << 20
MAX_LINE_BYTES = 16 << 20


class StreamIdle(Exception):
    """Nothing arrived on a stream for its idle timeout (a quiet watch, or a vanished peer)."""


class Gone(SourceError):
    """HTTP 410 (or a watch ERROR event with code 410): the resourceVersion is too old; re-list."""

    def __init__(self, detail: str) -> None:
        super().__init__("expired", detail)


@dataclass(frozen=True)
class Endpoint:
    url: str  # scheme://host[:port][/prefix]
    token_file: Path | None = DEFAULT_TOKEN_FILE  # sent over https only
    ca_file: Path | None = DEFAULT_CA_FILE  # missing file: the system trust store
    insecure_skip_verify: bool = False
    timeout_s: float = 10.0  # connect, and each read; also the deadline of a whole request


class _CachedFile:
    """A small file re-read whenever it changes on disk (projected tokens rotate)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._text = ""
        self.error: OSError | None = None  # why the last read() gave None

    def read(self) -> str | None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                # a projected token is a symlink (..data/token): followed; a FIFO is refused
                self._text = read_text_bounded(str(self.path), _MAX_TOKEN_BYTES).strip()
                self._stamp = stamp
        except OSError as exc:
            self.error = exc
            return None
        self.error = None
        return self._text


class KubeClient:
    """GET JSON and line streams from one Kubernetes-style endpoint."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        parts = urllib.parse.urlsplit(endpoint.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{endpoint.url!r} is not an http(s)://host[:port] URL")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self._prefix = parts.path.rstrip("/")
        self._token = _CachedFile(endpoint.token_file) if endpoint.token_file else None
        self._ca = _CachedFile(endpoint.ca_file) if endpoint.ca_file else None
        self._ssl: tuple[str | None, ssl.SSLContext] | None = None
        self._streaming: http.client.HTTPConnection | None = None

    @property
    def url(self) -> str:
        return self.endpoint.url

    # -- requests ---------------------------------------------------------------------

    def get_json(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """Decoded JSON body of a 200 answer; SourceError (Gone for 410) otherwise."""
        deadline = time.monotonic() + self.endpoint.timeout_s
        conn, resp = self._open(path, query, self.endpoint.timeout_s)
        try:
            body = _read_body(resp, deadline)
        finally:
            conn.close()
        try:
            return json.loads(body)
        except ValueError as exc:
            raise SourceError("bad response", f"{self._where(path)}: not JSON ({exc})") from None

    @contextlib.contextmanager
    def stream_lines(
        self, path: str, query: Mapping[str, str] | None, idle_timeout_s: float
    ) -> Iterator[Iterator[bytes]]:
        """Lines of a streamed 200 answer (a watch). Iteration stops when the server ends the
        stream; StreamIdle when nothing arrived for idle_timeout_s; errors raise SourceError."""
        conn, resp = self._open(path, query, self.endpoint.timeout_s)
        sock = conn.sock
        if sock is not None:
            sock.settimeout(idle_timeout_s)
        self._streaming = conn
        try:
            yield _lines(resp, self._where(path))
        finally:
            self._streaming = None
            conn.close()

    def interrupt(self) -> None:
        """Wake a thread blocked reading a stream (used on shutdown)."""
        conn = self._streaming
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # -- plumbing ---------------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{self.endpoint.url.rstrip('/')}{path}"

    def _open(
        self, path: str, query: Mapping[str, str] | None, timeout_s: float
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "User-Agent": f"wattprobe/{__version__}"}
        conn: http.client.HTTPConnection
        if self.https:
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout_s, context=self._ssl_context()
            )
            token = self._token.read() if self._token else None
            if token:
                headers["Authorization"] = f"Bearer {token}"
            elif self._token is not None and isinstance(self._token.error, PermissionError):
                # a token that is there but not ours to read: say so, rather than "unauthorized"
                raise SourceError(
                    "permission denied",
                    f"cannot read the token file {self._token.path}: {self._token.error.strerror}",
                )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
        except BaseException as exc:
            conn.close()
            raise _transport_error(exc, self._where(path)) from None
        if resp.status != http.client.OK:
            try:
                text = resp.read(4096).decode(errors="replace")
            except (OSError, http.client.HTTPException):
                text = ""
            finally:
                conn.close()
            raise self._status_error(resp.status, path, text)
        return conn, resp

    def _ssl_context(self) -> ssl.SSLContext:
        ca_text = self._ca.read() if self._ca else None
        if self._ssl is not None and self._ssl[0] == ca_text:
            return self._ssl[1]
        if ca_text:
            try:
                ctx = ssl.create_default_context(cadata=ca_text)
            except ssl.SSLError as exc:
                raise SourceError("bad ca file", f"{self._ca_path()}: {exc}") from None
        else:
            ctx = ssl.create_default_context()
        if self.endpoint.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        self._ssl = (ca_text, ctx)
        return ctx

    def _ca_path(self) -> str:
        return str(self._ca.path) if self._ca else ""

    def _status_error(self, status: int, path: str, body: str) -> SourceError:
        where = self._where(path)
        message = _status_message(body) or body.strip()[:200]
        detail = f"{where}: HTTP {status} {message}".rstrip()
        if status == http.client.GONE:
            return Gone(detail)
        if status == http.client.UNAUTHORIZED:
            if self.https and self._token is not None and self._token.read() is None:
                detail += f" (no token at {self._token.path})"
            return SourceError("unauthorized", detail)
        reasons = {
            http.client.FORBIDDEN: "forbidden",
            http.client.NOT_FOUND: "not found",
            http.client.TOO_MANY_REQUESTS: "throttled",
        }
        if status in reasons:
            return SourceError(reasons[status], detail)
        if status >= 500:
            return SourceError("server error", detail)
        return SourceError(f"http {status}", detail)


def _status_message(body: str) -> str:
    """The message of a Kubernetes Status object, if the body is one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return ""
    message = obj.get("message") if isinstance(obj, dict) else None
    return message if isinstance(message, str) else ""


# Transport failures, most specific first: (type, reason).
_TRANSPORT_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (ssl.SSLCertVerificationError, "tls verify failed"),
    (ssl.SSLError, "tls error"),
    (TimeoutError, "timeout"),
    (OSError, "unreachable"),  # refused, reset, no route, cannot resolve
    (http.client.HTTPException, "unreachable"),  # the peer hung up or spoke no HTTP
)


def _transport_error(exc: BaseException, where: str) -> BaseException:
    """A SourceError with a short reason for a failed exchange; other exceptions as they are."""
    if isinstance(exc, SourceError):
        return exc
    for kind, reason in _TRANSPORT_REASONS:
        if isinstance(exc, kind):
            if isinstance(exc, ssl.SSLCertVerificationError):
                return SourceError(reason, f"{where}: {exc.verify_message or exc}")
            if isinstance(exc, TimeoutError):
                return SourceError(reason, f"{where}: no answer in time")
            return SourceError(reason, f"{where}: {exc!r}")
    return exc


def _read_body(resp: http.client.HTTPResponse, deadline: float) -> bytes:
    """The whole body, within the deadline and the size cap (a slow or endless server is an
    error, not a hung thread)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise SourceError("timeout", "the answer did not finish in time")
        try:
            chunk = resp.read1(1 << 16)
        except (OSError, http.client.HTTPException) as exc:
            raise _transport_error(exc, "reading the answer") from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise SourceError("bad response", f"answer larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)


def _lines(resp: http.client.HTTPResponse, where: str) -> Iterator[bytes]:
    while True:
        try:
            line = resp.readline(MAX_LINE_BYTES)
        except TimeoutError:
            raise StreamIdle(where) from None
        except (OSError, http.client.HTTPException) as exc:
            raise SourceError("unreachable", f"{where}: stream broke ({exc!r})") from None
        if not line:
            return
        if not line.endswith(b"\n") and len(line) >= MAX_LINE_BYTES:
            raise SourceError("bad response", f"{where}: a line longer than {MAX_LINE_BYTES}")
        if line.strip():
            yield line
