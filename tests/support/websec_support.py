"""Helpers for the web security tests: config files, TLS client contexts, raw HTTP requests."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from tests.support.pki import Pair


def bcrypt_hash(password: str, cost: int = 6, prefix: str = "$2y$") -> str:
    """A bcrypt hash as htpasswd writes it ($2y$), which exporter-toolkit files commonly hold."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()
    return prefix + hashed[4:]


def write_config(path: Path, config: dict[str, Any]) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config))
    tmp.replace(path)
    return path


def client_context(
    ca: Path,
    cert: Pair | None = None,
    *,
    min_version: ssl.TLSVersion | None = None,
    max_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    if min_version is not None:
        ctx.minimum_version = min_version
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def request(
    port: int,
    path: str = "/metrics",
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 5.0,
) -> Reply:
    """One request with http.client (https when a context is given)."""
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
    finally:
        conn.close()


def refused(port: int, context: ssl.SSLContext, path: str = "/metrics") -> bool:
    """Whether the server refuses this TLS client, during or right after the handshake.

    In TLS 1.3 the client finishes its side of the handshake before the server has checked
    the client certificate, so a refusal may only show on the first read.
    """
    try:
        reply = request(port, path, context=context)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, TimeoutError):
        return True
    except OSError:
        return True
    raise AssertionError(f"expected the TLS client to be refused, got HTTP {reply.status}")


@contextmanager
def raw_connection(port: int, timeout: float = 5.0) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        yield sock
    finally:
        sock.close()


def read_all(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """Everything until the server closes (bounded by the socket's timeout and limit)."""
    data = b""
    while len(data) < limit:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def status_of(raw: bytes) -> int:
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    assert len(parts) >= 2 and parts[0] == b"HTTP/1.1", raw[:200]
    return int(parts[1])
