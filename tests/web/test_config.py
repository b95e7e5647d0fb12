"""The web config file: parsing, validation, the TLS context it builds, and basic auth."""

from __future__ import annotations

import base64
import logging
import ssl
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from exporter.web.auth import CACHE_SIZE, BasicAuth, parse_basic
from exporter.web.config import (
    CIPHER_SUITES,
    WebConfig,
    WebConfigError,
    parse_web_config,
    read_web_config,
)
from exporter.web.live import LiveWebConfig
from exporter.web.tls import build_context, peer_sans, san_allowed
from tests.support.pki import Pki
from tests.support.websec_support import bcrypt_hash, write_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


def parse(config: dict[str, Any], base: Path = Path("/etc/wattprobe")) -> WebConfig:
    return parse_web_config(yaml.safe_dump(config), base)


def error_of(config: dict[str, Any] | str) -> str:
    text = config if isinstance(config, str) else yaml.safe_dump(config)
    with pytest.raises(WebConfigError) as info:
        parse_web_config(text, Path("/etc/wattprobe"))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_empty_file_is_plain_http() -> None:
    assert parse_web_config("", Path("/")) == WebConfig()
    assert parse_web_config("# nothing\n", Path("/")) == WebConfig()


def test_exporter_toolkit_example_parses() -> None:
    # the shape of exporter-toolkit's docs/web-config.yml, with its htpasswd-style $2y$ hashes
    text = """
tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m
"""
    config = parse_web_config(text, Path("/etc/wattprobe"))
    assert config.tls is not None
    assert config.tls.cert_file == Path("/etc/wattprobe/server.crt")  # relative to the file
    assert config.tls.min_version == ssl.TLSVersion.TLSv1_2  # exporter-toolkit's defaults
    assert config.tls.max_version == ssl.TLSVersion.TLSv1_3
    assert [u for u, _ in config.users] == ["alice", "bob"]
    assert "$2y$" not in repr(config)  # hashes stay out of reprs (and so out of logs)


def test_absolute_paths_stay(tmp_path: Path) -> None:
    config = parse({"tls_server_config": {"cert_file": "/a/c.crt", "key_file": "/a/c.key"}})
    assert config.tls is not None and config.tls.cert_file == Path("/a/c.crt")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"tls_server_config": {"key_file": "k"}}, "missing one of cert or cert_file"),
        ({"tls_server_config": {"cert_file": "c"}}, "missing one of key or key_file"),
        (
            {"tls_server_config": {"cert_file": "c", "cert": "x", "key_file": "k"}},
            "give cert or cert_file, not both",
        ),
        ({"tls_server_config": {"cert_file": "c", "key_file": "k", "nope": 1}}, "nope: unknown"),
        ({"basic_auth_users": {"u": "x"}, "extra": 1}, "extra: unknown key"),
        ({"rate_limit": {"burst": 1}}, "rate_limit: not supported"),
        (
            {"tls_server_config": {"cert_file": "c", "key_file": "k", "curve_preferences": []}},
            "curve_preferences: not supported",
        ),
        (
            {"tls_server_config": {"cert_file": "c", "key_file": "k", "min_version": "SSL3"}},
            "unknown TLS version 'SSL3'",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c",
                    "key_file": "k",
                    "min_version": "TLS13",
                    "max_version": "TLS12",
                }
            },
            "min_version is above max_version",
        ),
        (
            {"tls_server_config": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca"}},
            "client CA configured without client_auth_type",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c",
                    "key_file": "k",
                    "client_auth_type": "RequireAndVerifyClientCert",
                }
            },
            "needs client_ca_file",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c",
                    "key_file": "k",
                    "client_auth_type": "RequireAnyClientCert",
                    "client_ca_file": "ca",
                }
            },
            "unverified client certificates",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c",
                    "key_file": "k",
                    "client_auth_type": "Sometimes",
                    "client_ca_file": "ca",
                }
            },
            "'Sometimes' is not one of",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c",
                    "key_file": "k",
                    "client_auth_type": "VerifyClientCertIfGiven",
                    "client_ca_file": "ca",
                    "client_allowed_sans": ["x"],
                }
            },
            "client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert",
        ),
        (
            {"tls_server_config": {"cert_file": "c", "key_file": "k", "cipher_suites": ["RC4"]}},
            "unknown cipher suite 'RC4'",
        ),
        ({"tls_server_config": {"cert_file": 5, "key_file": "k"}}, "cert_file: must be a string"),
        ({"tls_server_config": "yes"}, "tls_server_config: must be a mapping"),
        ({"http_server_config": {"headers": {"X-Powered-By": "me"}}}, "cannot be configured"),
        ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}}, "deny, sameorigin"),
        ({"http_server_config": {"http2": "maybe"}}, "http2: must be true or false"),
        ({"basic_auth_users": {"u:v": bcrypt_hash("p")}}, "may not contain ':'"),
        ({"basic_auth_users": {"u": 12}}, "basic_auth_users.u: must be a bcrypt hash string"),
        ({"basic_auth_users": {"u": "$2b$03$" + "a" * 53}}, "bcrypt cost must be 4..31"),
        ({"basic_auth_users": ["u"]}, "basic_auth_users: must be a mapping"),
        ([1, 2], "the file: must be a mapping"),
    ],
)
def test_bad_values_name_the_key(config: Any, expected: str) -> None:
    assert expected in error_of(config)


