"""The second stage of an interval: what ran since the last one. CPU seconds and GPU ioctls
per task as deltas against the last reading, the node's CPU busy fraction from /proc/stat, and
the container each task belongs to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.host.cgroupfs.classify import classify_task
from exporter.model.identity import ContainerRef
from exporter.model.readings import CpuTimes, TaskKey, TaskSample


@dataclass(frozen=True)
class Activity:
    """One interval's activity."""

    dt: float  # seconds since the last interval (0 on the first)
    ready: bool  # False on the first interval: everything read was a baseline
    usage: float | None  # the node's CPU busy fraction, None when not known
    tasks: Sequence[TaskSample]
    cpu_deltas: Mapping[TaskKey, float]
    ioctl_deltas: Mapping[TaskKey, Mapping[str, int]]
    owner: Mapping[TaskKey, ContainerRef]


@dataclass
class _Previous:
    """What the last interval ended with; deltas are taken against it."""

    time: float
    cpu: CpuTimes | None = None
    task_cpu: dict[TaskKey, float] = field(default_factory=dict)
    task_ioctls: dict[TaskKey, tuple[tuple[str, int], ...]] = field(default_factory=dict)


class ActivityDeltas:
    """Keeps the last reading of every counter and turns each new reading into deltas."""

    def __init__(self) -> None:
        self._prev: _Previous | None = None

    def interval(
        self, now: float, cpu: CpuTimes | None, tasks: Sequence[TaskSample] | None
    ) -> Activity:
        prev = self._prev
        task_list = list(tasks or ())
        cpu_deltas, ioctl_deltas = _task_deltas(prev, task_list)
        activity = Activity(
            dt=now - prev.time if prev else 0.0,
            ready=prev is not None,
            usage=cpu.busy_fraction_since(prev.cpu) if prev and prev.cpu and cpu else None,
            tasks=task_list,
            cpu_deltas=cpu_deltas,
            ioctl_deltas=ioctl_deltas,
            owner={t.key: classify_task(t.cgroup, t.kernel_thread) for t in task_list},
        )
        # A source that gave nothing this interval keeps its last reading as the baseline, so its
        # next reading's delta covers the gap once (an empty baseline would count every task's
        # whole lifetime again).
        self._prev = _Previous(
            time=now,
            cpu=cpu if cpu is not None or prev is None else prev.cpu,
            task_cpu=(
                {t.key: t.cpu_seconds for t in task_list}
                if tasks is not None or prev is None
                else prev.task_cpu
            ),
            task_ioctls=(
                {t.key: t.gpu_ioctls for t in task_list if t.gpu_ioctls}
                if tasks is not None or prev is None
                else prev.task_ioctls
            ),
        )
        return activity


def _task_deltas(
    prev: _Previous | None, tasks: Sequence[TaskSample]
) -> tuple[dict[TaskKey, float], dict[TaskKey, dict[str, int]]]:
    """CPU seconds and GPU ioctls per task since the last interval.

    On the first interval everything is a baseline. Later, a task not seen before started
    during the interval (its key includes its start time), so all its time is new.
    """
    if prev is None:
        return {}, {}
    cpu: dict[TaskKey, float] = {}
    ioctls: dict[TaskKey, dict[str, int]] = {}
    for t in tasks:
        before = prev.task_cpu.get(t.key, 0.0)
        delta = t.cpu_seconds - before
        if delta > 0:
            cpu[t.key] = delta
        if t.gpu_ioctls:
            old = dict(prev.task_ioctls.get(t.key, ()))
            counts = {d: n - old.get(d, 0) for d, n in t.gpu_ioctls if n > old.get(d, 0)}
            if counts:
                ioctls[t.key] = counts
    return cpu, ioctls
