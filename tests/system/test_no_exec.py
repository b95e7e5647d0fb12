"""wattprobe never runs another program: no shell, no external tool, nothing to inject a command
into. Checked twice:

- statically: no module of exporter/ imports a process-starting module or calls a process-
  starting function; a process may be started only as the exporter's own interpreter running
  one of its own modules (`[sys.executable, "-m", "exporter.…"]`, a literal argv, no shell);
- at run time: `wattprobe serve` with every source on (eBPF compiled and attached, the fake
  NVML with its XID thread, the kubelet client, RAPL/hwmon/procfs) and `wattprobe check`, each
  under strace -f: the only execve is the one that started it.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sources.gpu.nvml.build import build_fake_nvml
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.ebpfparts import require_ebpf
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import kube_node, source_up, ticking, wait_samples
from tests.support.realparts import require_binary
from tests.support.running import REPO, start_exporter

EXPORTER = REPO / "exporter"
FORBIDDEN_MODULES = {
    "subprocess",
    "pty",
    "multiprocessing",
    "concurrent.futures.process",
    "asyncio.subprocess",
    "popen2",
    "commands",
    "pexpect",
    "sh",
    "plumbum",
}
FORBIDDEN_OS = re.compile(
    r"^(system|popen|fork|forkpty|spawn\w*|exec\w*|posix_spawn\w*|startfile|plock)$"
)
OWN_MODULE = re.compile(r"^exporter(\.\w+)+$")


def modules() -> list[Path]:
    return sorted(p for p in EXPORTER.rglob("*.py") if "podresources/api_pb2" not in str(p))


def own_interpreter_argv(call: ast.Call) -> bool:
    """[sys.executable, "-m", "exporter.…", ...] as a literal first argument, and no shell."""
    if any(k.arg == "shell" for k in call.keywords) or not call.args:
        return False
    argv = call.args[0]
    if not isinstance(argv, ast.List) or len(argv.elts) < 3:
        return False
    first, flag, module = argv.elts[:3]
    return (
        ast.unparse(first) == "sys.executable"
        and isinstance(flag, ast.Constant)
        and flag.value == "-m"
        and isinstance(module, ast.Constant)
        and isinstance(module.value, str)
        and OWN_MODULE.match(module.value) is not None
    )


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    imports_subprocess = False
    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "subprocess":
                    imports_subprocess = True
                elif alias.name in FORBIDDEN_MODULES or alias.name.startswith("multiprocessing"):
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {a.name for a in node.names}
            if module == "subprocess" or (module == "asyncio" and names & {"subprocess"}):
                found.append(f"{where}: from {module} import {', '.join(sorted(names))}")
            elif module in FORBIDDEN_MODULES or module.startswith("multiprocessing"):
                found.append(f"{where}: from {module} import ...")
            elif module == "os" and any(FORBIDDEN_OS.match(n) for n in names):
                found.append(f"{where}: from os import {', '.join(sorted(names))}")
            elif module == "asyncio" and any("subprocess" in n for n in names):
                found.append(f"{where}: from asyncio import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and FORBIDDEN_OS.match(node.attr):
                found.append(f"{where}: os.{node.attr}")
            if node.value.id == "asyncio" and "subprocess" in node.attr:
                found.append(f"{where}: asyncio.{node.attr}")
        elif isinstance(node, ast.Call) and imports_subprocess:
            target = ast.unparse(node.func)
            if target.startswith("subprocess.") and not own_interpreter_argv(node):
                found.append(f"{where}: {target} of something else than the exporter")
    return found


def test_no_module_starts_another_program() -> None:
    checked = modules()
    assert len(checked) > 40  # the walk found the package
    problems = [v for path in checked for v in violations(path)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("import subprocess\nsubprocess.run(['ls'])\n", True),
        ("import subprocess\nsubprocess.run('ls', shell=True)\n", True),
        ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-m', 'other'])\n", True),
        ("import os\nos.system('ls')\n", True),
        ("from os import execvp\n", True),
        ("import os\nos.posix_spawnp('ls', ['ls'], {})\n", True),
        ("import pty\n", True),
        ("from multiprocessing import Process\n", True),
        ("import asyncio\nasyncio.create_subprocess_exec('ls')\n", True),
        ("import os\nos.read(0, 1)\nos.getpid()\n", False),
        (
            "import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-m', 'exporter.sources.x', '3'], pass_fds=[3])\n",
            False,
        ),
    ],
)
def test_the_static_check_catches(source: str, bad: bool, tmp_path: Path) -> None:
    fake = EXPORTER / "_probe_for_test_no_exec.py"  # inside exporter/ for relative_to
    try:
        fake.write_text(source)
        assert bool(violations(fake)) == bad, violations(fake)
    finally:
        fake.unlink()


def execs(trace: Path) -> list[str]:
    return [ln for ln in trace.read_text().splitlines() if re.search(r"\bexecve(at)?\(", ln)]


def allowed_exec(line: str) -> bool:
    """Only the exporter's own interpreter running one of its own modules."""
    return f'"{sys.executable}"' in line and re.search(r'"-m", "exporter\.\w', line) is not None


