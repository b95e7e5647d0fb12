"""The DaemonSet's capability list is enough, for real: as uid 0 with exactly the capabilities it
adds (setpriv drops the rest, as the container runtime does), bcc loads tracepoint programs
(a probe like DESIGN.md's, and the agent's own bpf/activity.c through `wattprobe check` and a
running `wattprobe serve`), `wattprobe check` reads a host tree whose RAPL counters are 0400 root,
and without BPF or PERFMON the load fails. The image's kernel headers (merged by
deploy/image/merge-kernel-headers.sh, named by WATTPROBE_EBPF_KERNEL_HEADERS) are what the agent
compiles against on a node without headers for its running kernel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, build, env_of
from tests.support.fixturehost import FixtureHost
from tests.support.realparts import missing, require_binary, require_root
from tests.support.running import parse_samples, select, start_exporter

DEBIAN_PYTHON = "/usr/bin/python3"  # python3-bpfcc is built for Debian's python
IMAGE_DIR = DEPLOY / "image"
IMAGE_HEADERS = "/opt/wattprobe/kernel-headers"  # where deploy/Dockerfile puts the merged tree
CAP_NUMBERS = {"SYS_PTRACE": 19, "DAC_READ_SEARCH": 2, "SYS_RESOURCE": 24, "PERFMON": 38, "BPF": 39}

PROBE = r"""
BPF_HASH(oncpu, u32, u64, 1024);
BPF_HASH(ioctls, u32, u64, 1024);
TRACEPOINT_PROBE(sched, sched_switch) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 zero = 0, *v = oncpu.lookup_or_try_init(&tgid, &zero);
    if (v) { __sync_fetch_and_add(v, 1); }
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_enter_ioctl) {
    if (((args->cmd >> 8) & 0xff) != 0x46) { return 0; }
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 zero = 0, *v = ioctls.lookup_or_try_init(&tgid, &zero);
    if (v) { __sync_fetch_and_add(v, 1); }
    return 0;
}
"""

LOADER = """
import json, os, sys, time
from bcc import BPF
text = open(sys.argv[1]).read()
b = BPF(text=text)
time.sleep(0.3)
counted = len(b["oncpu"]) if "oncpu" in text else -1
print(json.dumps({"counted": counted, "headers": os.environ.get("BCC_KERNEL_SOURCE", "")}))
"""


def _agent_container(overlay: str = "default") -> dict[str, Any]:
    (ds,) = [o for o in build(overlay) if o["kind"] == "DaemonSet"]
    container: dict[str, Any] = ds["spec"]["template"]["spec"]["containers"][0]
    return container


def _manifest_capabilities() -> list[str]:
    added: list[str] = _agent_container()["securityContext"]["capabilities"]["add"]
    return added


def _manifest_ebpf_env(headers: Path) -> dict[str, str]:
    """The DaemonSet's eBPF settings, with the image's header path replaced by this machine's
    copy of the same tree (the /host/... paths only exist in the pod)."""
    env = {
        name: value
        for name, value in env_of(_agent_container()).items()
        if value is not None and name.startswith(("WATTPROBE_ACTIVITY_", "WATTPROBE_EBPF_"))
    }
    assert env["WATTPROBE_EBPF_KERNEL_HEADERS"] == IMAGE_HEADERS
    return env | {"WATTPROBE_EBPF_KERNEL_HEADERS": str(headers)}


def _without_running_kernel_headers() -> None:
    """The agent's first choice is /lib/modules/$(uname -r)/build; only without it is the
    configured tree used, which is what a node without kernel headers looks like."""
    build_dir = Path("/lib/modules") / os.uname().release / "build"
    if build_dir.exists():
        missing(f"a machine without headers for its running kernel ({build_dir} exists)")


def _bounding_set() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    raise AssertionError("no CapBnd in /proc/self/status")


def _grantable(caps: Sequence[str]) -> list[str]:
    """The caps this process can hand on (a VM may lack some, e.g. SYS_RESOURCE). Passing with a
    subset of the manifest's list proves the list itself is enough."""
    bounding = _bounding_set()
    return [c for c in caps if bounding >> CAP_NUMBERS[c] & 1]


