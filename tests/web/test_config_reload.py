"""Web config reloads off the event loop, and a FIFO as --web.config.file (issue 41).

Before: a changed file was read, parsed and hashed on the event loop (a 10,000-user file held it
~0.7 s per reload), and a FIFO as the file wedged every request, /healthz included, for good:
even SIGTERM did not end the process. Now the loop asks current_nowait(), which hands a reload
to a worker and keeps serving the old config until the new one is whole; the file is read
non-blocking and bounded, so a FIFO is refused with a reason and the last good config kept.
Waits are bounded loops and socket timeouts (hang guards), never timing assertions.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from exporter.app.cli import cli
from exporter.model.config import HttpLimits
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.web import live as live_module
from exporter.web.config import WebConfig, WebConfigError, read_web_config
from exporter.web.live import LiveWebConfig
from exporter.web.server import Health, MetricsServer, make_server
from tests.support.fixturehost import FixtureHost
from tests.support.running import start_exporter
from tests.support.websec_support import bcrypt_hash, status_of, write_config

WAIT_S = 30.0


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "did not happen"
        time.sleep(0.02)


def _fifo_in_place_of(path: Path) -> None:
    fifo = path.with_name(".fifo")
    os.mkfifo(fifo)
    os.replace(fifo, path)


def test_the_old_config_serves_while_a_reload_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path / "web.yml", {"basic_auth_users": {"a": bcrypt_hash("1")}})
    live = LiveWebConfig.load(path)
    first = live.current_nowait()
    parsing = threading.Event()
    release = threading.Event()

    def slow(p: Path) -> WebConfig:  # a huge file being parsed, held until released
        parsing.set()
        release.wait(WAIT_S)
        return read_web_config(p)

    monkeypatch.setattr(live_module, "read_web_config", slow)
    write_config(path, {"basic_auth_users": {"b": bcrypt_hash("2")}})
    assert live.current_nowait() is first  # at once: the reload runs on a worker
    assert parsing.wait(WAIT_S)
    for _ in range(50):
        assert live.current_nowait() is first  # no second reload, no wait, the old config
    assert [t.name for t in threading.enumerate()].count("web-config-reload") == 1
    release.set()
    _until(lambda: live.current_nowait() is not first)
    assert live.current_nowait().auth.check("Basic " + "Yjoy")  # b:2, base64
    assert live.last_reload.successful


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MetricsServer, LiveWebConfig, Path]]:
    path = write_config(
        tmp_path / "web.yml",
        {"http_server_config": {"headers": {"Strict-Transport-Security": "max-age=1"}}},
    )
    live = LiveWebConfig.load(path)
    server = make_server(
        "127.0.0.1",
        0,
        lambda: EMPTY_SNAPSHOT,
        Health(alive=lambda: True, ready=lambda: True),
        "/metrics",
        limits=HttpLimits(header_timeout_s=5.0),
        web=live,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, live, path
    server.shutdown()
    server.server_close()
    thread.join(WAIT_S)


def _healthz(server: MetricsServer) -> bytes:
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_a_fifo_as_the_web_config_is_refused_and_the_last_good_kept(
    served: tuple[MetricsServer, LiveWebConfig, Path], caplog: pytest.LogCaptureFixture
) -> None:
    server, live, path = served
    caplog.set_level(logging.ERROR, logger="exporter.web.live")
    _fifo_in_place_of(path)
    for _ in range(5):  # every request answered, with the last good config's headers
        answer = _healthz(server)
        assert status_of(answer) == 200 and b"Strict-Transport-Security: max-age=1" in answer
    _until(lambda: not live.last_reload.successful)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "not a regular file (FIFO)" in errors[0], errors
    path.unlink()
    write_config(
        path, {"http_server_config": {"headers": {"Strict-Transport-Security": "max-age=2"}}}
    )
    _until(lambda: b"Strict-Transport-Security: max-age=2" in _healthz(server))
    assert live.last_reload.successful


def test_a_fifo_as_the_web_config_at_start_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    os.mkfifo(path)
    with pytest.raises(WebConfigError, match="FIFO"):  # refused at once (a hang guard first)
        LiveWebConfig.load(path)
    result = CliRunner().invoke(cli, ["serve", "--web.config.file", str(path)])
    assert result.exit_code == 2
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "not a regular file (FIFO)" in errors[0], result.output


def test_sigterm_ends_a_server_whose_web_config_became_a_fifo(
    host: FixtureHost, tmp_path: Path
) -> None:
    path = write_config(
        tmp_path / "web.yml",
        {"http_server_config": {"headers": {"Strict-Transport-Security": "max-age=1"}}},
    )
    proc = start_exporter([*host.args(), "--web.config.file", str(path)], log_dir=tmp_path)
    try:
        _fifo_in_place_of(path)
        for _ in range(3):
            status, _body = proc.get("/healthz", timeout=WAIT_S)
            assert status == 200
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=WAIT_S) == 0
        assert "not a regular file (FIFO)" in proc.log()
    finally:
        proc.stop()
