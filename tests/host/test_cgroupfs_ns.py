"""A real private cgroup namespace, as a non-privileged pod gets on cgroup v2: the agent's
/proc readers see "/.." paths, find the namespace root's host path from their own cgroup2
mount, and classify every process as they would from the host namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.cgroupfs.ids import find_v2_root
from exporter.host.cgroupfs.ns import namespace_root
from tests.support.paths import FIXTURES
from tests.support.realparts import missing, require_binary, require_root

REPO = Path(__file__).resolve().parents[2]
AGENT_UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
AGENT_CID = "cd" * 32
WORKLOAD_UID = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"
WORKLOAD_CID = "ab" * 32

# Runs inside the namespace: mounts its own cgroup2 (as the runtime does at /sys/fs/cgroup in a
# container) and reports what the agent's readers make of the workload, itself and the host.
INSIDE = """
import json, os, sys
from pathlib import Path
from exporter.sources.activity.ebpf.source import ProcReader
from exporter.sources.activity.procfs.source import ProcfsSource
from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.cgroupfs.ns import namespace_root
host, own, workload = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
root = namespace_root(host, own)
tasks = {t.pid: t.cgroup for t in ProcfsSource(Path("/proc"), root).tasks()}
def ref(pid):
    r = classify_cgroup(tasks[pid])
    return [r.container_id, r.pod_uid, r.qos, r.pseudo]
print(json.dumps({
    "root": root,
    "raw_workload": Path(f"/proc/{workload}/cgroup").read_text(),
    "raw_self": Path("/proc/self/cgroup").read_text(),
    "workload": ref(workload),
    "self": ref(os.getpid()),
    "host": ref(os.getppid()),
    "workload_id": ProcReader(Path("/proc"), host, root).cgroup_id(workload),
    "unresolved_id": ProcReader(Path("/proc"), host).cgroup_id(workload),
}))
"""


@pytest.fixture
def cgroup_tree() -> Iterator[tuple[Path, Path, Path]]:
    """(host cgroup2 root, agent container cgroup, workload container cgroup), cgroupfs-driver
    layout with both pods burstable: the workload's path as the agent sees it hides the QoS."""
    require_root()
    require_binary("unshare")
    host = find_v2_root(Path("/sys/fs/cgroup"))
    if host is None:
        missing("a cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
    top = host / f"wattprobe-test-cgroupns-{os.getpid()}"
    agent = top / "kubepods" / "burstable" / f"pod{AGENT_UID}" / AGENT_CID
    workload = top / "kubepods" / "burstable" / f"pod{WORKLOAD_UID}" / WORKLOAD_CID
    try:
        agent.mkdir(parents=True)
        workload.mkdir(parents=True)
    except OSError as exc:
        missing(f"a writable cgroup v2 hierarchy ({exc})")
    try:
        yield host, agent, workload
    finally:
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            d.rmdir()
        top.rmdir()


def _join(cgroup: Path, argv: list[str]) -> list[str]:
    """argv run from a shell that first moves itself into cgroup."""
    return ["sh", "-c", f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"', "sh", *argv]


@pytest.mark.real
def test_readers_in_a_private_cgroup_namespace_see_host_paths(
    cgroup_tree: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    host, agent, workload = cgroup_tree
    sleeper = subprocess.Popen(_join(workload, ["sleep", "60"]))
    try:
        deadline = time.monotonic() + 10
        while str(sleeper.pid) not in (workload / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline, "the workload never joined its cgroup"
            time.sleep(0.01)
        own = tmp_path / "own-cgroupfs"
        own.mkdir()
        script = tmp_path / "inside.py"
        script.write_text(INSIDE)
        # a new cgroup namespace rooted at the agent's cgroup, and a private mount namespace
        # for its own cgroup2 mount
        inside = (
            f'mount -t cgroup2 none "{own}" && '
            f'exec "{sys.executable}" "{script}" "{host}" "{own}" {sleeper.pid}'
        )
        proc = subprocess.run(
            _join(agent, ["unshare", "--cgroup", "--mount", "sh", "-c", inside]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        missing(f"cgroup and mount namespaces ({proc.stderr.strip()})")
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    rel_agent = "/" + str(agent.relative_to(host))
    # the namespace is real: the kernel hides the shared ancestors
    assert seen["raw_self"].endswith("0::/\n"), seen["raw_self"]
    assert f"0::/../../pod{WORKLOAD_UID}/{WORKLOAD_CID}\n" in seen["raw_workload"]
    # the namespace root's host path, found from the agent's own cgroup2 mount
    assert seen["root"] == rel_agent
    assert seen["workload"] == [WORKLOAD_CID, WORKLOAD_UID, "burstable", ""]
    assert seen["self"] == [AGENT_CID, AGENT_UID, "burstable", ""]
    # the test process, outside the namespace: what it is from where it stands
    outside = classify_cgroup(Path("/proc/self/cgroup").read_text())
    assert seen["host"] == [outside.container_id, outside.pod_uid, outside.qos, outside.pseudo]
    # the eBPF source's look-up of a process's cgroup id (processes running since before load)
    assert seen["workload_id"] == workload.stat().st_ino
    assert seen["unresolved_id"] != workload.stat().st_ino  # what it got before


@pytest.mark.real
def test_the_host_namespace_needs_no_resolution() -> None:
    require_root()
    host = find_v2_root(Path("/sys/fs/cgroup"))
    if host is None:
        missing("a cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
    assert namespace_root(Path("/sys/fs/cgroup")) == "/"
    # a copy of a host's tree (fixtures) is another filesystem: never resolved against
    fixtures = FIXTURES / "sys" / "fs" / "cgroup"
    assert namespace_root(fixtures) == "/"
