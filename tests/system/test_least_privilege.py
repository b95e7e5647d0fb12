"""Least privilege, source by source (the table in docs/security.md).

`wattprobe serve` runs with privileges taken away one at a time: as root with CAP_BPF,
CAP_PERFMON and CAP_SYS_ADMIN out of the bounding set, and as nobody with no capability, with
CAP_DAC_READ_SEARCH only, and with what the whole agent needs. Files are as the kernel and the
kubelet make them: RAPL's energy_uj 0400 root (Linux >= 5.10), the service-account token 0600
root, the PodResources socket root's in a root-only directory. Each source that lacks something
reports "permission denied" on wattprobe_source_up (never a crash), and the others work.

/proc mounted with hidepid=2: tests below, in a private mount namespace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ebpfparts import require_ebpf
from tests.support.faults_support import CounterWatch
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import KubeNode, add_nvidia_gpus, kube_node, source_up, ticking
from tests.support.paths import FIXTURES
from tests.support.realparts import require_binary, require_root
from tests.support.running import ExporterProcess, select, start_exporter

NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"]
ENV = {"HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
UP = (1.0, "")
DENIED = (0.0, "permission denied")
WAIT_S = 30.0


def nobody_with(*caps: str) -> list[str]:
    if not caps:
        return [*NOBODY, "--inh-caps=-all", "--bounding-set=-all"]
    listed = ",".join(f"+{c}" for c in caps)
    return [*NOBODY, f"--inh-caps={listed}", f"--ambient-caps={listed}"]


CASES: dict[str, tuple[list[str], dict[str, tuple[float, str]]]] = {
    "root without CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN": (
        ["--bounding-set=-bpf,-perfmon,-sys_admin"],
        {"ebpf": DENIED, "rapl": UP, "hwmon": UP, "procfs": UP, "kubelet": UP, "podresources": UP},
    ),
    "nobody, no capabilities": (
        nobody_with(),
        {
            "ebpf": DENIED,
            "rapl": DENIED,
            "hwmon": UP,
            "procfs": UP,
            "kubelet": DENIED,
            "podresources": DENIED,
        },
    ),
    "nobody with CAP_DAC_READ_SEARCH": (
        nobody_with("dac_read_search"),
        {
            "ebpf": DENIED,
            "rapl": UP,
            "hwmon": UP,
            "procfs": UP,
            "kubelet": UP,
            "podresources": DENIED,  # connect(2) needs write permission on the socket
        },
    ),
    "nobody with CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE, CAP_BPF, CAP_PERFMON": (
        nobody_with("dac_read_search", "dac_override", "bpf", "perfmon"),
        {"ebpf": UP, "rapl": UP, "hwmon": UP, "procfs": UP, "kubelet": UP, "podresources": UP},
    ),
}


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory anyone may traverse (pytest's own tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="wattprobe-privilege-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_the_kernel_makes_them(host: FixtureHost, node: KubeNode) -> None:
    for zone in (host.sysfs / "class" / "powercap").iterdir():
        if (zone / "energy_uj").exists():
            (zone / "energy_uj").chmod(0o400)
    node.token_file.chmod(0o600)
    node.socket_path.parent.chmod(0o700)


def wait_statuses(
    exp: ExporterProcess, want: dict[str, tuple[float, str]]
) -> dict[str, tuple[float, str] | None]:
    watch = CounterWatch(exp)  # every scrape on the way: no counter back
    deadline = time.monotonic() + WAIT_S
    got: dict[str, tuple[float, str] | None] = {}
    while time.monotonic() < deadline:
        samples = watch.next(1)
        got = {s: source_up(samples, s) for s in want}
        if got == want:
            return got
    raise AssertionError(f"{got} != {want}\n{exp.log()}")


HOST_SOURCES = ("ebpf", "procfs", "rapl", "hwmon")


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_source_names_what_it_lacks(case: str, base: Path) -> None:
    """Two runs per case: the host's sources on the real /proc (eBPF needs a live one), then
    the Kubernetes ones on the fixture /proc (whose driver entries list an NVIDIA GPU, without
    which PodResources is not asked)."""
    require_ebpf()
    setpriv = require_binary("setpriv")
    privileges, want = CASES[case]
    host = FixtureHost.copy_of(FIXTURES, base / "host")
    add_nvidia_gpus(host)
    common = ["--path.sysfs", str(host.sysfs), "--interval", "0.3s", "--no-collector.nvml"]
    with kube_node(base) as node:
        as_the_kernel_makes_them(host, node)
        for args, sources in (
            (
                ["--path.cgroupfs", "/sys/fs/cgroup", "--kube.pod-source", "none"],
                HOST_SOURCES,
            ),
            (
                [
                    "--path.procfs",
                    str(host.procfs),
                    "--activity-source",
                    "procfs",
                    "--kube.poll-interval",
                    "0.5s",
                    *node.kubelet_args(),
                ],
                ("kubelet", "podresources", "rapl"),
            ),
        ):
            exp = start_exporter(
                [*common, *args], base, env=ENV, prefix=[setpriv, *privileges, "--"]
            )
            try:
                wait_statuses(exp, {s: want[s] for s in sources})
                assert exp.get("/healthz")[0] == 200
                assert "Traceback" not in exp.log(), exp.log()
            finally:
                exp.stop()
            assert exp.proc.returncode == 0, exp.log()


def hidepid_prefix(mountpoint: Path, privileges: list[str]) -> list[str]:
    """A private mount namespace with a procfs instance mounted hidepid=2 at mountpoint, then
    setpriv dropping to the given privileges."""
    require_root()
    unshare = require_binary("unshare")
    setpriv = require_binary("setpriv")
    mount = f'mount -t proc -o hidepid=2 proc {mountpoint} && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", mount, "sh",
            setpriv, *privileges, "--"]  # fmt: skip


PROCESS_ENERGY = "wattprobe_process_energy_joules_total"
BURN = """
import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.01:
        pass
    time.sleep(0.09)
"""


@pytest.mark.parametrize(
    ("privileges", "want"),
    [(nobody_with(), DENIED), (nobody_with("sys_ptrace"), UP)],
    ids=["nobody", "nobody with CAP_SYS_PTRACE"],
)
def test_hidepid_needs_sys_ptrace(
    privileges: list[str], want: tuple[float, str], base: Path
) -> None:
    host = FixtureHost.copy_of(FIXTURES, base / "host")
    hidden = base / "proc"
    hidden.mkdir()
    exp = start_exporter(
        [
            "--path.procfs",
            str(hidden),
            "--path.sysfs",
            str(host.sysfs),
            "--activity-source",
            "procfs",
            "--interval",
            "0.3s",
            "--collector.process",
            "--no-collector.nvml",
        ],
        base,
        env=ENV,
        prefix=hidepid_prefix(hidden, privileges),
    )
    burner = subprocess.Popen([sys.executable, "-c", BURN])  # root's, 10 % of a CPU
    try:
        with ticking(host, pids=()):  # RAPL moves: there is energy to attribute
            wait_statuses(exp, {"procfs": want, "hwmon": UP})
            if want == UP:  # it sees other users' processes, not only its own
                watch = CounterWatch(exp)
                deadline = time.monotonic() + WAIT_S
                while not select(watch.next(1), PROCESS_ENERGY, pid=str(burner.pid)):
                    assert time.monotonic() < deadline, f"{burner.pid} (root's) never seen"
    finally:
        burner.kill()
        burner.wait(5)
        exp.stop()
