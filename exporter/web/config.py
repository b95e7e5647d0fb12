"""--web.config.file: TLS, basic auth and response headers in exporter-toolkit's format.

The file is YAML with three sections, as in exporter-toolkit's docs/web-configuration.md:
tls_server_config (cert_file/key_file or inline cert/key, client_auth_type, client_ca_file or
inline client_ca, client_allowed_sans, min_version, max_version, cipher_suites,
prefer_server_cipher_suites), http_server_config (http2, headers) and basic_auth_users
(user -> bcrypt hash). Like exporter-toolkit, unknown keys are errors and relative file names
are relative to the config file's directory. Options that exporter-toolkit has but wattprobe
cannot honour are refused by name rather than silently ignored: a security setting that is
quietly dropped is worse than one that stops start-up.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.host.hostfile import read_bounded
from exporter.host.strictyaml import YamlRefused, load_strict

MAX_FILE_BYTES = 1 << 20  # a web config is a few hundred bytes; refuse to parse a huge one
# The deepest valid file nests 4 levels (tls_server_config.client_allowed_sans: [...]). PyYAML
# builds nodes recursively: a file nested ~500 deep is a RecursionError, so depth is checked first
# on the parser's event stream, which is not recursive.
MAX_DEPTH = 16

TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

NO_CLIENT_CERT = "NoClientCert"
VERIFY_IF_GIVEN = "VerifyClientCertIfGiven"
REQUIRE_AND_VERIFY = "RequireAndVerifyClientCert"
CLIENT_AUTH_TYPES = (NO_CLIENT_CERT, VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY)
# exporter-toolkit also has these; they accept certificates nobody verified, which OpenSSL (and
# so Python's ssl) cannot be told to do, and which its own docs call insecure.
UNVERIFIED_CLIENT_AUTH_TYPES = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

# Go's crypto/tls names (what exporter-toolkit's cipher_suites takes) -> (IANA code, OpenSSL name).
# Only suites up to TLS 1.2 are configurable; TLS 1.3 names are accepted and ignored, as in Go.
CIPHER_SUITES: dict[str, tuple[int, str]] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": (0x002F, "AES128-SHA"),
    "TLS_RSA_WITH_AES_256_CBC_SHA": (0x0035, "AES256-SHA"),
    "TLS_RSA_WITH_AES_128_GCM_SHA256": (0x009C, "AES128-GCM-SHA256"),
    "TLS_RSA_WITH_AES_256_GCM_SHA384": (0x009D, "AES256-GCM-SHA384"),
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": (0xC009, "ECDHE-ECDSA-AES128-SHA"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": (0xC00A, "ECDHE-ECDSA-AES256-SHA"),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": (0xC013, "ECDHE-RSA-AES128-SHA"),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": (0xC014, "ECDHE-RSA-AES256-SHA"),
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": (0xC02B, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": (0xC02C, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": (0xC02F, "ECDHE-RSA-AES128-GCM-SHA256"),
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": (0xC030, "ECDHE-RSA-AES256-GCM-SHA384"),
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": (0xCCA8, "ECDHE-RSA-CHACHA20-POLY1305"),
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": (0xCCA9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
}
TLS13_CIPHER_SUITES = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
)

# Response headers exporter-toolkit lets the file set, with the values it accepts (None: any).
ALLOWED_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
)
_HTTP_KEYS = ("http2", "headers")
# exporter-toolkit options wattprobe refuses, with what to do instead.
_UNSUPPORTED = {
    "rate_limit": "use --web.max-requests and --web.max-connections",
    "tls_server_config.curve_preferences": "OpenSSL's default curves are used",
}


class WebConfigError(ValueError):
    """The web config file is unusable. The message is one line and names the key at fault."""


@dataclass(frozen=True)
class TlsSettings:
    cert_file: Path | None = None
    key_file: Path | None = None
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)  # a secret: never in repr or logs
    client_ca_file: Path | None = None
    client_ca_pem: str | None = None
    client_auth_type: str = NO_CLIENT_CERT
    client_allowed_sans: tuple[str, ...] = ()
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    cipher_suites: tuple[str, ...] = ()  # OpenSSL names; empty: OpenSSL's defaults
    prefer_server_cipher_suites: bool = True

    def files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


@dataclass(frozen=True)
class WebConfig:
    tls: TlsSettings | None = None  # None: plain HTTP
    users: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (user, bcrypt hash)
    headers: tuple[tuple[str, str], ...] = ()

    def files(self) -> tuple[Path, ...]:
        """Files besides the config itself whose change means a reload."""
        return self.tls.files() if self.tls else ()


def parse_web_config(text: str, base_dir: Path) -> WebConfig:
    """The WebConfig a file's text describes; relative paths are taken from base_dir."""
    try:
        data = load_strict(text, max_depth=MAX_DEPTH)
    except YamlRefused as exc:
        raise WebConfigError(str(exc)) from None
    if data is None:
        return WebConfig()  # an empty file: plain HTTP, no auth (as exporter-toolkit)
    top = _mapping(data, "")
    _known_keys(top, "", _TOP_KEYS)
    tls = (
        _tls(_mapping(top["tls_server_config"], "tls_server_config"), base_dir)
        if (top.get("tls_server_config") is not None)
        else None
    )
    http = _mapping(top.get("http_server_config") or {}, "http_server_config")
    _known_keys(http, "http_server_config", _HTTP_KEYS)
    if "http2" in http and not isinstance(http["http2"], bool):
        raise WebConfigError("http_server_config.http2: must be true or false")
    headers = _headers(http.get("headers") or {})
    users = _users(top.get("basic_auth_users") or {})
    return WebConfig(tls=tls, users=users, headers=headers)


