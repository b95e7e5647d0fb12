"""Activity from /proc and cgroupfs: per container from the cgroup tree by default (cgrouptree.py),
per process with --collector.process (scan.py, exited.py); node busy/idle from /proc/stat."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from exporter.host.cgroupfs.classify import classify_task
from exporter.host.cgroupfs.ns import HOST_ROOT, namespace_root
from exporter.host.files import short_error as _short
from exporter.host.hostfile import read_text_bounded
from exporter.host.procstat import (
    CLOCK_TICKS,
    MAX_PROC_STAT_BYTES,
    PF_KTHREAD,
    parse_stat,
    read_cpu_times,
    start_and_kthread,
)
from exporter.model.config import Config
from exporter.model.readings import CpuTimes, SourceError, TaskSample
from exporter.model.spec import (
    ACTIVITY,
    MOUNT_PROCFS,
    BuildContext,
    CheckResult,
    Finding,
    SourceSpec,
)
from exporter.sources.activity.procfs.cgroupcpu import CgroupCpuFiles
from exporter.sources.activity.procfs.cgrouptree import CgroupTree, busy_ns_from
from exporter.sources.activity.procfs.exited import ExitedCpu
from exporter.sources.activity.procfs.hostwork import KernelWork
from exporter.sources.activity.procfs.pidowner import PidOwners
from exporter.sources.activity.procfs.scan import RECHECK_EVERY, ProcScanner

log = logging.getLogger(__name__)


def gpu_pid_owners(procfs: Path, cgroup_namespace_root: str = HOST_ROOT) -> PidOwners:
    """The resolver of GPU processes missing from the task list (pidowner.py)."""
    return PidOwners(
        procfs, parse_stat=start_and_kthread, cgroup_namespace_root=cgroup_namespace_root
    )


class ProcfsSource:
    """Per process (per_process, --collector.process): reads every process's CPU time through a
    configurable /proc root and, given the cgroup root, completes each container's CPU time from
    its cgroup's total (exited.py). Otherwise, where the cgroup root has CPU totals, reads them
    per cgroup and no process at all (cgrouptree.py); without them, per process."""

    name = "procfs"

    def __init__(
        self,
        procfs: Path,
        cgroup_namespace_root: str = HOST_ROOT,
        recheck_every: int = RECHECK_EVERY,
        cgroupfs: Path | None = None,
        *,
        per_process: bool = True,
    ) -> None:
        self.procfs = procfs
        self._root = str(procfs)
        self._tree: CgroupTree | None = None
        if not per_process and cgroupfs is not None:
            kernel = KernelWork(self._root, parse_stat, PF_KTHREAD, CLOCK_TICKS)
            self._tree = CgroupTree.at(cgroupfs, self._busy_ns, kernel.total_ns)
        self._scanner = ProcScanner(
            self._root,
            parse_stat=parse_stat,
            kthread_flag=PF_KTHREAD,
            ticks_per_second=CLOCK_TICKS,
            recheck_every=recheck_every,
            cgroup_namespace_root=cgroup_namespace_root,
        )
        self._exited: ExitedCpu | None = None
        if cgroupfs is not None:
            files = CgroupCpuFiles(cgroupfs, cgroup_namespace_root)
            if files.available:
                self._exited = ExitedCpu(files)
            else:
                # debug: built whatever the activity source; `wattprobe check` is where to look
                log.debug(
                    "no cgroup CPU totals under %s: /proc activity counts live processes only",
                    cgroupfs,
                )

    def close(self) -> None:
        """Close the cgroup files the tree keeps open between reads (per cgroup)."""
        if self._tree is not None:
            self._tree.close()

    def cpu_times(self) -> CpuTimes:
        return read_cpu_times(self._root)

    @property
    def per_cgroup(self) -> bool:
        """Whether tasks() reads the cgroup tree rather than every process."""
        return self._tree is not None

    def _busy_ns(self) -> int:
        return busy_ns_from(
            read_text_bounded(f"{self._root}/stat", MAX_PROC_STAT_BYTES), CLOCK_TICKS
        )

    def tasks(self, *, walk: bool = True) -> list[TaskSample]:
        """Per cgroup (per_cgroup): one sample per container bucket and one for the rest
        (exporter/sources/activity/procfs/cgrouptree.py). Otherwise one sample per live process,
        and one
        "[exited]" pseudo task per container whose cgroup total grew beyond what its live
        processes show. Processes that exit while being read are skipped.

        Incremental (exporter/sources/activity/procfs/scan.py): unchanged processes are not parsed
        again and
        cgroup files are read for new and exec'd processes, and rechecked every few intervals.
        The cgroup totals cost one read per cgroup that holds a live process.

        walk=False (per cgroup): no cgroup was made since the last read, so the tree is not
        listed again (CgroupTree.update).
        """
        if self._tree is not None:
            try:
                return self._tree.update(walk=walk)
            except (OSError, ValueError) as exc:
                where = getattr(exc, "filename", None) or f"{self._root}/stat"
                raise SourceError("read error", f"{where}: {_short(exc)}") from exc
        samples = self._scanner.scan()
        if self._exited is None:
            return samples
        # a cgroup that lost a process has the scanner re-read its processes' cgroups (movers)
        live, exited = self._exited.update_checked(samples, self._scanner.recheck)
        return [*live, *exited]


# -- wattprobe check -------------------------------------------------------------------------

FIXES = {"read error": MOUNT_PROCFS}
# The kernel's initial PID namespace has a fixed inode (PROC_PID_INIT_INO): PID 1 of a /proc
# whose /proc/1/ns/pid names another one lives in a container's PID namespace. The name of
# PID 1 says nothing (a VM's init may be called anything).
HOST_PID_NS = "pid:[4026531836]"


def container_pid_namespace(procfs: Path) -> str | None:
    """PID 1's namespace when it is not the host's; None on the host's /proc or when unknown
    (no such link in a fixture tree, or no permission to read it: no guess then)."""
    try:
        ns = os.readlink(procfs / "1" / "ns" / "pid")
    except OSError:
        return None
    return None if ns == HOST_PID_NS else ns


def probe(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    procfs = ProcfsSource(config.procfs, namespace_root(config.cgroup_root))
    try:
        cpu = procfs.cpu_times()
        tasks = procfs.tasks()
    except SourceError as exc:
        return Finding.failed(exc, FIXES["read error"])
    refs = [classify_task(t.cgroup, t.kernel_thread) for t in tasks]
    in_containers = sum(1 for r in refs if r.container_id)
    pods = Counter(r.pod_uid for r in refs if r.pod_uid)
    found = (
        f"{cpu.ncpu} CPUs, {len(tasks)} processes, {in_containers} in containers ({len(pods)} pods)"
    )
    ns = container_pid_namespace(config.procfs)
    if ns is not None:
        init = next((t.comm for t in tasks if t.pid == 1), "?")
        found += (
            f"; PID 1 ({init!r}) is in {ns}, not the host's PID namespace: this is a "
            "container's own /proc; for the host's processes use hostPID and --path.procfs"
        )
    items = [f"pod {uid}: {_plural(n, 'process', 'processes')}" for uid, n in sorted(pods.items())]
    return Finding.works(found, items)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# No flag: /proc/stat always comes from here, and --activity.source picks the task source.
SPEC = SourceSpec(name=ProcfsSource.name, kind=ACTIVITY, probe=probe, fixes=FIXES)