def test_serve_and_check_exec_nothing(host: FixtureHost, tmp_path: Path) -> None:
    require_ebpf()
    strace = require_binary("strace")
    gcc = require_binary("gcc")
    nvml_dir = build_fake_nvml(tmp_path / "nvml", gcc)
    scenario = Scenario.from_fixture("h100x8-timesliced", tmp_path / "h100.nvml")
    env = {"LD_LIBRARY_PATH": str(nvml_dir), **scenario.env()}
    trace = tmp_path / "serve.strace"
    prefix = [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=execve,execveat", "-o", str(trace)]
    with kube_node(tmp_path) as node, ticking(host, pids=()):
        args = [
            "--path.sysfs",
            str(host.sysfs),
            "--path.cgroupfs",
            "/sys/fs/cgroup",
            "--activity-source",
            "ebpf",
            "--interval",
            "0.3s",
            "--kube.poll-interval",
            "0.5s",
            *node.kubelet_args(),
        ]
        exp = start_exporter(args, tmp_path, env=env, prefix=[*prefix, "--"])
        try:
            samples = wait_samples(
                exp,
                lambda s: all(
                    source_up(s, name) == (1.0, "")
                    for name in ("ebpf", "nvml", "nvml_xid", "rapl", "hwmon", "procfs", "kubelet")
                ),
                "every source up",
                timeout=120,
            )
            assert samples
            time.sleep(2.0)
        finally:
            stopped = stop_traced(exp.proc)
            exp.stop()
        assert stopped, f"serve did not stop within 30 s of SIGTERM:\n{exp.log()}"
        check_trace = tmp_path / "check.strace"
        check_prefix = [*prefix[:-1], str(check_trace), "--"]
        i = args.index("--interval")
        done = subprocess.run(
            [*check_prefix, sys.executable, "-m", "exporter", "check", *args[:i], *args[i + 2 :]],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    for path in (trace, check_trace):
        lines = execs(path)
        assert lines, f"strace saw nothing in {path}"
        started, *others = lines
        assert f'"{sys.executable}"' in started or "python" in started, started
        assert [ln for ln in others if not allowed_exec(ln)] == [], path.read_text()


def stop_traced(strace: subprocess.Popen[bytes]) -> bool:
    """SIGTERM to the traced exporter (strace leaves when its tracee does); SIGKILL after 30 s.
    Whether it stopped by itself."""
    children: list[str] = []
    for task in Path(f"/proc/{strace.pid}/task").glob("*"):
        children += (task / "children").read_text().split()
    for child in children:
        os.kill(int(child), signal.SIGTERM)
    try:
        strace.wait(30)
    except subprocess.TimeoutExpired:
        for child in children:
            os.kill(int(child), signal.SIGKILL)
        return False
    return True
