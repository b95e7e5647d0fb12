"""The DaemonSet's capability list is enough, for real: as uid 0 with exactly the capabilities it
adds (setpriv drops the rest, as the container runtime does), bcc loads tracepoint programs
(the repository's bpf/*.c when present, and a probe like DESIGN.md's), `wattprobe check` reads
a host tree whose RAPL counters are 0400 root, and without BPF or PERFMON the load fails.
The image's header fallback (deploy/image/) is exercised the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.deploy.manifests import DEPLOY, build
from tests.fixturehost import FixtureHost
from tests.realparts import missing, require_binary, require_root

DEBIAN_PYTHON = "/usr/bin/python3"  # python3-bpfcc is built for Debian's python
IMAGE_DIR = DEPLOY / "image"
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


def _manifest_capabilities() -> list[str]:
    (ds,) = [o for o in build("default") if o["kind"] == "DaemonSet"]
    added: list[str] = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "capabilities"
    ]["add"]
    return added


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
    # its cflags), with exactly these capabilities
    check = [sys.executable, "-m", "exporter", "check", "--json", "--activity-source", "ebpf"]
    proc = _as_agent(real_bcc, caps, check)
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


@pytest.mark.real
@pytest.mark.slow
def test_image_header_fallback_compiles_with_generic_headers(real_bcc: str, tmp_path: Path) -> None:
    """deploy/image/merge-kernel-headers.sh on this machine's generic Debian headers (the
    linux-headers-amd64 the image installs), then the image's wattprobe wrapper on a node
    without host headers: bcc must compile against the merged tree."""
    merged = tmp_path / "kernel-headers"
    subprocess.run(
        ["sh", str(IMAGE_DIR / "merge-kernel-headers.sh"), "/usr/src", str(merged)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    assert (merged / "include" / "linux" / "types.h").exists()
    assert (merged / "include" / "generated" / "autoconf.h").exists()
    no_host_headers = tmp_path / "modules"
    no_host_headers.mkdir()
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    env = {
        "WATTPROBE_HOST_MODULES": str(no_host_headers),
        "WATTPROBE_GENERIC_HEADERS": str(merged),
        "WATTPROBE_REAL_BINARY": DEBIAN_PYTHON,
    }
    wrapper = str(IMAGE_DIR / "wattprobe-wrapper.sh")
    caps = _grantable(_manifest_capabilities())
    probe = str(_probe(tmp_path))
    proc = _as_agent(real_bcc, caps, [wrapper, str(loader), probe], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["headers"] == str(merged)
    # and the headers are really what bcc used: a broken tree fails the same compile
    env["WATTPROBE_GENERIC_HEADERS"] = str(tmp_path / "nothing-here")
    proc = _as_agent(real_bcc, caps, [wrapper, str(loader), probe], env)
    assert proc.returncode != 0
