"""TLS for the metrics endpoint: an ssl.SSLContext from the web config's tls_server_config."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exporter.web.config import NO_CLIENT_CERT, REQUIRE_AND_VERIFY, TlsSettings, WebConfigError

WHERE = "tls_server_config"


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's password.
    raise _EncryptedKey


def build_context(tls: TlsSettings) -> ssl.SSLContext:
    """A server context that loads and checks everything now, so a bad file fails at start-up."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = tls.min_version
        ctx.maximum_version = tls.max_version
    except (ValueError, ssl.SSLError) as exc:
        raise WebConfigError(f"{WHERE}: TLS versions not supported here ({exc})") from None
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(tls.cipher_suites))
        except ssl.SSLError:
            raise WebConfigError(f"{WHERE}.cipher_suites: none is usable here") from None
    _load_chain(ctx, tls)
    if tls.client_auth_type != NO_CLIENT_CERT:
        _load_client_ca(ctx, tls)
        ctx.verify_mode = (
            ssl.CERT_REQUIRED if tls.client_auth_type == REQUIRE_AND_VERIFY else ssl.CERT_OPTIONAL
        )
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@contextlib.contextmanager
def _pem_path(path: Path | None, pem: str | None) -> Iterator[str]:
    """A file name for a PEM given inline: ssl loads certificates and keys from files only."""
    if path is not None:
        yield str(path)
        return
    assert pem is not None
    fd = os.memfd_create("wattprobe-pem", os.MFD_CLOEXEC)  # never touches a disk
    try:
        os.write(fd, pem.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _load_chain(ctx: ssl.SSLContext, tls: TlsSettings) -> None:
    for path, name in ((tls.cert_file, "cert_file"), (tls.key_file, "key_file")):
        if path is not None and not os.access(path, os.R_OK):
            why = "no such file" if not path.exists() else "not readable"
            raise WebConfigError(f"{WHERE}.{name}: {path}: {why}")
    try:
        with (
            _pem_path(tls.cert_file, tls.cert_pem) as cert,
            _pem_path(tls.key_file, tls.key_pem) as key,
        ):
            ctx.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise WebConfigError(f"{WHERE}: the key is encrypted; give an unencrypted key") from None
    except ssl.SSLError as exc:
        why = "certificate and key do not match" if "MISMATCH" in str(exc) else "not a PEM pair"
        raise WebConfigError(f"{WHERE}: cannot load the certificate and key: {why}") from None
    except OSError as exc:
        raise WebConfigError(f"{WHERE}: cannot load the certificate and key: {exc}") from None


def _load_client_ca(ctx: ssl.SSLContext, tls: TlsSettings) -> None:
    try:
        if tls.client_ca_file is not None:
            ctx.load_verify_locations(cafile=str(tls.client_ca_file))
        else:
            ctx.load_verify_locations(cadata=tls.client_ca_pem)
    except (ssl.SSLError, ValueError):
        raise WebConfigError(f"{WHERE}: the client CA holds no usable certificate") from None
    except OSError as exc:
        raise WebConfigError(f"{WHERE}.client_ca_file: {exc.strerror or exc}") from None
    if not ctx.get_ca_certs():
        raise WebConfigError(f"{WHERE}: the client CA holds no certificate")


def _canonical(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def peer_sans(cert: dict[str, Any] | None) -> set[str]:
    """DNS names, IPs, e-mail addresses and URIs of a verified peer certificate."""
    if not cert:
        return set()
    return {_canonical(str(value)) for _kind, value in cert.get("subjectAltName", ())}


def san_allowed(cert: dict[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """client_allowed_sans: the certificate must carry one of the listed names exactly."""
    if not allowed:
        return True
    return bool(peer_sans(cert) & {_canonical(a) for a in allowed})
