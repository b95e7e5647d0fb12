"""A small node whose /proc and cgroup v2 trees the test writes as the kernel keeps them: every
tick a process runs is added to its /proc stat, to its cgroup's cpu.stat and every ancestor's
(the kernel's hierarchical usage_usec, which keeps the time of exited processes and of removed
child cgroups), and to /proc/stat's busy time. The truth per container bucket is what the
model charged there, so a reader is checked against the kernel's bookkeeping, not its own.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.procstat import CLOCK_TICKS
from exporter.model.identity import KERNEL, ContainerRef
from tests.support.fixturehost import stat_line, write_atomic

KTHREAD = 0x208040
USER = 0x400100


def cpu_stat(ticks: int) -> str:
    us = ticks * 1_000_000 // CLOCK_TICKS
    return f"usage_usec {us}\nuser_usec {us}\nsystem_usec 0\nnice_usec 0\n"


@dataclass
class Proc:
    pid: int
    cgroup: str  # "" for the root (kernel threads)
    start: int
    ticks: int = 0
    kernel: bool = False


class CgroupNode:
    """proc/ and cgroup/ under one directory: cgroup/ is the cgroup2 root, or with hybrid
    cgroup/unified is (and the test may add v1 hierarchies beside it)."""

    def __init__(self, root: Path, *, hybrid: bool = False) -> None:
        self.root = root
        self.procfs = root / "proc"
        self.cgroupfs = root / "cgroup"  # what --path.cgroupfs names
        self.v2 = self.cgroupfs / "unified" if hybrid else self.cgroupfs
        self.procfs.mkdir(parents=True)
        self.v2.mkdir(parents=True)
        (self.v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
        # the root's own total is the machine's: a reader must never use it
        (self.v2 / "cpu.stat").write_text("usage_usec garbage\n")
        self.usage: dict[str, int] = {}  # cgroup path -> hierarchical ticks
        self.charged: set[str] = set()  # cgroups that ran something since the last write
        self.made: set[str] = set()  # cgroups made since the last write
        self.procs: dict[int, Proc] = {}
        self.truth: dict[ContainerRef, int] = {}  # ticks charged per bucket
        self.busy = 0
        self.next_pid = 100
        self.uptime = 1000
        self._pods = 0
        self.write()

    # -- layout ----------------------------------------------------------------------------

    def mkdir(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in self.usage:
                (self.v2 / sub.lstrip("/")).mkdir()
                self.usage[sub] = 0
                self.made.add(sub)

    def rmdir(self, path: str) -> None:
        """Remove an empty leaf cgroup; its time stays in its ancestors' totals."""
        assert not any(p.cgroup == path for p in self.procs.values())
        shutil.rmtree(self.v2 / path.lstrip("/"))  # the kernel's rmdir takes the files
        del self.usage[path]

    def new_pod(self) -> str:
        self._pods += 1
        uid = str(uuid.UUID(int=self._pods)).replace("-", "_")
        pod = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"
        self.mkdir(pod)
        return pod

    def new_container(self, pod: str) -> str:
        cid = uuid.uuid4().hex * 2
        path = f"{pod}/cri-containerd-{cid}.scope"
        self.mkdir(path)
        return path

    def containers(self) -> list[str]:
        return [p for p in self.usage if "/cri-containerd-" in p]

    def removable(self) -> list[str]:
        """Containers with no process that nothing ran in since the last write: removing one
        now loses nothing a reader could have seen."""
        busy = {p.cgroup for p in self.procs.values()} | self.charged
        return [c for c in self.containers() if c not in busy and c not in self.made]

    # -- processes ---------------------------------------------------------------------------

    def start(self, cgroup: str, *, kernel: bool = False) -> Proc:
        p = Proc(self.next_pid, cgroup, self.uptime, kernel=kernel)
        self.next_pid += 1
        self.procs[p.pid] = p
        d = self.procfs / str(p.pid)
        d.mkdir()
        (d / "cgroup").write_text(f"0::{cgroup or '/'}\n")
        return p

    def run(self, p: Proc, ticks: int) -> None:
        p.ticks += ticks
        self.busy += ticks
        ref = KERNEL if p.kernel else classify_cgroup(p.cgroup or "/")
        self.truth[ref] = self.truth.get(ref, 0) + ticks
        path = p.cgroup
        self.charged.add(path)
        while path and path != "/":
            self.usage[path] += ticks
            path = path.rsplit("/", 1)[0]

    def exit(self, p: Proc) -> None:
        del self.procs[p.pid]
        shutil.rmtree(self.procfs / str(p.pid))

    def short_lived(self, cgroup: str, ticks: int) -> None:
        """A process that starts, runs and exits between two reads: in no /proc file."""
        p = Proc(-1, cgroup, self.uptime)
        self.run(p, ticks)

    def move(self, p: Proc, cgroup: str) -> None:
        p.cgroup = cgroup
        write_atomic(self.procfs / str(p.pid) / "cgroup", f"0::{cgroup}\n")

    # -- the files ---------------------------------------------------------------------------

    def write(self) -> None:
        self.uptime += 500
        self.charged = set()
        self.made = set()
        for p in self.procs.values():
            flags = KTHREAD if p.kernel else USER
            text = stat_line(p.pid, f"p{p.pid}", p.ticks, 0, start=p.start, flags=flags)
            write_atomic(self.procfs / str(p.pid) / "stat", text)
        for path, ticks in self.usage.items():
            write_atomic(self.v2 / path.lstrip("/") / "cpu.stat", cpu_stat(ticks))
        write_atomic(
            self.procfs / "stat",
            f"cpu  {self.busy} 0 0 {10**7} 0 0 0 0 0 0\ncpu0 {self.busy} 0 0 {10**7} 0 0 0 0 0 0\n",
        )

    def truth_s(self) -> dict[ContainerRef, float]:
        return {ref: t / CLOCK_TICKS for ref, t in self.truth.items() if t}
