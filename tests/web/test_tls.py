"""--web.config.file against a real `wattprobe serve` and real TLS clients (ssl, http.client)."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.support.fixturehost import FixtureHost
from tests.support.pki import Pki
from tests.support.running import REPO, ExporterProcess, start_exporter
from tests.support.wait import within
from tests.support.websec_support import (
    basic,
    bcrypt_hash,
    client_context,
    refused,
    request,
    write_config,
)

Start = Callable[..., ExporterProcess]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def serve(host: FixtureHost, tmp_path: Path) -> Iterator[Start]:
    """Start `wattprobe serve --web.config.file CONFIG` on the fixture host."""
    started: list[ExporterProcess] = []

    def start(config: Path, *args: str, **kwargs: Any) -> ExporterProcess:
        proc = start_exporter(
            [*host.args(), "--web.config.file", str(config), *args], log_dir=tmp_path, **kwargs
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def tls_section(pki: Pki, **extra: Any) -> dict[str, Any]:
    return {"cert_file": str(pki.server.cert), "key_file": str(pki.server.key), **extra}


def test_basic_auth_over_tls(pki: Pki, serve: Start, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": tls_section(pki),
            "basic_auth_users": {
                "prometheus": bcrypt_hash("correct horse"),
                "bob": bcrypt_hash("b"),
            },
        },
    )
    ctx = client_context(pki.ca)
    exporter = serve(config, scheme="https", ssl_context=ctx, auth=("prometheus", "correct horse"))
    ok = request(exporter.port, context=ctx, headers=basic("prometheus", "correct horse"))
    assert ok.status == 200
    assert b"wattprobe_build_info" in ok.body
    assert ok.headers["content-type"].startswith("text/plain; version=")

    wrong = request(exporter.port, context=ctx, headers=basic("prometheus", "wrong horse"))
    assert wrong.status == 401
    assert wrong.headers["www-authenticate"].startswith("Basic")
    assert b"wattprobe_" not in wrong.body

    none = request(exporter.port, context=ctx)
    assert none.status == 401
    assert none.headers["www-authenticate"].startswith("Basic")

    other_users_password = request(exporter.port, context=ctx, headers=basic("prometheus", "b"))
    assert other_users_password.status == 401
    assert request(exporter.port, context=ctx, headers=basic("mallory", "x")).status == 401
    # authentication comes before routing: paths cannot be probed without credentials
    assert request(exporter.port, "/nope", context=ctx).status == 401
    assert request(exporter.port, "/healthz", context=ctx).status == 401
    assert request(exporter.port, "/nope", context=ctx, headers=basic("bob", "b")).status == 404
    # many scrapes in a row: after the first, the bcrypt check is cached
    start = time.monotonic()
    for _ in range(20):
        assert exporter.get()[0] == 200
    assert time.monotonic() - start < 20  # a loose bound: proves no hang, not speed

    # plain HTTP to the TLS port gets no HTTP answer
    with pytest.raises((ConnectionError, OSError)):
        request(exporter.port, timeout=3)
    assert "correct horse" not in exporter.log()


def test_min_version_tls13_rejects_tls12(pki: Pki, serve: Start, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "web.yml", {"tls_server_config": tls_section(pki, min_version="TLS13")}
    )
    ctx13 = client_context(pki.ca)
    exporter = serve(config, scheme="https", ssl_context=ctx13)
    tls12_only = client_context(pki.ca, max_version=ssl.TLSVersion.TLSv1_2)
    with pytest.raises(ssl.SSLError):
        request(exporter.port, context=tls12_only)
    assert request(exporter.port, context=ctx13).status == 200
    with ctx13.wrap_socket(_connect(exporter.port), server_hostname="127.0.0.1") as s:
        assert s.version() == "TLSv1.3"


def test_max_version_and_cipher_suites(pki: Pki, serve: Start, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": tls_section(
                pki,
                max_version="TLS12",
                cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"],
            )
        },
    )
    ctx = client_context(pki.ca)
    exporter = serve(config, scheme="https", ssl_context=ctx)
    with ctx.wrap_socket(_connect(exporter.port), server_hostname="127.0.0.1") as s:
        assert s.version() == "TLSv1.2"
        cipher = s.cipher()
        assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    tls13_only = client_context(pki.ca, min_version=ssl.TLSVersion.TLSv1_3)
    with pytest.raises(ssl.SSLError):
        request(exporter.port, context=tls13_only)


def test_mutual_tls(pki: Pki, serve: Start, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": tls_section(
                pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(pki.ca)
            )
        },
    )
    with_cert = client_context(pki.ca, pki.client)
    exporter = serve(config, scheme="https", ssl_context=with_cert)
    assert request(exporter.port, context=with_cert).status == 200
    assert refused(exporter.port, client_context(pki.ca))  # no client certificate
    assert refused(exporter.port, client_context(pki.ca, pki.rogue_client))  # untrusted issuer
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        pinned = client_context(pki.ca, min_version=version, max_version=version)
        assert refused(exporter.port, pinned)
    assert request(exporter.port, context=with_cert).status == 200  # still serving


def test_client_allowed_sans(pki: Pki, serve: Start, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": tls_section(
                pki,
                client_auth_type="RequireAndVerifyClientCert",
                client_ca_file=str(pki.ca),
                client_allowed_sans=["scraper.example"],
            )
        },
    )
    allowed = client_context(pki.ca, pki.client)
    exporter = serve(config, scheme="https", ssl_context=allowed)
    assert request(exporter.port, context=allowed).status == 200
    # same CA, valid certificate, but not a listed name
    assert refused(exporter.port, client_context(pki.ca, pki.other_client))


def test_security_headers_on_every_response(pki: Pki, serve: Start, tmp_path: Path) -> None:
    headers = {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"}
    config = write_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": tls_section(pki),
            "http_server_config": {"headers": {**headers, "Strict-Transport-Security": ""}},
            "basic_auth_users": {"u": bcrypt_hash("p")},
        },
    )
    ctx = client_context(pki.ca)
    exporter = serve(config, scheme="https", ssl_context=ctx, auth=("u", "p"))
    for path, auth, status in (
        ("/metrics", True, 200),
        ("/", True, 200),
        ("/nope", True, 404),
        ("/metrics", False, 401),
    ):
        reply = request(exporter.port, path, context=ctx, headers=basic("u", "p") if auth else {})
        assert reply.status == status
        assert reply.headers["x-frame-options"] == "deny"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert "strict-transport-security" not in reply.headers  # blank means unset
        assert reply.headers["content-type"]


def test_reload_rotated_certificate_and_users(pki: Pki, serve: Start, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(pki.server.cert.read_bytes())
    key.write_bytes(pki.server.key.read_bytes())
    config = tmp_path / "web.yml"
    tls = {"cert_file": "tls.crt", "key_file": "tls.key"}  # relative to the config file
    write_config(
        config, {"tls_server_config": tls, "basic_auth_users": {"alice": bcrypt_hash("a")}}
    )
    ctx = client_context(pki.ca)
    exporter = serve(config, scheme="https", ssl_context=ctx, auth=("alice", "a"))
    first = _peer_serial(exporter.port, ctx)

    fresh = pki.reissue_server("rotated")
    _replace(cert, fresh.cert.read_bytes())
    _replace(key, fresh.key.read_bytes())
    assert within(lambda: _peer_serial(exporter.port, ctx) != first)
    assert request(exporter.port, context=ctx, headers=basic("alice", "a")).status == 200

    write_config(config, {"tls_server_config": tls, "basic_auth_users": {"bob": bcrypt_hash("b")}})
    # reloads run off the event loop (issue 41): the new users apply once the file is parsed
    assert within(
        lambda: request(exporter.port, context=ctx, headers=basic("bob", "b")).status == 200
    )
    assert request(exporter.port, context=ctx, headers=basic("alice", "a")).status == 401

    # a file that turns bad keeps the last good one serving (as a bad Prometheus reload does)
    config.write_text("tls_server_config: [not, a, mapping]\n")
    assert request(exporter.port, context=ctx, headers=basic("bob", "b")).status == 200
    assert request(exporter.port, context=ctx, headers=basic("alice", "a")).status == 401
    assert within(lambda: "still serving the previous one" in exporter.log())
    assert exporter.proc.poll() is None
    write_config(
        config, {"tls_server_config": tls, "basic_auth_users": {"carol": bcrypt_hash("c")}}
    )
    assert within(
        lambda: request(exporter.port, context=ctx, headers=basic("carol", "c")).status == 200
    )
    assert exporter.log().count("still serving the previous one") == 1


def test_basic_auth_without_tls_and_bad_reload(serve: Start, tmp_path: Path) -> None:
    config = write_config(tmp_path / "web.yml", {"basic_auth_users": {"u": bcrypt_hash("p")}})
    exporter = serve(config, auth=("u", "p"))
    assert request(exporter.port, headers=basic("u", "p")).status == 200
    assert request(exporter.port).status == 401
    assert "clear text" in exporter.log()
    config.write_text("basic_auth_users:\n  u: not-a-hash\n")
    for _ in range(3):  # the old file serves on, /healthz included
        assert request(exporter.port, headers=basic("u", "p")).status == 200
        assert request(exporter.port, "/healthz", headers=basic("u", "p")).status == 200
    assert "not-a-hash" not in exporter.log()
    assert within(lambda: "still serving the previous one" in exporter.log())
    write_config(config, {"basic_auth_users": {"u": bcrypt_hash("q")}})
    # reloads run off the event loop (issue 41): the new password applies once parsed
    assert within(lambda: request(exporter.port, headers=basic("u", "q")).status == 200)
    # switching TLS on needs a restart: refused, and the plain server serves on as it was
    write_config(config, {"tls_server_config": {"cert_file": "x", "key_file": "y"}})
    assert request(exporter.port, headers=basic("u", "q")).status == 200
    assert within(lambda: exporter.log().count("still serving the previous one") == 2)
    assert request(exporter.port, headers=basic("u", "q")).status == 200


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("tls_server_config:\n  cert_file: a.crt\n", "missing one of key or key_file"),
        ("tls_server_confg: {}\n", "tls_server_confg: unknown key"),
        ("basic_auth_users:\n  u: hunter2\n", "basic_auth_users.u: not a bcrypt hash"),
        ("basic_auth_users: {u: x}\nbasic_auth_users: {v: y}\n", "duplicate key"),
        ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS14}\n", "TLS14"),
        ("rate_limit: {interval: 1s, burst: 2}\n", "not supported"),
        ("[unclosed\n", "not valid YAML"),
        ("[" * 500 + "]" * 500 + "\n", "nested deeper than 16 levels"),  # was a RecursionError
    ],
)
def test_bad_file_is_one_line_naming_the_flag(tmp_path: Path, content: str, problem: str) -> None:
    config = tmp_path / "web.yml"
    config.write_text(content)
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--web.config.file", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("wattprobe: error:")
    assert "--web.config.file" in lines[0] and problem in lines[0]
    assert "hunter2" not in result.stderr  # a bad hash is a secret too


def test_env_var_names_the_file(pki: Pki, host: FixtureHost, tmp_path: Path) -> None:
    config = write_config(tmp_path / "web.yml", {"tls_server_config": tls_section(pki)})
    ctx = client_context(pki.ca)
    exporter = start_exporter(
        host.args(),
        log_dir=tmp_path,
        env={"WATTPROBE_WEB_CONFIG_FILE": str(config)},
        scheme="https",
        ssl_context=ctx,
    )
    try:
        assert exporter.get()[0] == 200
        assert "serving https://" in exporter.log()
    finally:
        exporter.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _peer_serial(port: int, ctx: ssl.SSLContext) -> int:
    with ctx.wrap_socket(_connect(port), server_hostname="127.0.0.1") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    tmp.replace(path)


def test_slow_tls_handshake_is_cut_off(pki: Pki, serve: Start, tmp_path: Path) -> None:
    """A client trickling its ClientHello byte by byte is dropped at the header timeout."""
    config = write_config(tmp_path / "web.yml", {"tls_server_config": tls_section(pki)})
    ctx = client_context(pki.ca)
    exporter = serve(config, "--web.read-header-timeout", "1s", scheme="https", ssl_context=ctx)
    # a real ClientHello, made without a socket
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello_maker = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        hello_maker.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"  # a TLS handshake record
    with _connect(exporter.port) as sock:
        sock.settimeout(0.2)
        start = time.monotonic()
        closed = False
        for byte in hello[:-1]:  # never the whole hello
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        elapsed = time.monotonic() - start
    assert closed, "the server waited for the whole trickled hello"
    assert elapsed < 1 + 3
    assert request(exporter.port, context=ctx).status == 200


def test_sighup_rereads_the_web_config_and_never_ends_the_process(
    serve: Start, tmp_path: Path, host: FixtureHost
) -> None:
    config = write_config(tmp_path / "web.yml", {"basic_auth_users": {"u": bcrypt_hash("p")}})
    exporter = serve(config, auth=("u", "p"))

    def hangups() -> int:
        return exporter.log().count("SIGHUP: re-reading web config")

    exporter.proc.send_signal(signal.SIGHUP)  # its default action ended the process silently
    assert within(lambda: hangups() == 1 and "reloaded" in exporter.log())
    assert exporter.proc.poll() is None
    assert request(exporter.port, headers=basic("u", "p")).status == 200
    config.write_text("basic_auth_users: [\n")
    exporter.proc.send_signal(signal.SIGHUP)
    assert within(lambda: hangups() == 2 and "still serving the previous one" in exporter.log())
    assert request(exporter.port, headers=basic("u", "p")).status == 200
    assert exporter.proc.poll() is None and "Traceback" not in exporter.log()
    # without a web config file there is nothing to re-read, and SIGHUP is said and ignored
    plain = start_exporter(host.args(), log_dir=tmp_path)
    try:
        plain.proc.send_signal(signal.SIGHUP)
        assert within(lambda: "SIGHUP: no --web.config.file" in plain.log())
        assert plain.proc.poll() is None and plain.get("/healthz")[0] == 200
    finally:
        plain.stop()
