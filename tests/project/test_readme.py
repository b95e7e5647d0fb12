"""The README's two commands work exactly as written, in a clean clone with a new venv.

The commands are read from the README's first code block and run through `sh -c` unchanged, in a
`git clone` of the committed HEAD (uncommitted changes are not part of it), with the plain
environment of a root shell on a fresh node: no venv activated, no PYTHONPATH.

- The run command must serve /metrics on :28390 (the port is checked free first: the command
  cannot be told to use another); it is stopped once /metrics shows a measured interval.
- The test command runs the whole `make test` (setup, lint, type check, pytest) in the clone. Its
  pytest would run this test again and recurse, so it gets PYTEST_ADDOPTS="-m smoke": pytest's
  own environment variable adds `-m smoke` to its arguments and the nested run selects only the
  tests marked smoke (quick end-to-end tests; this one is not among them).

Outside CI, apt-get is serialised with the other users of this machine through a shim on PATH
that takes /tmp/apt.lock (flock) before running the real apt-get; the command line is unchanged.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.realparts import REQUIRE_REAL, require_binary, require_root
from tests.support.running import REPO, parse_samples, select

README_PORT = 28390
SETUP_TIMEOUT_S = 900  # a new venv from PyPI and apt on a cold machine
TEST_TIMEOUT_S = 2400
FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_commands(readme: str) -> tuple[str, str]:
    """The run and test commands: the two lines of the README's first sh block."""
    match = FENCE.search(readme)
    assert match, "README.md has no ```sh block"
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    assert len(lines) == 2, lines
    run, test = lines
    assert "make run" in run and "make test" in test, lines
    return run, test


def test_readme_commands_are_found() -> None:
    run, test = readme_commands((REPO / "README.md").read_text())
    assert run.startswith("apt-get update && apt-get install -y make && make run")
    assert test.startswith("apt-get update && apt-get install -y make && make test")


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the exporter's server does
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def fresh_env(tmp: Path) -> dict[str, str]:
    """A root shell's environment on a fresh node, plus CI's own switches when set."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if os.environ.get("CI") != "true":
        shim = tmp / "apt-shim"
        shim.mkdir()
        flock = require_binary("flock")
        apt_get = require_binary("apt-get")
        (shim / "apt-get").write_text(f'#!/bin/sh\nexec {flock} /tmp/apt.lock {apt_get} "$@"\n')
        (shim / "apt-get").chmod(0o755)
        path = f"{shim}:{path}"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    for name in ("CI", "WATTPROBE_REQUIRE_REAL"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def metrics(timeout: float = 5.0) -> str | None:
    url = f"http://127.0.0.1:{README_PORT}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body: str = resp.read().decode()
            return body
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command's process group (sh, make, wattprobe); wait until all are gone."""
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while group_alive(proc.pid) and time.monotonic() < deadline:
        proc.poll()  # reap the shell, so its PID does not keep the group "alive"
        time.sleep(0.1)
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def run_command_serves_metrics(command: str, clone: Path, env: dict[str, str], log: Path) -> str:
    """Start the run command; return a /metrics page with a measured interval; stop it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make, the setup script and wattprobe: one group to stop
        )
    try:
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"the run command exited with {proc.returncode}"
            assert time.monotonic() < deadline, "no measured interval on :28390 in time"
            body = metrics()
            if body is not None and "wattprobe_last_interval_timestamp_seconds" in body:
                samples = parse_samples(body)
                if select(samples, "wattprobe_node_energy_joules_total"):
                    return body
            time.sleep(1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- {log} ---\n{log.read_text(errors='replace')}") from None
    finally:
        stop_group(proc)


@pytest.mark.slow
@pytest.mark.real
def test_readme_commands_work_as_written_in_a_clean_clone(tmp_path: Path) -> None:
    require_root()  # the commands run apt-get
    git = require_binary("git")
    if not REQUIRE_REAL and os.environ.get("WATTPROBE_README_TEST") != "1":
        pytest.skip("slow (minutes, PyPI and apt): set WATTPROBE_README_TEST=1; CI runs it")
    if not port_is_free(README_PORT):
        pytest.fail(
            f"port {README_PORT} is in use (another wattprobe?): the README's run command serves "
            "there and cannot be moved; stop what listens there and run this test again"
        )
    clone = tmp_path / "clone"
    subprocess.run([git, "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    run, test = readme_commands((clone / "README.md").read_text())
    env = fresh_env(tmp_path)

    body = run_command_serves_metrics(run, clone, env, tmp_path / "run.log")
    samples = parse_samples(body)
    assert select(samples, "wattprobe_source_up", source="procfs") == {
        frozenset({("source", "procfs"), ("reason", "")}): 1.0
    }
    assert (clone / ".venv" / "bin" / "wattprobe").exists()  # its own new venv
    assert metrics(timeout=1.0) is None, "wattprobe still serves after the run command stopped"

    result = subprocess.run(
        ["sh", "-c", test],
        cwd=clone,
        env={**env, "PYTEST_ADDOPTS": "-m smoke"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TEST_TIMEOUT_S,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    summary = result.stdout.strip().splitlines()[-1]  # pytest's closing line
    print(f"nested `make test`: {summary}")  # shown with pytest -rP
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
    assert "deselected" in summary  # the nested run chose the smoke subset, not everything