def test_yaml_problems_are_one_line() -> None:
    assert "duplicate key 'u'" in error_of("basic_auth_users:\n  u: a\n  u: b\n")
    assert "not valid YAML" in error_of("tls_server_config: {cert_file: [}\n")
    assert "line 2" in error_of("a: 1\n b: [\n")


def test_secrets_never_in_messages() -> None:
    message = error_of({"basic_auth_users": {"alice": "hunter2-plaintext"}})
    assert "alice" in message and "hunter2" not in message


def test_unreadable_and_huge_files(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="No such file"):
        read_web_config(tmp_path / "missing.yml")
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(WebConfigError, match="larger than"):
        read_web_config(big)
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        read_web_config(binary)


# -- TLS context ------------------------------------------------------------------------


def test_cipher_table_matches_openssl() -> None:
    """Each Go cipher-suite name maps to the OpenSSL suite with the same IANA code."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    by_name = {c["name"]: c["id"] & 0xFFFF for c in ctx.get_ciphers()}
    for go_name, (code, openssl_name) in CIPHER_SUITES.items():
        assert by_name.get(openssl_name) == code, go_name


def test_context_from_files_and_inline_pem(pki: Pki) -> None:
    files = parse(
        {
            "tls_server_config": {
                "cert_file": str(pki.server.cert),
                "key_file": str(pki.server.key),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(pki.ca),
            }
        }
    )
    assert files.tls is not None
    ctx = build_context(files.tls)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    inline = parse(
        {
            "tls_server_config": {
                "cert": pki.server.cert.read_text(),
                "key": pki.server.key.read_text(),
                "client_auth_type": "VerifyClientCertIfGiven",
                "client_ca": pki.ca.read_text(),
            }
        }
    )
    assert inline.tls is not None
    assert "PRIVATE KEY" not in repr(inline)
    assert build_context(inline.tls).verify_mode == ssl.CERT_OPTIONAL


def tls_error(pki: Pki, tmp_path: Path, **section: Any) -> str:
    base = {"cert_file": str(pki.server.cert), "key_file": str(pki.server.key)}
    config = parse({"tls_server_config": {**base, **section}}, tmp_path)
    assert config.tls is not None
    with pytest.raises(WebConfigError) as info:
        build_context(config.tls)
    return str(info.value)


def test_context_problems(pki: Pki, tmp_path: Path) -> None:
    assert "no such file" in tls_error(pki, tmp_path, cert_file="absent.crt")
    assert "do not match" in tls_error(pki, tmp_path, key_file=str(pki.client.key))
    assert "not a PEM pair" in tls_error(pki, tmp_path, cert_file=str(pki.server.key))
    empty_ca = tmp_path / "empty-ca.pem"
    empty_ca.write_text("no certificates here\n")
    message = tls_error(
        pki,
        tmp_path,
        client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(empty_ca),
    )
    assert "client CA" in message


def test_encrypted_key_is_refused_without_prompting(pki: Pki, tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    assert "encrypted" in tls_error(pki, tmp_path, key_file=str(locked))


def test_peer_sans() -> None:
    cert: dict[str, Any] = {
        "subjectAltName": (("DNS", "a.example"), ("IP Address", "0:0:0:0:0:0:0:1"))
    }
    assert peer_sans(cert) == {"a.example", "::1"}
    assert san_allowed(cert, ("::1",)) and san_allowed(cert, ("a.example",))
    assert not san_allowed(cert, ("b.example",))
    assert not san_allowed(None, ("a.example",))
    assert san_allowed(None, ())


# -- basic auth -------------------------------------------------------------------------


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class CountingBcrypt:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            self.calls += 1
            return real(password, hashed)

        monkeypatch.setattr(bcrypt, "checkpw", checkpw)


def test_success_is_cached_and_failures_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingBcrypt(monkeypatch)
    auth = BasicAuth((("alice", bcrypt_hash("pw")),))
    assert auth.check(header("alice", "pw"))
    assert auth.check(header("alice", "pw"))
    assert counting.calls == 1
    assert not auth.check(header("alice", "nope"))
    assert not auth.check(header("alice", "nope"))
    assert counting.calls == 3
    assert not auth.check(header("mallory", "pw"))  # unknown user still pays one bcrypt
    assert counting.calls == 4


def test_cache_is_bounded_and_holds_no_password() -> None:
    # passwords long enough that a random 32-byte cache key cannot hold one by chance
    password = [f"secret-password-{i:04d}" for i in range(CACHE_SIZE + 5)]
    users = tuple((f"u{i}", bcrypt_hash(pw, cost=4)) for i, pw in enumerate(password))
    auth = BasicAuth(users)
    for i, pw in enumerate(password):
        assert auth.check(header(f"u{i}", pw))
    assert len(auth._cache) == CACHE_SIZE
    assert not any(pw.encode() in key for key in auth._cache for pw in password)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "Bearer abc",
        "Basic",
        "Basic !!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:pw").decode(),
    ],
)
def test_malformed_authorization_is_rejected(value: str | None) -> None:
    assert parse_basic(value) is None
    assert not BasicAuth((("u", bcrypt_hash("p")),)).check(value)


def test_password_details() -> None:
    auth = BasicAuth((("u", bcrypt_hash("pä:ss")),))
    assert auth.check(header("u", "pä:ss"))  # the password may hold ':' and non-ASCII
    assert auth.check("basic " + base64.b64encode("u:pä:ss".encode()).decode())
    assert not auth.check(header("u", "x" * 100))  # over bcrypt's 72 bytes: no match, no error
    assert not auth.check(header("U", "pä:ss"))  # user names are case-sensitive


def test_concurrent_checks() -> None:
    auth = BasicAuth((("u", bcrypt_hash("p")),))
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda ok=ok: results.append(auth.check(header("u", ok))))
        for ok in ("p", "q") * 8
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False] * 8 + [True] * 8


def test_live_config_reloads_on_change_only(tmp_path: Path, pki: Pki) -> None:
    path = write_config(tmp_path / "web.yml", {"basic_auth_users": {"a": bcrypt_hash("1")}})
    live = LiveWebConfig.load(path)
    first = live.current()
    assert live.current() is first  # unchanged file: the same state, no re-parse
    write_config(path, {"basic_auth_users": {"b": bcrypt_hash("2")}})
    second = live.current()
    assert not isinstance(second, WebConfigError) and second is not first
    assert second.auth.check(header("b", "2"))
    # a bad file keeps the last good one serving, as a bad Prometheus reload does
    for bad in ("basic_auth_users: [", "[" * 600 + "]" * 600, "tls_server_config: {}\n"):
        path.write_text(bad)
        assert live.current() is second
    write_config(path, {"basic_auth_users": {"c": bcrypt_hash("3")}})
    third = live.current()
    assert third is not second and third.auth.check(header("c", "3"))


def test_bad_reload_is_logged_once_not_per_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(tmp_path / "web.yml", {"basic_auth_users": {"a": bcrypt_hash("1")}})
    live = LiveWebConfig.load(path)
    good = live.current()
    path.write_text("a:\n" + "".join(" " * i + f"b{i}:\n" for i in range(1, 600)))
    with caplog.at_level(logging.ERROR, logger="exporter.web.live"):
        for _ in range(20):
            assert live.current() is good
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert "nested deeper than" in message and "still serving the previous one" in message
    assert "\n" not in message and errors[0].exc_info is None  # one line, no traceback
    caplog.clear()
    live.reload()  # SIGHUP: re-read even though nothing changed, and say so again
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


def test_auth_time_does_not_tell_users_or_their_cost() -> None:
    """A failed check costs the same whether the user exists and whatever its bcrypt cost.

    Without padding, cost 4 answers in ~1 ms and cost 10 in ~60 ms (a 60x ratio). Tries are
    interleaved and compared by median, so machine load moves every case alike.
    """
    auth = BasicAuth(
        (
            ("cheap", bcrypt_hash("p", cost=4)),
            ("middle", bcrypt_hash("p", cost=7)),
            ("dear", bcrypt_hash("p", cost=10)),
        )
    )
    cases = {"cheap": "cheap", "middle": "middle", "dear": "dear", "unknown": "nobody"}
    auth.check(header("nobody", "warm-up"))  # the dummy hash is made on first use
    times: dict[str, list[float]] = {case: [] for case in cases}
    for attempt in range(7):
        for case, user in cases.items():
            started = time.perf_counter()
            assert not auth.check(header(user, f"wrong-{attempt}"))
            times[case].append(time.perf_counter() - started)
    medians = {case: statistics.median(t) for case, t in times.items()}
    assert max(medians.values()) < 2 * min(medians.values()), medians
    # a right password is no faster the first time, then cached for every user alike
    first = {user: _timed(auth, user) for user in ("cheap", "dear")}
    assert first["cheap"] > 0.5 * first["dear"], first
    again = {user: _timed(auth, user) for user in ("cheap", "dear")}
    assert max(again.values()) < 0.1 * min(medians.values()), again


def _timed(auth: BasicAuth, user: str) -> float:
    started = time.perf_counter()
    assert auth.check(header(user, "p"))
    return time.perf_counter() - started
