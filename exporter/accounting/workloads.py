"""Cumulative counters of containers, pods and processes: energy, activity, retirement, expiry.

The monitor hands each interval's attribution here. A workload keeps its series while it is
seen; one not seen for the retention window is dropped, and its final energy moves to the
retired totals one level up (process -> its container, container -> its pod and the node-wide
retired total), so the sums stay exact after workloads end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from exporter.accounting.attribution import UNATTRIBUTED_TASK, EnergyKey, IntervalAttribution
from exporter.accounting.ledger import CounterTable, add_into
from exporter.model.identity import SYSTEM, ContainerRef
from exporter.model.readings import TaskKey, TaskSample
from exporter.model.snapshot import ContainerCounters, Energy, PodCounters, ProcessCounters

ContainerNames = Callable[[ContainerRef], tuple[str, str, str]]  # (namespace, pod, container)
PodNames = Callable[[str], tuple[str, str]]  # pod uid -> (namespace, pod)
ProcessKey = tuple[TaskKey, ContainerRef]


def energy_items(totals: Mapping[EnergyKey, float]) -> tuple[Energy, ...]:
    return tuple(Energy(z, g, m, j) for (z, g, m), j in sorted(totals.items()))


class WorkloadLedger:
    """Owns the workload counters. Driven by the monitor's thread only."""

    def __init__(self, *, with_processes: bool) -> None:
        self._with_processes = with_processes
        self._container_energy = CounterTable[ContainerRef, EnergyKey]()
        # Activity totals of the containers in _container_energy, which alone decides when a
        # container's series end, so all of a container's series live and go together.
        self._container_cpu: dict[ContainerRef, float] = {}
        self._container_ioctls: dict[ContainerRef, dict[str, float]] = {}
        self._pod_energy = CounterTable[str, EnergyKey]()
        # A pod's CPU time, summed as it is counted (not from its containers) so that it never
        # goes back when one of its containers' series end.
        self._pod_cpu: dict[str, float] = {}
        self._process_energy = CounterTable[ProcessKey, EnergyKey]()
        self._process_meta: dict[ProcessKey, tuple[int, str]] = {}
        self.retired_containers: dict[EnergyKey, float] = {}  # all energy of dropped containers
        self._pod_retired: dict[str, dict[EnergyKey, float]] = {}
        self._container_retired: dict[ContainerRef, dict[EnergyKey, float]] = {}

    def add_energy(
        self,
        now: float,
        split: IntervalAttribution,
        task_list: Sequence[TaskSample],
        owner: Mapping[TaskKey, ContainerRef],
    ) -> None:
        for ref, amounts in split.containers.items():
            self._container_energy.add_all(ref, amounts, now)
            if ref.pod_uid:
                self._pod_energy.add_all(ref.pod_uid, amounts, now)
        if not self._with_processes:
            return
        self._drop_reused_pids(task_list)
        comm = {t.key: (t.pid, t.comm) for t in task_list}
        comm[UNATTRIBUTED_TASK] = (0, "unattributed")
        for task, amounts in split.tasks.items():
            key = (task, owner.get(task, SYSTEM))
            self._process_energy.add_all(key, amounts, now)
            self._process_meta[key] = comm.get(task, (task[0], ""))
        for t in task_list:
            key = (t.key, owner[t.key])
            self._process_energy.touch(key, now)
            self._process_meta[key] = (t.pid, t.comm)

    def _drop_reused_pids(self, task_list: Sequence[TaskSample]) -> None:
        """A PID now held by a new process ends the old process's series at once: two series
        with the same pid/comm/container labels must never be exposed together."""
        live = {t.pid: t.key for t in task_list if t.pid}
        stale = [
            key
            for key in list(self._process_meta)
            if key[0][0] in live and live[key[0][0]] != key[0]
        ]
        for key in stale:
            add_into(self._container_retired.setdefault(key[1], {}), self._process_energy.drop(key))
            del self._process_meta[key]

    def add_activity(
        self,
        now: float,
        cpu_deltas: Mapping[TaskKey, float],
        ioctl_deltas: Mapping[TaskKey, Mapping[str, int]],
        owner: Mapping[TaskKey, ContainerRef],
    ) -> None:
        for ref in set(owner.values()):
            self._container_energy.touch(ref, now)
            if ref.pod_uid:
                self._pod_energy.touch(ref.pod_uid, now)
        for task, seconds in cpu_deltas.items():
            ref = owner[task]
            self._container_cpu[ref] = self._container_cpu.get(ref, 0.0) + seconds
            if ref.pod_uid:
                self._pod_cpu[ref.pod_uid] = self._pod_cpu.get(ref.pod_uid, 0.0) + seconds
        for task, counts in ioctl_deltas.items():
            for driver, n in counts.items():
                add_into(self._container_ioctls.setdefault(owner[task], {}), {driver: float(n)})

    def expire(self, now: float, retention_s: float) -> None:
        for (_task, ref), totals in self._process_energy.expire(now, retention_s):
            add_into(self._container_retired.setdefault(ref, {}), totals)
        for key in [k for k in self._process_meta if k not in self._process_energy]:
            del self._process_meta[key]
        for ref, totals in self._container_energy.expire(now, retention_s):
            add_into(self.retired_containers, totals)
            if ref.pod_uid:
                add_into(self._pod_retired.setdefault(ref.pod_uid, {}), totals)
            self._container_retired.pop(ref, None)
            self._container_cpu.pop(ref, None)
            self._container_ioctls.pop(ref, None)
        for pod_uid, _ in self._pod_energy.expire(now, retention_s):
            self._pod_retired.pop(pod_uid, None)
            self._pod_cpu.pop(pod_uid, None)

    # -- snapshot ----------------------------------------------------------------------------

    def containers(self, names: ContainerNames) -> tuple[ContainerCounters, ...]:
        out = []
        for ref, energy in self._container_energy.items():
            namespace, pod, name = names(ref)
            ioctls = self._container_ioctls.get(ref, {})
            out.append(
                ContainerCounters(
                    container_id=ref.container_id,
                    pod_uid=ref.pod_uid,
                    container=name,
                    pod=pod,
                    namespace=namespace,
                    energy=energy_items(energy),
                    cpu_seconds=self._container_cpu.get(ref, 0.0),
                    gpu_ioctls=tuple(sorted((d, int(n)) for d, n in ioctls.items())),
                    retired_processes=energy_items(self._container_retired.get(ref, {})),
                )
            )
        return tuple(out)

    def pods(self, names: PodNames) -> tuple[PodCounters, ...]:
        out = []
        for pod_uid, energy in self._pod_energy.items():
            namespace, pod = names(pod_uid)
            out.append(
                PodCounters(
                    pod_uid=pod_uid,
                    pod=pod,
                    namespace=namespace,
                    energy=energy_items(energy),
                    cpu_seconds=self._pod_cpu.get(pod_uid, 0.0),
                    retired_containers=energy_items(self._pod_retired.get(pod_uid, {})),
                )
            )
        return tuple(out)

    def processes(self, names: ContainerNames) -> tuple[ProcessCounters, ...]:
        out = []
        for (task, ref), energy in self._process_energy.items():
            pid, comm = self._process_meta[(task, ref)]
            out.append(
                ProcessCounters(
                    task=task,
                    pid=pid,
                    comm=comm,
                    container_id=ref.container_id,
                    pod_uid=ref.pod_uid,
                    container=names(ref)[2],
                    energy=energy_items(energy),
                )
            )
        return tuple(out)
