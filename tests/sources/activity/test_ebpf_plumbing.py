"""How the eBPF source plugs in: start-up checks, the auto/ebpf/procfs choice, start-up
statuses and map statistics through the monitor and the collector. No probes are loaded here
(tests/sources/activity/test_ebpf_real.py does that)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.app.registry import PROCESS, REGISTRY
from exporter.app.wiring import StartupError, activity_source
from exporter.exposition.collector import SnapshotCollector
from exporter.host.caps import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN
from exporter.model.config import ActivitySource, Config
from exporter.model.readings import CpuTimes, MapStats, SourceError, SourceStatus, TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.activity.ebpf import load as ebpf_load
from exporter.sources.activity.ebpf.source import EbpfSource, wants_processes
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.monitor import monitor_settings
from tests.support.running import parse_samples, select

CID = "c" * 64
POD = "kubepods-pod11111111_2222_3333_4444_555555555555.slice"
CGROUP = f"/kubepods.slice/{POD}/cri-containerd-{CID}.scope"
POD_UID = "11111111-2222-3333-4444-555555555555"


class Cpu:
    def __init__(self) -> None:
        self.busy = 0.0

    def cpu_times(self) -> CpuTimes:
        self.busy += 1.0
        return CpuTimes(busy_s=self.busy, idle_s=self.busy, ncpu=2)


class FakeEbpf:
    """Shaped like EbpfSource: tasks() with an exited total, and map_stats()."""

    name = "ebpf"

    def __init__(self) -> None:
        self.reads = 0

    def tasks(self) -> Sequence[TaskSample]:
        self.reads += 1
        n = self.reads
        return [
            TaskSample((42, 7), 42, "worker", CGROUP, False, 1.5 * n, (("nvidia", 10 * n),)),
            TaskSample((0, 99), 0, "[exited]", CGROUP, False, 0.25 * n, (("drm", n),)),
        ]

    def map_stats(self) -> Sequence[MapStats]:
        return (MapStats("tasks", 12, 32768, 3, 0), MapStats("exited", 2, 8192, 0, 1))


def render(snapshot: Snapshot) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot))
    return generate_latest(registry).decode()


def test_ebpf_tasks_and_maps_reach_the_metrics() -> None:
    monitor = Monitor(MonitorParts(cpu=Cpu(), activity=FakeEbpf()), monitor_settings())
    monitor.step()
    monitor.step()
    snap = monitor.step()
    samples = parse_samples(render(snap))
    ids = {"container_id": CID}
    # two intervals of deltas: (1.5 + 0.25) s each; ioctls 10 nvidia and 1 drm each
    labels = {"container_id": CID, "container": "", "pod": "", "namespace": "", "pod_uid": POD_UID}
    assert select(samples, "wattprobe_container_cpu_seconds_total", **ids) == {
        frozenset(labels.items()): 3.5
    }
    ioctls = select(samples, "wattprobe_container_gpu_ioctls_total", **ids)
    assert {dict(k)["driver"]: v for k, v in ioctls.items()} == {"nvidia": 20.0, "drm": 2.0}
    assert select(samples, "wattprobe_ebpf_map_entries", map="tasks") == {
        frozenset({("map", "tasks")}): 12.0
    }
    assert select(samples, "wattprobe_ebpf_map_max_entries", map="exited") == {
        frozenset({("map", "exited")}): 8192.0
    }
    assert select(samples, "wattprobe_ebpf_map_evictions_total", map="tasks") == {
        frozenset({("map", "tasks")}): 3.0
    }
    assert select(samples, "wattprobe_ebpf_map_insert_failures_total", map="exited") == {
        frozenset({("map", "exited")}): 1.0
    }
    assert select(samples, "wattprobe_source_up", source="ebpf") == {
        frozenset({("source", "ebpf"), ("reason", "")}): 1.0
    }


def test_no_ebpf_map_metrics_without_ebpf() -> None:
    monitor = Monitor(
        MonitorParts(cpu=Cpu(), activity=ProcfsSource(Path("/nonexistent"))), monitor_settings()
    )
    assert "wattprobe_ebpf_" not in render(monitor.step())


def test_startup_status_is_in_every_snapshot() -> None:
    failed = SourceStatus("ebpf", False, "no kernel headers", "looked in /usr/src")
    monitor = Monitor(
        MonitorParts(cpu=Cpu(), activity=FakeEbpf(), startup_statuses=[failed]), monitor_settings()
    )
    for _ in range(3):
        samples = parse_samples(render(monitor.step()))
        assert select(samples, "wattprobe_source_up", reason="no kernel headers") == {
            frozenset({("source", "ebpf"), ("reason", "no kernel headers")}): 0.0
        }


def failing_start(*_args: object, **_kwargs: object) -> EbpfSource:
    raise SourceError(ebpf_load.NO_TRACEFS, "tracefs is not mounted at /sys/kernel/tracing")


def test_auto_falls_back_to_procfs_with_a_status(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(EbpfSource, "start", staticmethod(failing_start))
    procfs = ProcfsSource(Path("/proc"))
    chosen, statuses = activity_source(Config(activity_source=ActivitySource.AUTO), procfs)
    assert chosen is procfs
    assert statuses == (
        SourceStatus("ebpf", False, "no tracefs", "tracefs is not mounted at /sys/kernel/tracing"),
    )
    lines = [r.getMessage() for r in caplog.records if "eBPF" in r.getMessage()]
    assert len(lines) == 1 and "mount -t tracefs" in lines[0]


def test_explicit_ebpf_failure_is_a_startup_error_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(EbpfSource, "start", staticmethod(failing_start))
    with pytest.raises(StartupError) as err:
        activity_source(Config(activity_source=ActivitySource.EBPF), ProcfsSource(Path("/proc")))
    assert str(err.value).startswith("--activity.source ebpf: no tracefs: tracefs is not mounted")
    assert "; fix: mount tracefs: mount -t tracefs nodev /sys/kernel/tracing" in str(err.value)


def test_procfs_choice_does_not_try_ebpf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EbpfSource, "start", staticmethod(failing_start))
    procfs = ProcfsSource(Path("/proc"))
    assert activity_source(Config(activity_source=ActivitySource.PROCFS), procfs) == (procfs, ())


def status_file(tmp_path: Path, caps: int) -> Path:
    path = tmp_path / "status"
    path.write_text(f"Name:\ttest\nCapInh:\t0000000000000000\nCapEff:\t{caps:016x}\n")
    return path


@pytest.mark.parametrize(
    ("caps", "ok"),
    [
        (1 << CAP_SYS_ADMIN, True),
        ((1 << CAP_BPF) | (1 << CAP_PERFMON), True),
        (1 << CAP_BPF, False),
        (0, False),
    ],
)
def test_privileges(tmp_path: Path, caps: int, ok: bool) -> None:
    if ok:
        ebpf_load.check_privileges(status_file(tmp_path, caps))
        return
    with pytest.raises(SourceError) as err:
        ebpf_load.check_privileges(status_file(tmp_path, caps))
    assert err.value.reason == ebpf_load.PERMISSION


def test_tracefs_must_be_mounted_where_bcc_looks(tmp_path: Path) -> None:
    tracing, debug_tracing = tmp_path / "tracing", tmp_path / "debug/tracing"
    tracing.mkdir()
    with pytest.raises(SourceError) as err:
        ebpf_load.find_tracefs((tracing, debug_tracing))
    assert err.value.reason == ebpf_load.NO_TRACEFS and "not mounted" in err.value.detail
    (tracing / "events/sched/sched_switch").mkdir(parents=True)
    assert ebpf_load.find_tracefs((tracing, debug_tracing)) == tracing
    # bcc prefers debugfs's tracing directory whenever it exists, mounted or not
    debug_tracing.mkdir(parents=True)
    with pytest.raises(SourceError):
        ebpf_load.find_tracefs((tracing, debug_tracing))


def test_group_dead_field_is_detected_from_the_format(tmp_path: Path) -> None:
    fmt = tmp_path / "events/sched/sched_process_exit/format"
    fmt.parent.mkdir(parents=True)
    fmt.write_text("\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n")
    assert not ebpf_load.has_group_dead(tmp_path)
    fmt.write_text(fmt.read_text() + "\tfield:bool group_dead;\toffset:32;\tsize:1;\n")
    assert ebpf_load.has_group_dead(tmp_path)


def test_bpf_source_ships_beside_the_package() -> None:
    assert ebpf_load.bpf_source().name == "activity.c"


def test_gpu_device_nodes(tmp_path: Path) -> None:
    assert ebpf_load.gpu_device_nodes(tmp_path) == []
    (tmp_path / "dri").mkdir()
    (tmp_path / "dri/card0").touch()
    (tmp_path / "nvidiactl").touch()
    (tmp_path / "nvidia0").touch()
    assert ebpf_load.gpu_device_nodes(tmp_path) == [
        str(tmp_path / "nvidia0"),
        str(tmp_path / "nvidiactl"),
        str(tmp_path / "dri/card0"),
    ]


@pytest.mark.parametrize(
    ("message", "raw"),
    [
        ("Failed to attach BPF to raw tracepoint", True),  # no such raw tracepoint
        # refused at load or attach: no raw tracepoints (< 4.17), no prev_state argument (< 5.18)
        ("Failed to load BPF program b'raw_tracepoint__sched_switch': Invalid argument", True),
        ("Failed to compile BPF module b'/x/bpf/activity.c'", False),
        ("Failed to attach BPF program b'tracepoint__sched__sched_process_exit'", False),
    ],
)
def test_only_a_refused_raw_tracepoint_falls_back(message: str, raw: bool) -> None:
    assert ebpf_load.raw_attach_failed(Exception(message)) is raw


@pytest.mark.parametrize(
    "collectors", [None, frozenset(), frozenset({"process"}), frozenset({"rapl", "process"})]
)
def test_per_process_entries_only_with_the_process_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, collectors: frozenset[str] | None
) -> None:
    """serve and `wattprobe check` load the programs without sched_switch (CPU time from the
    cgroups' totals) unless --collector.process asks for per-process series (then an entry per
    process and the switch program)."""
    asked: list[object] = []

    def start(*_args: object, per_process: bool = True, **_kwargs: object) -> EbpfSource:
        asked.append(per_process)
        raise SourceError(ebpf_load.NO_TRACEFS, "no")

    monkeypatch.setattr(EbpfSource, "start", staticmethod(start))
    (tmp_path / "cgroup.controllers").write_text("cpu\n")  # a cgroup v2 root with CPU totals
    procfs = ProcfsSource(Path("/proc"), cgroupfs=tmp_path, per_process=False)
    assert procfs.per_cgroup
    config = Config(activity_source=ActivitySource.AUTO, collectors=collectors)
    activity_source(config, procfs)
    wanted = REGISTRY.enabled(config, PROCESS)
    assert asked == [wanted]
    assert wants_processes(REGISTRY.resolve(config)) == wanted
    assert wanted == (collectors is not None and "process" in collectors)


def test_without_cgroup_totals_the_probes_count_per_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where the cgroup tree has no CPU totals to read, per-container CPU can only come from the
    probes: the switch program is loaded even without --collector.process."""
    asked: list[object] = []

    def start(*_args: object, per_process: bool = True, **_kwargs: object) -> EbpfSource:
        asked.append(per_process)
        raise SourceError(ebpf_load.NO_TRACEFS, "no")

    monkeypatch.setattr(EbpfSource, "start", staticmethod(start))
    procfs = ProcfsSource(Path("/proc"), cgroupfs=tmp_path, per_process=False)
    assert not procfs.per_cgroup
    activity_source(Config(activity_source=ActivitySource.AUTO), procfs)
    assert asked == [True]


def test_the_stats_counters_are_the_programs_enum_in_order() -> None:
    """source.STATS indexes the per-CPU stats map: it must be bpf/activity.c's enum stat_index,
    in order (a counter added in C and not here would shift every index after it)."""
    import re  # noqa: PLC0415

    from exporter.sources.activity.ebpf.load import bpf_source  # noqa: PLC0415
    from exporter.sources.activity.ebpf.source import N_STATS, STATS  # noqa: PLC0415

    text = bpf_source().read_text()
    body = re.search(r"enum stat_index \{(.*?)\};", text, re.S)
    assert body is not None
    names = re.findall(r"^\s*([A-Z_]+),", body.group(1), re.M)
    assert names == [*STATS, "N_STATS"]
    assert len(STATS) == N_STATS
