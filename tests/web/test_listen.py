"""`wattprobe serve` checks --web.listen-address before it starts anything slow (the eBPF
compile): a taken or foreign address is one line naming the flag, a non-zero exit, no
traceback, and no source started."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from exporter.app import cli as cli_module
from exporter.web.listen import format_address, listen_problem


@pytest.fixture
def taken() -> Iterator[int]:
    """A port with a listener on 127.0.0.1, as another exporter would hold it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.slow  # a fresh interpreter imports the agent: seconds on a loaded machine
def test_taken_port_is_one_line_naming_the_flag(taken: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--web.listen-address", f"127.0.0.1:{taken}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--web.listen-address" in lines[0]
    assert f"127.0.0.1:{taken}" in lines[0]
    assert "address already in use" in lines[0]
    assert "Traceback" not in proc.stderr


def test_no_source_starts_when_the_address_is_taken(
    taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check runs before the agent (and so the eBPF compile) is even built."""
    built: list[object] = []
    monkeypatch.setattr(cli_module, "run_server", lambda *a: built.append(a))
    result = CliRunner().invoke(
        cli_module.cli, ["serve", "--web.listen-address", f"127.0.0.1:{taken}"]
    )
    assert result.exit_code == 1
    assert built == []
    # a free port goes on to start the server (here: the stand-in above)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    result = CliRunner().invoke(
        cli_module.cli, ["serve", "--web.listen-address", f"127.0.0.1:{free}"]
    )
    assert result.exit_code == 0, result.output
    assert len(built) == 1


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("192.0.2.1", "no interface of this machine has that address"),  # TEST-NET-1
        ("no-such-host.invalid", "cannot resolve 'no-such-host.invalid'"),
    ],
)
def test_foreign_or_unknown_host_is_named(host: str, expected: str) -> None:
    problem = listen_problem(host, 28390)
    assert problem is not None
    assert expected in problem


def test_a_free_address_is_left_free() -> None:
    """The probe closes its socket: the server can bind the same port right after."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    assert listen_problem("127.0.0.1", port) is None
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


@pytest.mark.parametrize(
    ("host", "port", "text"),
    [("", 28390, ":28390"), ("127.0.0.1", 9000, "127.0.0.1:9000"), ("::1", 9000, "[::1]:9000")],
)
def test_address_is_shown_as_the_flag_spells_it(host: str, port: int, text: str) -> None:
    assert format_address(host, port) == text