def read_web_config(path: Path) -> WebConfig:
    """Read and validate the file's syntax and values (not yet the certificates: see tls.py)."""
    try:
        # non-blocking and regular files only (hostfile.py): a FIFO here must not wedge a reload
        raw = read_bounded(str(path), MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(f"{path} is not UTF-8 text") from None
    return parse_web_config(text, path.parent)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{where or 'the file'}: must be a mapping of names to values")
    return value


def _shown(key: str) -> str:
    """A key as it can appear in a one-line message: as written if plain, else quoted."""
    return key if key.isprintable() and len(key) <= 64 else repr(key[:64])


def _known_keys(section: Mapping[str, Any], where: str, known: tuple[str, ...]) -> None:
    for key in section:
        full = f"{where}.{key}" if where else key
        if full in _UNSUPPORTED:
            raise WebConfigError(f"{full}: not supported by wattprobe ({_UNSUPPORTED[full]})")
        if key not in known:
            shown = f"{where}.{_shown(key)}" if where else _shown(key)
            raise WebConfigError(f"{shown}: unknown key")


def _string(section: Mapping[str, Any], key: str, where: str) -> str | None:
    value = section.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise WebConfigError(f"{where}.{key}: must be a string")
    return value


def _strings(section: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = section.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WebConfigError(f"{where}.{key}: must be a list of strings")
    return tuple(value)


def _tls(section: Mapping[str, Any], base_dir: Path) -> TlsSettings:
    where = "tls_server_config"
    _known_keys(section, where, _TLS_KEYS)

    def path(key: str) -> Path | None:
        name = _string(section, key, where)
        return None if name is None else base_dir / name

    cert_file, key_file, ca_file = path("cert_file"), path("key_file"), path("client_ca_file")
    cert_pem = _string(section, "cert", where)
    key_pem = _string(section, "key", where)
    ca_pem = _string(section, "client_ca", where)
    for a, b, name in ((cert_file, cert_pem, "cert"), (key_file, key_pem, "key")):
        if a is None and b is None:
            raise WebConfigError(f"{where}: missing one of {name} or {name}_file")
        if a is not None and b is not None:
            raise WebConfigError(f"{where}: give {name} or {name}_file, not both")
    if ca_file is not None and ca_pem is not None:
        raise WebConfigError(f"{where}: give client_ca or client_ca_file, not both")
    auth = _client_auth(section, has_ca=ca_file is not None or ca_pem is not None)
    sans = _strings(section, "client_allowed_sans", where)
    if sans and auth != REQUIRE_AND_VERIFY:
        raise WebConfigError(
            f"{where}.client_allowed_sans: needs client_auth_type {REQUIRE_AND_VERIFY}"
        )
    min_version = _version(section, "min_version", ssl.TLSVersion.TLSv1_2)
    max_version = _version(section, "max_version", ssl.TLSVersion.TLSv1_3)
    if min_version > max_version:
        raise WebConfigError(f"{where}: min_version is above max_version")
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError(f"{where}.prefer_server_cipher_suites: must be true or false")
    return TlsSettings(
        cert_file=cert_file,
        key_file=key_file,
        cert_pem=cert_pem,
        key_pem=key_pem,
        client_ca_file=ca_file,
        client_ca_pem=ca_pem,
        client_auth_type=auth,
        client_allowed_sans=sans,
        min_version=min_version,
        max_version=max_version,
        cipher_suites=_ciphers(_strings(section, "cipher_suites", where)),
        prefer_server_cipher_suites=prefer,
    )


def _client_auth(section: Mapping[str, Any], *, has_ca: bool) -> str:
    where = "tls_server_config"
    auth = _string(section, "client_auth_type", where) or NO_CLIENT_CERT
    if auth in UNVERIFIED_CLIENT_AUTH_TYPES:
        raise WebConfigError(
            f"{where}.client_auth_type: {auth} accepts unverified client certificates and is "
            f"not supported; use {REQUIRE_AND_VERIFY} with client_ca_file"
        )
    if auth not in CLIENT_AUTH_TYPES:
        raise WebConfigError(
            f"{where}.client_auth_type: {auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}"
        )
    if has_ca and auth == NO_CLIENT_CERT:
        raise WebConfigError(
            f"{where}: client CA configured without client_auth_type (set {REQUIRE_AND_VERIFY})"
        )
    if not has_ca and auth != NO_CLIENT_CERT:
        raise WebConfigError(f"{where}.client_auth_type: {auth} needs client_ca_file or client_ca")
    return auth


def _ciphers(names: tuple[str, ...]) -> tuple[str, ...]:
    ciphers: list[str] = []
    for name in names:
        if name in CIPHER_SUITES:
            ciphers.append(CIPHER_SUITES[name][1])
        elif name not in TLS13_CIPHER_SUITES:
            raise WebConfigError(f"tls_server_config.cipher_suites: unknown cipher suite {name!r}")
    return tuple(ciphers)


def _version(section: Mapping[str, Any], key: str, default: ssl.TLSVersion) -> ssl.TLSVersion:
    name = _string(section, key, "tls_server_config")
    if name is None:
        return default
    if name not in TLS_VERSIONS:
        raise WebConfigError(
            f"tls_server_config.{key}: unknown TLS version {name!r} "
            f"(one of {', '.join(TLS_VERSIONS)})"
        )
    return TLS_VERSIONS[name]


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    where = "http_server_config.headers"
    section = _mapping(value, where)
    headers = []
    for name, header_value in section.items():
        if name not in ALLOWED_HEADERS:
            raise WebConfigError(f"{where}: HTTP header {name!r} cannot be configured")
        if not isinstance(header_value, str) or not header_value.isprintable():
            raise WebConfigError(f"{where}.{name}: must be a one-line string")
        allowed = ALLOWED_HEADERS[name]
        if allowed is not None and header_value not in allowed:
            raise WebConfigError(f"{where}.{name}: must be one of {', '.join(allowed)}")
        if header_value:  # blank means unset, as in exporter-toolkit
            headers.append((name, header_value))
    return tuple(headers)


def _users(value: Any) -> tuple[tuple[str, str], ...]:
    where = "basic_auth_users"
    section = _mapping(value, where)
    users = []
    for user, hashed in section.items():
        if ":" in user or not user.isprintable():
            raise WebConfigError(f"{where}: user name {user!r} may not contain ':' or controls")
        if not isinstance(hashed, str):
            raise WebConfigError(f"{where}.{user}: must be a bcrypt hash string")
        m = _BCRYPT_HASH.match(hashed)
        # the hash itself is a secret: the message names the user, never the value
        if m is None:
            raise WebConfigError(f"{where}.{user}: not a bcrypt hash ($2a$, $2b$ or $2y$)")
        if not 4 <= int(m.group(1)) <= 31:
            raise WebConfigError(f"{where}.{user}: bcrypt cost must be 4..31")
        users.append((user, hashed))
    return tuple(users)
