"""kill -9 of the eBPF compile child mid-compile (exporter/sources/ebpf/child.py).

bcc compiles the probes in a short-lived child of the agent. A child killed while it compiles
(the OOM killer takes the process with the LLVM peak) must never hang the agent: `auto` falls
back to /proc and says why on every scrape; an explicit `--activity-source ebpf` exits 1 with
one line. The test kills the real child, found as the agent's child process, while it runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exporter.sources.activity.ebpf import child as ebpf_child
from tests.support.ebpfparts import require_ebpf
from tests.support.faults_support import CounterWatch, source_up
from tests.support.running import REPO, start_exporter

pytestmark = [pytest.mark.real, pytest.mark.slow]

CHILD = ebpf_child.__name__.encode()  # the child runs as `python -m` this module


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def _compile_children() -> list[int]:
    """Compile children of an agent started by this test process (its grandchildren)."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if CHILD not in f.read():
                    continue
            if _ppid(_ppid(pid)) == me:
                found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


class ChildKiller:
    """Kills the first compile child it sees, after it has run a while (mid-compile)."""

    def __init__(self, after_s: float = 0.5, timeout_s: float = 60.0) -> None:
        self.killed: list[int] = []
        self._after_s = after_s
        self._timeout_s = timeout_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            children = _compile_children()
            if children:
                time.sleep(self._after_s)
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        self.killed.append(pid)
                    except ProcessLookupError:
                        pass  # it finished first: the test says so
                return
            time.sleep(0.01)

    def join(self) -> None:
        self._thread.join(self._timeout_s)


def test_auto_falls_back_to_procfs_with_the_reason(tmp_path: Path) -> None:
    require_ebpf()
    killer = ChildKiller()
    proc = start_exporter(["--interval", "0.3s", "--activity-source", "auto"], tmp_path)
    try:
        killer.join()
        assert killer.killed, "the compile child was never seen running"
        watch = CounterWatch(proc)
        for _ in range(2):
            samples = watch.next()
            assert source_up(samples, "ebpf") == (0.0, "loader killed")
            assert source_up(samples, "procfs") == (1.0, "")
            assert proc.get("/readyz")[0] == 200
        log = proc.log()
        assert "killed by signal 9 while compiling" in log, log
        assert "memory limit" in log  # the fix, once
        assert "Traceback" not in log
    finally:
        proc.stop()


def test_explicit_ebpf_exits_with_one_line() -> None:
    require_ebpf()
    killer = ChildKiller()
    serve = ["serve", "--activity-source", "ebpf", "--web.listen-address", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", *serve],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    killer.join()
    try:
        # if no child was killed the agent serves on: stop it rather than wait for it
        _out, err = proc.communicate(timeout=120 if killer.killed else 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
    assert killer.killed, "the compile child was never seen running"
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wattprobe: error: --activity.source ebpf: loader killed")
    assert "signal 9" in lines[0] and "memory limit" in lines[0], lines[0]
