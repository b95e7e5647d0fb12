"""The container of a GPU process that is not in the interval's task list.

NVML and the DRM backend name the processes on each GPU by PID. Per process (--collector.process)
every visible process is a task and GPU PIDs map to tasks directly; per cgroup (the /proc
source's default, cgrouptree.py) and with eBPF's per-cgroup totals the task list has buckets, not
processes. For the few PIDs a GPU reports and the task list lacks, this reads
/proc/<pid>/stat (its start time: a reused PID is another process) and /proc/<pid>/cgroup, and
classifies the cgroup (exporter.host.cgroupfs.classify), so the GPU's energy and the holders rule
find
the container. Cached by (pid, start time); the cgroup is read again every `recheck_every` calls
(a process moved without exec'ing, as the /proc scanner does). Bounded: at most MAX_PER_CALL PIDs
per call and MAX_CACHED entries kept; files are read with one bounded read each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from pathlib import Path

from exporter.host.cgroupfs.classify import classify_task
from exporter.host.cgroupfs.ns import HOST_ROOT, to_host_file
from exporter.host.hostfile import read_text_bounded
from exporter.model.identity import ContainerRef
from exporter.model.readings import TaskKey

log = logging.getLogger(__name__)

MAX_PER_CALL = 256  # GPU processes resolved per interval (a node has a few dozen at most)
MAX_CACHED = 4096
RECHECK_EVERY = 12
_MAX_BYTES = 8192  # a stat line is well under 1 KiB; a v1 cgroup file a few KiB


class _Entry:
    __slots__ = ("read_at", "ref")

    def __init__(self, ref: ContainerRef, read_at: int) -> None:
        self.ref = ref
        self.read_at = read_at


class PidOwners:
    """resolve(pids) -> {pid: ((pid, start ticks), container)} for the PIDs that exist."""

    def __init__(
        self,
        procfs: Path,
        *,
        parse_stat: Callable[[str], tuple[int, bool]],
        cgroup_namespace_root: str = HOST_ROOT,
        recheck_every: int = RECHECK_EVERY,
    ) -> None:
        self._root = str(procfs)
        self._parse_stat = parse_stat  # stat text -> (start ticks, kernel thread)
        self._ns_root = cgroup_namespace_root
        self._recheck_every = max(1, recheck_every)
        self._cache: dict[TaskKey, _Entry] = {}
        self._calls = 0
        self.cgroup_reads = 0  # tests

    def resolve(self, pids: Collection[int]) -> dict[int, tuple[TaskKey, ContainerRef]]:
        self._calls += 1
        call = self._calls
        out: dict[int, tuple[TaskKey, ContainerRef]] = {}
        used: dict[TaskKey, _Entry] = {}
        for pid in sorted(pids)[:MAX_PER_CALL]:
            if pid <= 0:
                continue
            try:
                start, kernel = self._parse_stat(self._read(pid, "stat"))
            except (OSError, ValueError) as exc:
                log.debug("GPU process %d: %s", pid, exc)
                continue  # exited, or not visible in this PID namespace
            key = (pid, start)
            entry = self._cache.get(key)
            if entry is None or call - entry.read_at >= self._recheck_every:
                try:
                    text = to_host_file(self._read(pid, "cgroup"), self._ns_root)
                except OSError as exc:
                    log.debug("GPU process %d: %s", pid, exc)
                    continue
                self.cgroup_reads += 1
                entry = _Entry(classify_task(text, kernel), call)
            used[key] = entry
            out[pid] = (key, entry.ref)
        self._cache.update(used)
        if len(self._cache) > MAX_CACHED:
            self._cache = used  # only what this call needed
        return out

    def _read(self, pid: int, name: str) -> str:
        return read_text_bounded(f"{self._root}/{pid}/{name}", _MAX_BYTES)
