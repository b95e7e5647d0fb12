"""eBPF mode's interrupt time (exporter/sources/activity/ebpf/interrupts.py): /proc/stat's irq +
softirq as one kernel task, so that interrupts are kernel_processes' in both activity modes
(/proc mode: exporter/sources/activity/procfs/hostwork.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from exporter.accounting.activity import ActivityDeltas
from exporter.accounting.attribution import ZoneEnergy, attribute
from exporter.model.identity import KERNEL, SYSTEM, ContainerRef
from exporter.model.readings import TaskSample
from exporter.sources.activity.ebpf.child import _info_from_json, _info_to_json
from exporter.sources.activity.ebpf.interrupts import IRQ_COMM, IRQ_KEY, InterruptTime
from exporter.sources.activity.ebpf.kheaders import KernelHeaders
from exporter.sources.activity.ebpf.load import LoadInfo

HZ = 100
POD_CGROUP = (
    "/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/"
    "cri-containerd-" + "c" * 64 + ".scope"
)


def write_stat(procfs: Path, irq: int, softirq: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice, as the kernel writes them
    procfs.mkdir(exist_ok=True)
    (procfs / "stat").write_text(
        f"cpu  5000 10 2000 90000 300 {irq} {softirq} 7 0 0\n"
        f"cpu0 2500 5 1000 45000 150 {irq} {softirq} 7 0 0\n"
        "intr 12345 0 0\nctxt 999\nbtime 1700000000\n"
    )


def test_irq_and_softirq_ticks_from_the_first_read(tmp_path: Path) -> None:
    write_stat(tmp_path, irq=40, softirq=260)
    reader = InterruptTime(tmp_path, ticks_per_second=HZ)
    first = reader.sample()
    assert first is not None
    assert (first.key, first.comm, first.kernel_thread, first.cgroup) == (
        IRQ_KEY,
        IRQ_COMM,
        True,
        "",
    )
    assert first.cpu_seconds == 0.0  # not the time since boot: the monitor would count it all
    write_stat(tmp_path, irq=45, softirq=380)
    second = reader.sample()
    assert second is not None and second.cpu_seconds == 125 / HZ


def test_an_unreadable_stat_repeats_the_last_value(tmp_path: Path) -> None:
    reader = InterruptTime(tmp_path, ticks_per_second=HZ)
    assert reader.sample() is None  # never read: nothing to report yet
    write_stat(tmp_path, irq=0, softirq=100)
    reader.sample()
    write_stat(tmp_path, irq=0, softirq=150)
    assert (s := reader.sample()) is not None and s.cpu_seconds == 0.5
    (tmp_path / "stat").write_text("garbage\n")
    assert (s := reader.sample()) is not None and s.cpu_seconds == 0.5
    write_stat(tmp_path, irq=0, softirq=170)  # the gap is covered once by the next read
    assert (s := reader.sample()) is not None and s.cpu_seconds == 0.7


def test_interrupts_are_kernel_processes_and_the_cgroups_keep_their_time(tmp_path: Path) -> None:
    """Through the monitor's deltas and split: a pod ran 3 s, a root-cgroup process 1 s, the
    kernel spent 1 s in interrupts (outside both: IRQ_TIME_ACCOUNTING): the pod gets 3/5."""
    write_stat(tmp_path, irq=0, softirq=0)
    reader = InterruptTime(tmp_path, ticks_per_second=HZ)
    deltas = ActivityDeltas()

    def tasks(pod_s: float, host_s: float) -> list[TaskSample]:
        irq = reader.sample()
        assert irq is not None
        return [
            TaskSample((10, 1), 10, "worker", f"0::{POD_CGROUP}\n", False, pod_s),
            TaskSample((11, 1), 11, "sshd", "0::/\n", False, host_s),
            irq,
        ]

    deltas.interval(0.0, None, tasks(1.0, 1.0))
    write_stat(tmp_path, irq=20, softirq=80)
    activity = deltas.interval(1.0, None, tasks(4.0, 2.0))
    assert activity.cpu_deltas[IRQ_KEY] == 1.0
    assert activity.owner[IRQ_KEY] == KERNEL
    split = attribute([ZoneEnergy("package", "", 10.0, 0.0, activity.cpu_deltas)], activity.owner)
    joules = {ref: math.fsum(e.values()) for ref, e in split.containers.items()}
    pod = next(ref for ref in joules if ref.pod_uid)
    assert joules == {pod: 6.0, SYSTEM: 2.0, KERNEL: 2.0}
    assert isinstance(pod, ContainerRef)


def test_the_flag_comes_back_from_the_loading_child() -> None:
    """The probes are compiled in a child (ebpf/child.py): its LoadInfo crosses a pipe as JSON."""
    headers = KernelHeaders("running", Path("/usr/src/x"), None, "6.18", "6.18", True, "x86")
    info = LoadInfo(headers, Path("/sys/kernel/tracing"), ("sched:sched_switch",), (), 1.5,
                    task_runtime=True, irq_time_apart=True)  # fmt: skip
    back = _info_from_json(json.loads(json.dumps(_info_to_json(info))))
    assert back == info and back.irq_time_apart
