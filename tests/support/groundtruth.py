"""Pod energy against the kernel's own CPU accounting, on real cgroups, with late reads forced.

The power source here is a meter of the kernel's CPU time: it counts one joule per CPU-second
of /proc/stat busy time (KernelCpuMeter), with no idle part. Attribution splits each interval's
joules by the activity deltas, so a container's joules must equal the CPU seconds the kernel
charged its cgroup (cpu.stat usage_usec) over the run, whatever the load and however the
intervals fall: any energy put elsewhere (a late read sending an interval to system_processes, a
mover charged twice) shows as a difference. Ground truth is cpu.stat, never our own model.

Used by tests/system/test_late_reads_real.py and by `python -m tests.support.groundtruth`
(the error table of docs/attribution.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from exporter.accounting.monitor import Monitor
from exporter.app.wiring import Parts, build
from exporter.host.procstat import CLOCK_TICKS
from exporter.model.config import ActivitySource, Config, IdlePower, PodSource
from exporter.model.ports import ActivitySource as ActivityPort
from exporter.model.readings import EnergyReading, TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.activity.procfs.cgrouptree import busy_ns_from
from tests.support.kubecgroups import KubeContainer, kube_container

# A shell forking short shells (the container's time is in processes living milliseconds), and
# a busy Python process; the mover is busy and moved between containers mid-run.
SHORT_LIVED = 'while :; do sh -c "i=0; while [ \\$i -lt 3000 ]; do i=\\$((i+1)); done"; done'
BUSY = "while True: pass"
WORKLOADS = ("steady", "short-lived", "mover")


class KernelCpuMeter:
    """A power source whose energy counter is the node's busy CPU time: 1 J per CPU-second."""

    name = "rapl"

    def read(self) -> Sequence[EnergyReading]:
        with open("/proc/stat") as f:
            busy_ns = busy_ns_from(f.read(), CLOCK_TICKS)
        return [EnergyReading("package", "cpu-time", "rapl", busy_ns // 1000, 2**62)]


class SlowedActivity:
    """An activity source whose every `every`-th read takes `delay_s` longer than it would
    (as a /proc walk stuck behind a busy CPU does): that read misses its deadline."""

    def __init__(self, inner: ActivityPort, every: int, delay_s: float) -> None:
        self._inner = inner
        self.name: str = inner.name
        self._every = every
        self._delay_s = delay_s
        self._calls = 0
        self.slowed = 0

    def stop(self) -> None:
        """No more slowed reads."""
        self._every = 0

    def tasks(self) -> Sequence[TaskSample]:
        self._calls += 1
        result = self._inner.tasks()
        if self._every and self._calls % self._every == 0:
            self.slowed += 1
            time.sleep(self._delay_s)
        return result


@dataclass
class Run:
    """Per container: joules attributed and the kernel's CPU seconds, over the same run."""

    joules: dict[str, float]
    cpu_s: dict[str, float]
    late: int
    unattributed_j: float
    pending_j: float
    snapshot: Snapshot
    errors: dict[str, float] = field(default_factory=dict)  # relative, per container


def usage_s(c: KubeContainer) -> float:
    for line in (c.path / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise AssertionError(f"no usage_usec in {c.path}/cpu.stat")


def start(c: KubeContainer, argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, preexec_fn=c.join)  # noqa: PLW1509


def _package_active(snap: Snapshot, cid: str) -> float:
    return sum(
        e.joules
        for c in snap.containers
        if c.container_id == cid
        for e in c.energy
        if e.zone == "package" and e.mode == "active"
    )


def parts_for(mode: str, timeout_s: float, interval_s: float) -> Parts:
    activity = ActivitySource.EBPF if mode == "ebpf" else ActivitySource.PROCFS
    collectors = frozenset({"process"}) if mode.endswith("process") else frozenset()
    config = Config(
        activity_source=activity,
        pod_source=PodSource.NONE,
        collectors=collectors,
        power_idle=IdlePower(default_w=0.0),  # all of it active: joules == CPU seconds
        source_timeout_s=timeout_s,
        interval_s=interval_s,
    )
    return build(config)


def slowed_monitor(parts: Parts, every: int, delay_s: float) -> tuple[Monitor, SlowedActivity]:
    """The built monitor's own sources and settings, with its activity source slowed on some
    reads and the kernel's CPU time as its only power source."""
    built = parts.monitor
    slowed = SlowedActivity(built._parts.activity, every, delay_s)
    own = replace(built._parts, activity=slowed, power=[KernelCpuMeter()], gpus=())
    return Monitor(own, built.settings), slowed


def run(
    mode: str,
    workload: str,
    *,
    late_every: int,
    seconds: float = 6.0,
    interval_s: float = 0.5,
    timeout_s: float = 1.0,
    load: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
) -> Run:
    """One run: two containers in two pods, `workload` in the first, a busy neighbour in the
    second; every `late_every`-th activity read (0: none) comes after its deadline."""
    with kube_container() as a, kube_container() as b, (load or contextlib.nullcontext)():
        parts = parts_for(mode, timeout_s, interval_s)
        monitor, slowed = slowed_monitor(parts, late_every, timeout_s * 1.5)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            monitor.step()
            start_a = usage_s(a), usage_s(b)
            argv = ["sh", "-c", SHORT_LIVED] if workload == "short-lived" else None
            procs.append(start(a, argv or [sys.executable, "-c", BUSY]))
            procs.append(start(b, [sys.executable, "-c", BUSY]))
            deadline = time.monotonic() + seconds
            moved = False
            while time.monotonic() < deadline:
                time.sleep(interval_s)
                if workload == "mover" and not moved and time.monotonic() > deadline - seconds / 2:
                    b.add(procs[0].pid)  # echo PID > cgroup.procs: no exec, no new process
                    moved = True
                monitor.step()
            for c in (a, b):
                _stop_all(c)
            for p in procs:
                p.wait(timeout=10)
            # the cgroups are empty and still there: the next reads take in the last work,
            # once one comes in time and nothing is held (bounded: a read may miss on a busy node)
            slowed.stop()
            snap = monitor.step()
            for _ in range(20):
                time.sleep(interval_s)
                snap = monitor.step()
                if _activity_on_time(snap, slowed.name) and not snap.pending:
                    break
            truth = {
                a.container_id: usage_s(a) - start_a[0],
                b.container_id: usage_s(b) - start_a[1],
            }
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
            monitor.close()
            parts.close()
    joules = {cid: _package_active(snap, cid) for cid in truth}
    out = Run(
        joules=joules,
        cpu_s=truth,
        late=slowed.slowed,
        unattributed_j=sum(u.joules for u in snap.unattributed),
        pending_j=sum(e.joules for e in snap.pending),
        snapshot=snap,
    )
    out.errors = {cid: joules[cid] / truth[cid] - 1 for cid in truth if truth[cid] > 0}
    return out


def _activity_on_time(snap: Snapshot, name: str) -> bool:
    return any(s.source == name and s.up for s in snap.sources)


def _stop_all(c: KubeContainer) -> None:
    deadline = time.monotonic() + 10
    while pids := c.pids():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise AssertionError(f"{c.path} did not empty")
        time.sleep(0.05)


@contextlib.contextmanager
def cpu_load(workers: int = 2) -> Iterator[object]:
    """Busy processes outside the pods (host work in the root cgroup): a loaded node."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(workers)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def table(modes: Sequence[str], repeats: int, seconds: float) -> str:
    """The error table of docs/attribution.md: per workload x mode, median of `repeats` runs of
    the worst container's relative error (joules vs cpu.stat), without and with late reads."""
    rows = ["| workload | mode | no late read | late reads (every 3rd read) |", "|---|---|---|---|"]
    for workload in WORKLOADS:
        for mode in modes:
            cells = []
            for late in (0, 3):
                worst = []
                lates = []
                for _ in range(repeats):
                    r = run(mode, workload, late_every=late, seconds=seconds, load=cpu_load)
                    worst.append(max(r.errors.values(), key=abs))
                    lates.append(r.late)
                cells.append(f"{statistics.median(worst):+.1%} ({statistics.median(lates):g} late)")
            rows.append(f"| {workload} | {mode} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="procfs,procfs-process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    print(table(args.modes.split(","), args.repeats, args.seconds))


if __name__ == "__main__":
    main()
