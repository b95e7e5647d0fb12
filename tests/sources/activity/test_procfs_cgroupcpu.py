"""The cgroup CPU time files (v2 cpu.stat, v1 cpuacct.usage) in fixture trees, and the /proc
source completing container CPU time from them through the monitor."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.app.wiring import build_monitor
from exporter.host.procstat import CLOCK_TICKS
from exporter.model.config import ActivitySource, Config, IdlePower, PodSource
from exporter.sources.activity.procfs.cgroupcpu import V1, V2, CgroupCpuFiles
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.paths import FIXTURES

POD_V1 = "/kubepods/pod2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
F2 = "f2" * 32  # CRI-O container of fixture processes 2101 and 2102, cgroupfs driver, v1
F2_V1 = f"{POD_V1}/crio-{F2}"
B1 = "b1" * 32  # containerd container of fixture processes 1101 and 1102, systemd driver, v2
B1_V2 = (
    "/kubepods.slice/kubepods-pod7a8b9c0d_1e2f_4a5b_8c6d_7e8f9a0b1c2d.slice/"
    f"cri-containerd-{B1}.scope"
)
FIXTURE_PROC = FIXTURES / "proc"


def hybrid_tree(root: Path) -> Path:
    """A hybrid host's cgroup mounts: cgroup2 at unified/, cpu,cpuacct v1 (and its link)."""
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("")
    (root / "cpu,cpuacct").mkdir()
    (root / "cpu,cpuacct" / "cpuacct.usage").write_text("987654321000\n")
    (root / "cpuacct").symlink_to("cpu,cpuacct")
    return root


def set_v2(root: Path, path: str, usage_us: int) -> None:
    d = root / "unified" / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    write_atomic(
        d / "cpu.stat",
        f"usage_usec {usage_us}\nuser_usec {usage_us // 2}\nsystem_usec {usage_us // 2}\n"
        "nice_usec 0\ncore_sched.force_idle_usec 0\n",
    )


def set_v1(root: Path, path: str, usage_ns: int) -> None:
    d = root / "cpu,cpuacct" / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    write_atomic(d / "cpuacct.usage", f"{usage_ns}\n")


def test_each_task_is_located_in_the_hierarchy_that_names_its_container(tmp_path: Path) -> None:
    files = CgroupCpuFiles(hybrid_tree(tmp_path))
    v1_text = (FIXTURE_PROC / "2101" / "cgroup").read_text()  # v1 lines name it, 0:: is "/"
    assert files.locate(v1_text) == (V1, F2_V1)
    v2_text = (FIXTURE_PROC / "1101" / "cgroup").read_text()
    assert files.locate(v2_text) == (V2, B1_V2)
    # cgroupfs driver on a hybrid host: the v2 line is containerd's service, v1 names the pod
    runtime = v1_text.replace("0::/", "0::/system.slice/containerd.service")
    assert files.locate(runtime) == (V1, F2_V1)
    assert files.locate("0::/system.slice/cron.service\n") == (V2, "/system.slice/cron.service")


@pytest.mark.parametrize(
    "text",
    [
        "0::/\n",  # the root: its total is the machine's
        "2:cpu,cpuacct:/\n0::/\n",
        "0::/../../kubepods.slice/x.scope\n",  # a private namespace not mapped to the host
        "0::/kubepods.slice/./x\n",
        "0::relative\n",
        "0::/a//b\n",
        "",
    ],
)
def test_the_root_and_paths_that_leave_the_mount_are_not_located(tmp_path: Path, text: str) -> None:
    assert CgroupCpuFiles(hybrid_tree(tmp_path)).locate(text) is None


def test_v1_paths_are_not_read_from_a_private_cgroup_namespace(tmp_path: Path) -> None:
    files = CgroupCpuFiles(hybrid_tree(tmp_path), cgroupns_root="/kubepods.slice/agent.scope")
    assert files.locate((FIXTURE_PROC / "2101" / "cgroup").read_text()) is None
    assert files.locate((FIXTURE_PROC / "1101" / "cgroup").read_text()) == (V2, B1_V2)


def test_a_tree_without_cgroup_mounts_has_nothing_to_read(tmp_path: Path) -> None:
    assert not CgroupCpuFiles(tmp_path).available
    assert ProcfsSource(FIXTURE_PROC, cgroupfs=tmp_path).tasks()  # /proc alone, as before


def test_usage_files_are_read_as_the_kernel_writes_them(tmp_path: Path) -> None:
    root = hybrid_tree(tmp_path)
    set_v1(root, F2_V1, 12_345_678_901)
    set_v2(root, B1_V2, 4_000_123)
    files = CgroupCpuFiles(root)
    assert files.usage_ns((V1, F2_V1)) == 12_345_678_901
    assert files.usage_ns((V2, B1_V2)) == 4_000_123_000
    (root / "unified" / B1_V2.lstrip("/") / "cpu.stat").write_text("usage_usec " + "9" * 21)
    with pytest.raises(ValueError):
        files.usage_ns((V2, B1_V2))
    with pytest.raises(FileNotFoundError):
        files.usage_ns((V1, F2_V1 + "-gone"))


def test_container_cpu_and_energy_follow_the_cgroup_totals(host: FixtureHost) -> None:
    """A v1 container whose work is mostly in processes /proc never shows, and a v2
    neighbour whose work is all in live processes: through the monitor (build_monitor, as
    `wattprobe serve --activity-source procfs --collector.process`), each gets its cgroup's
    growth, and the energy is split in that proportion."""
    root = hybrid_tree(host.sysfs / "fs" / "cgroup")
    set_v1(root, F2_V1, 50 * 10**9)
    set_v2(root, B1_V2, 70 * 10**6)
    for d in ("kubelet.service", "containerd.service", "systemd-journald.service"):
        set_v2(root, f"/system.slice/{d}", 10**6)
    monitor = build_monitor(
        Config(
            procfs=host.procfs,
            sysfs=host.sysfs,
            activity_source=ActivitySource.PROCFS,
            pod_source=PodSource.NONE,
            # per process, the path this test is about (per cgroup:
            # tests/sources/activity/test_procfs_cgrouptree.py)
            collectors=frozenset({"rapl", "process"}),
            power_idle=IdlePower(default_w=0.0),  # all of it active: split by CPU time
        )
    )
    try:
        monitor.step()
        time.sleep(0.3)
        # F2: its live processes ran 1 s; children that came and went ran 4 s more
        host.add_process_ticks(2101, CLOCK_TICKS // 2)
        host.add_process_ticks(2102, CLOCK_TICKS // 2)
        set_v1(root, F2_V1, 55 * 10**9)
        # B1: 2 s, all of it by its live processes
        host.add_process_ticks(1101, 2 * CLOCK_TICKS)
        set_v2(root, B1_V2, 2_070_000)
        host.add_cpu_ticks(busy=7 * CLOCK_TICKS, idle=CLOCK_TICKS)
        host.add_energy_j("intel-rapl:0", 20.0)
        snap = monitor.step()
    finally:
        monitor.close()
    by_id = {c.container_id: c for c in snap.containers}
    assert by_id[F2].cpu_seconds == pytest.approx(5.0)
    assert by_id[B1].cpu_seconds == pytest.approx(2.0)

    def energy(cid: str) -> float:
        return sum(e.joules for e in by_id[cid].energy)

    assert energy(F2) > 0
    assert energy(F2) / energy(B1) == pytest.approx(5.0 / 2.0)