@pytest.fixture(scope="module")
def real_bcc() -> str:
    require_root()
    setpriv = require_binary("setpriv")
    if not Path("/sys/kernel/tracing/events/sched/sched_switch").exists():
        missing("tracefs mounted at /sys/kernel/tracing")
    if int(Path("/proc/sys/kernel/cap_last_cap").read_text()) < CAP_NUMBERS["BPF"]:
        missing("a kernel with CAP_BPF and CAP_PERFMON (>= 5.8)")
    probe = subprocess.run(
        [DEBIAN_PYTHON, "-c", "import bcc"], capture_output=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        missing("Debian's python3-bpfcc")
    return setpriv


@pytest.fixture(scope="module")
def generic_headers(tmp_path_factory: pytest.TempPathFactory, real_bcc: str) -> Path:
    """The image's generic header tree, merged here by the image's own script: the loads below
    then do not depend on whether this host has headers for its running kernel."""
    merged = tmp_path_factory.mktemp("headers") / "kernel-headers"
    subprocess.run(
        ["sh", str(IMAGE_DIR / "merge-kernel-headers.sh"), "/usr/src", str(merged)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return merged


def _as_agent(
    setpriv: str, caps: Sequence[str], argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    return subprocess.run(
        [setpriv, f"--bounding-set={bounding}", "--inh-caps=-all", "--", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "BCC_KERNEL_SOURCE"} | (env or {}),
    )


def _probe(tmp_path: Path) -> Path:
    probe = tmp_path / "probe.c"
    probe.write_text(PROBE)
    return probe


@pytest.mark.real
@pytest.mark.slow
def test_manifest_capabilities_load_the_ebpf_programs(
    real_bcc: str, generic_headers: Path, tmp_path: Path
) -> None:
    caps = _grantable(_manifest_capabilities())
    assert {"BPF", "PERFMON"} <= set(caps)
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    env = {"BCC_KERNEL_SOURCE": str(generic_headers)}
    argv = [DEBIAN_PYTHON, str(loader), str(_probe(tmp_path))]
    proc = _as_agent(real_bcc, caps, argv, env)
    assert proc.returncode == 0, f"probe.c with {caps}:\n{proc.stderr[-2000:]}"
    assert json.loads(proc.stdout)["counted"] > 0, "sched_switch never fired"
    # the repository's own programs, loaded the way the agent loads them (its header search,
    # its cflags), with exactly these capabilities and the DaemonSet's eBPF settings
    check = [sys.executable, "-m", "exporter", "check", "--json", "--activity-source", "ebpf"]
    proc = _as_agent(real_bcc, caps, check, _manifest_ebpf_env(generic_headers))
    report = {s["source"]: s for s in json.loads(proc.stdout)["sources"]}
    assert report["ebpf"]["ok"], f"bpf/*.c with {caps}: {report['ebpf']}\n{proc.stderr[-2000:]}"


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("dropped", ["BPF", "PERFMON"])
def test_each_ebpf_capability_is_needed(
    real_bcc: str, generic_headers: Path, tmp_path: Path, dropped: str
) -> None:
    caps = [c for c in _grantable(_manifest_capabilities()) if c != dropped]
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    argv = [DEBIAN_PYTHON, str(loader), str(_probe(tmp_path))]
    proc = _as_agent(real_bcc, caps, argv, {"BCC_KERNEL_SOURCE": str(generic_headers)})
    assert proc.returncode != 0, f"loaded without {dropped}: the capability would be unneeded"
    # refused by the kernel (map creation without BPF, program load/attach without PERFMON),
    # not a compile problem
    assert re.search(r"Operation not permitted|super-user privileges", proc.stderr), proc.stderr


@pytest.mark.real
def test_root_without_dac_capabilities_reads_the_host(
    real_bcc: str, host: FixtureHost, tmp_path: Path
) -> None:
    """RAPL energy_uj is 0400 root on real hosts: uid 0 reads it as its owner, no
    DAC_READ_SEARCH / DAC_OVERRIDE needed (neither is in the manifest)."""
    caps = _grantable(_manifest_capabilities())
    assert not {"DAC_READ_SEARCH", "DAC_OVERRIDE"} & set(caps)
    energy = sorted(host.sysfs.glob("class/powercap/*/energy_uj"))
    assert energy
    for path in energy:
        path.resolve().chmod(0o400)
    wattprobe = Path(sys.executable).parent / "wattprobe"
    proc = _as_agent(real_bcc, caps, [str(wattprobe), "check", "--json", *host.args()])
    report = json.loads(proc.stdout)
    rapl = next(s for s in report["sources"] if s["source"] == "rapl")
    assert rapl["ok"], rapl


def _ebpf_check(setpriv: str, headers: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "exporter", "check", "--json", "--activity-source", "ebpf"]
    proc = _as_agent(
        setpriv, _grantable(_manifest_capabilities()), argv, _manifest_ebpf_env(headers)
    )
    report = {s["source"]: s for s in json.loads(proc.stdout)["sources"]}
    result: dict[str, Any] = report["ebpf"]
    return result


@pytest.mark.real
@pytest.mark.slow
def test_the_agent_compiles_against_the_image_headers(real_bcc: str, tmp_path: Path) -> None:
    """deploy/image/merge-kernel-headers.sh on this machine's generic Debian headers (the
    linux-headers-amd64 the image installs), then `wattprobe check --activity-source ebpf` as the
    DaemonSet runs it (its capabilities, its WATTPROBE_EBPF_* variables) on a node without
    headers for its running kernel: the agent's own header search must take the merged tree,
    say so, and compile against it. Outside the image no wrapper or BCC_KERNEL_SOURCE is
    involved, so `kubectl exec ... wattprobe check` makes the same choice as the agent."""
    _without_running_kernel_headers()
    merged = tmp_path / "kernel-headers"
    subprocess.run(
        ["sh", str(IMAGE_DIR / "merge-kernel-headers.sh"), "/usr/src", str(merged)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    ebpf = _ebpf_check(real_bcc, merged)
    assert ebpf["ok"], ebpf
    version = (merged / ".version").read_text().strip()
    # e.g. "configured headers 6.1.0-56-amd64 (<merged>)": the release the tree was made for
    said = rf"configured headers {re.escape(version)}-\S+ \({re.escape(str(merged))}\)"
    assert re.search(said, ebpf["found"]), ebpf["found"]
    # and the tree is really what was compiled against: without it the same check fails
    # (a configured tree is never silently replaced by another one)
    ebpf = _ebpf_check(real_bcc, tmp_path / "nothing-here")
    assert not ebpf["ok"]
    # check --json: a short reason, the explanation in detail (docs/check.md)
    assert ebpf["reason"] == "no kernel headers", ebpf
    assert ebpf["detail"].startswith("--ebpf.kernel-headers"), ebpf
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-a", str(merged), str(broken)], check=True, timeout=120)
    (broken / "include" / "linux" / "types.h").unlink()
    ebpf = _ebpf_check(real_bcc, broken)
    assert not ebpf["ok"] and ebpf["reason"].startswith("compile failed"), ebpf


@pytest.mark.real
@pytest.mark.slow
def test_the_agent_serves_ebpf_activity_with_the_manifest_capabilities(
    real_bcc: str, generic_headers: Path, tmp_path: Path
) -> None:
    """`wattprobe serve` as the DaemonSet runs it, for a few intervals: the eBPF source stays up
    (map batch reads, the cgroup tracepoints) and names another user's busy process from its
    /proc/<pid>/stat, all with the manifest's capabilities only."""
    caps = _grantable(_manifest_capabilities())
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    prefix = [real_bcc, f"--bounding-set={bounding}", "--inh-caps=-all", "--"]
    nobody = [real_bcc, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    busy = subprocess.Popen([*nobody, "sh", "-c", "while :; do :; done"])
    exporter = None
    try:
        exporter = start_exporter(
            ["--activity-source", "ebpf", "--interval", "1s", "--collector.process"],
            tmp_path,
            env=_manifest_ebpf_env(generic_headers),
            wait="/readyz",
            prefix=prefix,
        )
        exporter.wait_next_interval()
        samples = parse_samples(exporter.wait_next_interval())
        assert select(samples, "wattprobe_source_up", source="ebpf") == {
            frozenset({("source", "ebpf"), ("reason", "")}): 1.0
        }, exporter.log()
        busy_energy = select(
            samples, "wattprobe_process_energy_joules_total", pid=str(busy.pid), comm="sh"
        )
        assert busy_energy and max(busy_energy.values()) > 0, exporter.log()
        log = exporter.log()
        loaded = re.search(r"eBPF activity source loaded: tracepoints ([^;]*);", log)
        assert loaded, log
        attached = loaded.group(1).split(", ")
        tracefs = Path("/sys/kernel/tracing/events/cgroup")
        for event in ("cgroup_mkdir", "cgroup_attach_task"):
            if (tracefs / event).is_dir():
                assert f"cgroup:{event}" in attached, log
        assert "batch reads unavailable" not in log, log
        assert "Traceback" not in log, log
    finally:
        if exporter is not None:
            exporter.stop()
        busy.kill()
        busy.wait()


@pytest.mark.real
@pytest.mark.slow
def test_uid_0_is_what_spares_dac_read_search(real_bcc: str, generic_headers: Path) -> None:
    """Why the DaemonSet runs as uid 0 rather than as a user with capabilities: tracefs is
    root's (mode 0700), so a non-root agent with BPF and PERFMON cannot even find the
    tracepoints (a clean "permission denied" from `wattprobe check`, not a crash) and needs
    DAC_READ_SEARCH, which the manifest deliberately leaves out (it allows open_by_handle_at on
    any host file)."""
    if Path("/sys/kernel/tracing").stat().st_mode & 0o005:
        missing("tracefs with its default mode 0700 (this one is readable by others)")
    nobody = [real_bcc, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run(
        [*nobody, "--", sys.executable, "-c", "import exporter"],
        capture_output=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    if probe.returncode != 0:
        missing("a checkout and venv that uid 65534 can read")

    # pytest's tmp dirs are 0700 root: give nobody its own copy of the image's headers
    shared = Path(tempfile.mkdtemp(prefix="wattprobe-headers-"))
    shared.chmod(0o755)
    headers = shared / "kernel-headers"
    subprocess.run(["cp", "-a", str(generic_headers), str(headers)], check=True, timeout=120)

    def check_as_nobody(caps: str) -> dict[str, Any]:
        argv = [
            *nobody,
            f"--inh-caps={caps}",
            f"--ambient-caps={caps}",
            "--",
            *(sys.executable, "-m", "exporter", "check", "--json", "--activity-source", "ebpf"),
        ]
        env = {k: v for k, v in os.environ.items() if k != "BCC_KERNEL_SOURCE"}
        env |= _manifest_ebpf_env(headers)
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=180, check=False, env=env, cwd="/"
        )
        assert "Traceback" not in proc.stderr and proc.stdout, proc.stderr
        report = {s["source"]: s for s in json.loads(proc.stdout)["sources"]}
        result: dict[str, Any] = report["ebpf"]
        return result

    try:
        without = check_as_nobody("+bpf,+perfmon")
        assert not without["ok"] and without["reason"].startswith("permission denied"), without
        assert "tracefs" in without["detail"], without
        # the fix is the manifest's (uid 0), not DAC_READ_SEARCH, which it leaves out on purpose
        assert "uid 0" in without["fix"] and "DAC_READ_SEARCH" not in without["fix"], without
        with_dac = check_as_nobody("+bpf,+perfmon,+dac_read_search")
        assert with_dac["ok"], with_dac
    finally:
        shutil.rmtree(shared)
