"""Per-container CPU time from the cgroup tree: the /proc source's default, whose cost grows with
cgroups, not with processes.

By default wattprobe exports nothing per process, so reading every /proc/<pid>/stat each interval
(5,000 files at 5,000 processes) buys nothing the kernel does not already sum per cgroup. Per
interval this module instead
- walks the cgroup tree (directories only) and classifies every cgroup path
  (exporter.host.cgroupfs.classify); a cgroup is *tracked* when it is a child of the root or
  classifies
  as another bucket than its parent (a pod below kubepods.slice, a container below its pod, a
  Docker container below system.slice), so nested cgroups of one container are not read;
- reads each tracked cgroup's CPU total (cgroup v2 cpu.stat usage_usec, v1 cpuacct.usage;
  exporter/sources/activity/procfs/cgroupcpu.py), children before parents;
- gives each tracked cgroup its growth less the growth of the tracked cgroups right below it (a
  pod keeps what its containers did not run: processes directly in the pod cgroup, and the last
  work of a container whose cgroup was removed, which the kernel leaves in the parent's total);
- gives the node's busy time (/proc/stat user+nice+system+irq+softirq; steal is another guest's)
  less the growth of every cgroup below the root to the kernel_processes pseudo-container: kernel
  threads, interrupts, and processes left in the root cgroup (rare under systemd).
The root cgroup's own total is never read (it is the machine's).

Cost per interval: on the kernel's cgroupfs each tracked cgroup's total is read through a
descriptor kept open (exporter/host/keptfiles.py: one pread), and the eBPF source, which sees
every cgroup_mkdir, lets an interval skip the walk when none was made (update(walk=False)).

Every bucket (ContainerRef) becomes one TaskSample, key (CGROUP_PID, n), pid 0, comm "[cgroup]",
cgroup a path that classifies as the bucket, its CPU seconds since first seen; the rest is one
TaskSample, key (REST_PID, 0), a kernel thread. Counters never go back: each tracked cgroup and
the rest go through exited.settle (what a read skew over-gave is a debt, paid before more is
reported). A bucket is reported every interval while one of its cgroups exists (so a GPU holder
that idles stays live) and LINGER_SCANS more after its last one went, then forgotten: a bucket
seen again later gets a new key. A cgroup first seen after the first walk counts its whole total
when the node's CPUs could have run that much since the last walk (it was made since), else it
is a baseline; at the first walk every cgroup is a baseline.

Which hierarchy: cgroup v2 where it is mounted (the kernel charges every task's time to its v2
cgroup even when the cpu controller is bound to v1), else the v1 cpuacct hierarchy. On a hybrid
host (both) the v1 cpuacct tree is also walked for containers v2 does not show (a runtime with the
cgroupfs driver places containers in the v1 hierarchies only): their time is taken from the rest,
which is where v2 sees it when their tasks sit in the v2 root; if they sit in a host service's v2
cgroup it is counted there too (a limit; the per-process path, --collector.process, has none).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exporter.host.cgroupfs.classify import parse_cgroup_path
from exporter.host.cgroupfs.ids import find_v2_root
from exporter.host.files import short_error
from exporter.host.hostfile import read_bounded
from exporter.host.keptfiles import KeptFiles
from exporter.model.identity import SYSTEM, ContainerRef
from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.procfs.cgroupcpu import (
    V1,
    V2,
    parse_cpu_stat,
    parse_cpuacct_usage,
    v1_dir,
)
from exporter.sources.activity.procfs.exited import settle

log = logging.getLogger(__name__)

CGROUP_PID = -2  # key (CGROUP_PID, n): one bucket's CPU time from the cgroup tree
REST_PID = -3  # key (REST_PID, 0): the node's busy time outside every cgroup below the root
CGROUP_COMM = "[cgroup]"
REST_COMM = "[kernel]"
REST_KEY: TaskKey = (REST_PID, 0)
HOST_COMM = "[host]"
HOST_KEY: TaskKey = (REST_PID, 1)  # the rest's userland part (system_processes), see hostwork.py
LINGER_SCANS = 12  # a bucket without a cgroup is reported this many more intervals
MAX_DEPTH = 32  # kubepods trees are 4-6 deep (kind nodes a few more)
MAX_DIRS = 100_000  # a walk stops here rather than take unbounded time
FULL_WALK_EVERY = 12  # updates without a walk at most (one minute at the default interval)
MAX_CPU_FILE_BYTES = 4096  # cpu.stat is ~200 bytes (with PSI-less kernels), cpuacct.usage ~20
SKEW_SLACK_NS = 1_000_000
_REBASE = -1  # a counter's usage_ns after a failed read: the next read is its baseline

# /proc/stat busy without steal, in ticks: user, nice, system, (idle, iowait), irq, softirq
_BUSY_FIELDS = (0, 1, 2, 5, 6)


@dataclass(frozen=True, slots=True)
class _Node:
    path: str  # relative to the hierarchy's root, "/kubepods.slice/..."
    ref: ContainerRef
    parent: int  # index of the nearest tracked ancestor in the walk's list, -1 for none


class Hierarchy:
    """One cgroup mount: where it is, which file holds a cgroup's CPU total, how to parse it."""

    def __init__(self, kind: str, root: str) -> None:
        self.kind = kind
        self.root = root
        v2 = kind == V2
        self._file = "cpu.stat" if v2 else "cpuacct.usage"
        self._parse = parse_cpu_stat if v2 else parse_cpuacct_usage
        self._refs: dict[str, ContainerRef] = {}
        self.dirs = 0  # directories listed by the last walk (benchmarks, tests)
        # every tracked cgroup's total is read every interval: through kept descriptors on a
        # real cgroupfs (host/keptfiles.py)
        self._files = KeptFiles(root)
        self._kept_for: list[_Node] | None = None  # the walk whose files are kept

    def walk(self, top_bucket: ContainerRef | None) -> list[_Node]:
        """The tracked cgroups, parents before children. top_bucket: what the root counts as
        (None: every child of the root is tracked; SYSTEM: only cgroups outside the host's)."""
        out: list[_Node] = []
        refs: dict[str, ContainerRef] = {}
        known = self._refs
        stack: list[tuple[str, ContainerRef | None, int, int]] = [("", top_bucket, -1, 0)]
        dirs = 0
        while stack and dirs < MAX_DIRS:
            rel, bucket, parent, depth = stack.pop()
            dirs += 1
            try:
                entries = os.scandir(self.root + rel if rel else self.root)
            except OSError:
                if not rel:
                    raise  # no tree at all: the source's reading failed
                continue  # removed since its parent was listed
            with entries:
                for entry in entries:
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                        # cgroupfs (kernfs) counts a directory's links as 2 + its
                        # subdirectories: a leaf (most containers) need not be listed, and
                        # listing one costs its ~50 interface files
                        leaf = entry.stat(follow_symlinks=False).st_nlink == 2
                    except OSError:
                        continue
                    path = f"{rel}/{entry.name}"
                    ref = known.get(path)
                    if ref is None:
                        ref = parse_cgroup_path(path) or SYSTEM
                    refs[path] = ref
                    index = parent
                    if ref != bucket:
                        index = len(out)
                        out.append(_Node(path, ref, parent))
                    if not leaf and depth < MAX_DEPTH:
                        stack.append((path, ref, index, depth + 1))
        self._refs = refs  # paths that are gone are forgotten
        self.dirs = dirs
        return out

    def usage_ns(self, path: str) -> int:
        data = self._files.read(f"{self.root}{path}/{self._file}", MAX_CPU_FILE_BYTES)
        return self._parse(data.decode("ascii", "replace"))

    def close(self) -> None:
        """Close the kept files (the source is done)."""
        self._files.close()

    def keep_only(self, nodes: list[_Node]) -> None:
        """Close the kept files of cgroups this walk no longer reads (nothing to do when the
        walk is the one already kept: an interval that did not list the tree)."""
        if nodes is self._kept_for:
            return
        self._kept_for = nodes
        self._files.keep_only({f"{self.root}{n.path}/{self._file}" for n in nodes})


def hierarchies(cgroup_root: Path) -> tuple[Hierarchy | None, Hierarchy | None]:
    """(primary, secondary): v2 and, on a hybrid host, v1 cpuacct; or v1 alone; or none."""
    v2 = find_v2_root(cgroup_root)
    v1 = v1_dir(cgroup_root)
    if v2 is not None:
        return Hierarchy(V2, str(v2)), Hierarchy(V1, v1) if v1 is not None else None
    if v1 is not None:
        return Hierarchy(V1, v1), None
    return None, None


class _Bucket:
    __slots__ = ("key", "last_live", "path", "sample", "total")

    def __init__(self, key: TaskKey, path: str, scan: int) -> None:
        self.key = key
        self.path = path
        self.total = 0.0  # seconds since first seen; only rises
        self.last_live = scan
        self.sample: TaskSample | None = None


class _Counter:
    """One tracked cgroup (or the rest): its last total and its settle state."""

    __slots__ = ("level", "raw", "usage_ns")

    def __init__(self, usage_ns: int) -> None:
        self.usage_ns = usage_ns
        self.raw = self.level = 0.0


class CgroupTree:
    """Per walk: one TaskSample per live container bucket and one for the rest (see module)."""

    def __init__(
        self,
        primary: Hierarchy,
        secondary: Hierarchy | None,
        busy_ns: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        ncpu: int | None = None,
        kernel_ns: Callable[[str], int] | None = None,
    ) -> None:
        self._primary = primary
        self._secondary = secondary
        self._busy_ns = busy_ns
        self._clock = clock
        self._ncpu = ncpu or os.cpu_count() or 1
        self._counters: dict[tuple[str, str], _Counter] = {}
        self._rest: _Counter | None = None
        self._rest_total = 0.0
        self._rest_sample: TaskSample | None = None
        # The rest split into kernel work and host userland (hostwork.py); None: all kernel.
        self._kernel_ns = kernel_ns
        self._kernel_last: int | None = None
        self._kernel_owed = 0.0
        self._skew_ns = SKEW_SLACK_NS  # the last walk's bound on read skew (update())
        self._host_total = 0.0
        self._host_sample: TaskSample | None = None
        self._children: dict[tuple[str, str], frozenset[str]] = {}  # tracked children per cgroup
        self._buckets: dict[ContainerRef, _Bucket] = {}
        self._next_seq = 1
        self._scans = 0
        self._nodes: list[_Node] | None = None  # the primary hierarchy's last walk
        self._gone = False  # a cgroup of that walk could not be read: walk again
        self.walks = 0  # walks of the primary hierarchy (benchmarks, tests)
        self._last_time: float | None = None
        self.reads = 0  # cgroup files read (benchmarks, tests)

    @classmethod
    def at(
        cls,
        cgroup_root: Path,
        busy_ns: Callable[[], int],
        kernel_ns: Callable[[str], int] | None = None,
    ) -> CgroupTree | None:
        primary, secondary = hierarchies(cgroup_root)
        if primary is None:
            return None
        return cls(primary, secondary, busy_ns, kernel_ns=kernel_ns)

    def close(self) -> None:
        """Close the cgroup files kept open between reads."""
        self._primary.close()
        if self._secondary is not None:
            self._secondary.close()

    def update(self, *, walk: bool = True) -> list[TaskSample]:
        """Raises OSError or ValueError when /proc/stat or the cgroup root cannot be read
        (nothing changes then). walk=False: the caller knows no cgroup was made since the last
        walk (the eBPF source's cgroup_mkdir probe), so the last walk's cgroups are read again
        without listing the tree; a cgroup that went, or every FULL_WALK_EVERY-th update,
        walks anyway."""
        busy = self._busy_ns()
        kernel = self._kernel_work()
        now = self._clock()
        self._scans += 1
        elapsed = None if self._last_time is None else now - self._last_time
        self._last_time = now
        limit_ns = None if elapsed is None else (max(elapsed, 0.0) * self._ncpu + 1.0) * 1e9
        seen: dict[tuple[str, str], _Counter] = {}
        if walk or self._nodes is None or self._gone or self._scans % FULL_WALK_EVERY == 0:
            self._nodes = self._primary.walk(None)
            self.walks += 1
        nodes, self._gone = self._nodes, False
        read_from = time.monotonic()
        deltas = self._read(self._primary, nodes, limit_ns, seen)
        # what read skew can put in a pod's own growth: its containers were read at most this
        # long before it, on every CPU (plus a millisecond for the counters' own granularity)
        self._skew_ns = int((time.monotonic() - read_from) * self._ncpu * 1e9) + SKEW_SLACK_NS
        below_root = self._account(self._primary, nodes, deltas, [True] * len(nodes), seen)
        if self._secondary is not None:
            below_root += self._secondary_part(limit_ns, seen)
        self._counters = seen  # cgroups that are gone are forgotten
        self._children = {k: v for k, v in self._children.items() if k in seen}
        self._account_rest(busy, below_root, kernel)
        return self._report()

    # -- the walk's cgroups ------------------------------------------------------------------

    def _read(
        self,
        hierarchy: Hierarchy,
        nodes: list[_Node],
        limit_ns: float | None,
        seen: dict[tuple[str, str], _Counter],
    ) -> list[int | None]:
        """Each node's growth since the last walk (None: unknown, a baseline or unreadable),
        read children first so that a parent's later read covers its children's."""
        deltas: list[int | None] = [None] * len(nodes)
        kind = hierarchy.kind
        counters = self._counters
        for i in range(len(nodes) - 1, -1, -1):
            path = nodes[i].path
            try:
                ns = hierarchy.usage_ns(path)
            except (OSError, ValueError) as exc:
                log.debug("cgroup CPU time of %s %s: %s", kind, path, short_error(exc))
                self._gone = True  # removed (ENODEV, ENOENT) or unreadable: the next update walks
                # its parent takes this interval's growth and the next's (so it is counted
                # once); a cgroup still there is a baseline at its next read, never new
                kept = counters.get((kind, path))
                if kept is not None:
                    kept.usage_ns = _REBASE
                    seen[(kind, path)] = kept
                continue
            self.reads += 1
            where = (kind, path)
            c = counters.get(where)
            if c is None:
                c = _Counter(ns)
                if self._scans > 1 and limit_ns is not None and ns <= limit_ns:
                    deltas[i] = ns  # made since the last walk
            elif c.usage_ns == _REBASE:
                c.usage_ns = ns  # after a failed read: the parent had the growth
            else:
                before, c.usage_ns = c.usage_ns, ns
                if ns >= before:
                    deltas[i] = ns - before
                elif limit_ns is not None and ns <= limit_ns:
                    deltas[i] = ns  # made again under the same path
            seen[where] = c
        hierarchy.keep_only(nodes)
        return deltas

    def _account(
        self,
        hierarchy: Hierarchy,
        nodes: list[_Node],
        deltas: list[int | None],
        keep: list[bool],
        seen: dict[tuple[str, str], _Counter],
    ) -> int:
        """Credit each kept node's own growth to its bucket; return the growth of the kept
        nodes with no tracked ancestor (what the rest is not)."""
        own = [d or 0 for d in deltas]
        top = 0
        children: dict[int, set[str]] = {}
        unsure: set[int] = set()
        for i, node in enumerate(nodes):
            if keep[i] and node.parent >= 0:
                children.setdefault(node.parent, set()).add(node.path)
            d = deltas[i]
            if d is None and keep[i] and node.parent >= 0:
                unsure.add(node.parent)  # its growth is the parent's this interval
            if d is None or not keep[i]:
                continue
            if node.parent >= 0:
                own[node.parent] -= d
            else:
                top += d
        self._quiet_pods(hierarchy, nodes, [k and i not in unsure for i, k in enumerate(keep)],
                         children, own)  # fmt: skip
        scan = self._scans
        kind = hierarchy.kind
        for i, node in enumerate(nodes):
            if not keep[i]:
                continue
            bucket = self._bucket(node.ref, node.path)
            bucket.last_live = scan
            c = seen.get((kind, node.path))
            if c is None or deltas[i] is None:
                continue  # its growth is unknown: a baseline, nothing to credit or owe
            level = c.level
            c.raw, c.level = settle(c.raw, level, own[i] / 1e9, 0.0)
            if c.level > level:
                bucket.total += c.level - level
        return top

    def _quiet_pods(
        self,
        hierarchy: Hierarchy,
        nodes: list[_Node],
        check: list[bool],
        children: dict[int, set[str]],
        own: list[int],
    ) -> None:
        """A pod cgroup's own growth is what ran in it outside its containers: processes placed
        in it, or the last work of a container whose cgroup was removed (the kernel folds that
        into the parent: one made and removed between two walks too), or a container's growth
        this walk could not read or take as new. With none of them, what is left is read skew
        (its containers were read a moment before it; their next reads have that time), so it
        gets nothing, as long as it is no more than skew can be. check: the pods to look at."""
        kind = hierarchy.kind
        for i, node in enumerate(nodes):
            if not node.ref.pod_uid or node.ref.container_id:
                continue
            now = frozenset(children.get(i, ()))
            before = self._children.get((kind, node.path))
            self._children[(kind, node.path)] = now
            if not check[i] or own[i] == 0 or before is None or before - now:
                continue  # nothing to check, first seen, or a container went
            if own[i] > self._skew_ns:
                continue  # more than read skew: a container that came and went meanwhile
            try:
                # the first bytes tell empty from not; bounded and non-blocking (hostfile.py)
                has_procs = bool(
                    read_bounded(f"{hierarchy.root}{node.path}/cgroup.procs", 64).strip()
                )
            except OSError:
                continue
            if not has_procs:
                own[i] = 0

    def _kernel_work(self) -> int | None:
        if self._kernel_ns is None:
            return None
        try:
            return self._kernel_ns(self._primary.root)
        except (OSError, ValueError) as exc:
            log.debug("kernel CPU time: %s", short_error(exc))
            return None

    def _secondary_part(self, limit_ns: float | None, seen: dict[tuple[str, str], _Counter]) -> int:
        """A hybrid host's v1 containers that v2 does not show (see the module docstring)."""
        assert self._secondary is not None
        nodes = self._secondary.walk(SYSTEM)
        if not nodes:
            return 0
        shown = {ref for ref, b in self._buckets.items() if b.last_live == self._scans}
        keep: list[bool] = []
        for node in nodes:
            parent_kept = node.parent < 0 or keep[node.parent]
            keep.append(parent_kept and node.ref not in shown)
        if not any(keep):
            return 0
        wanted = [n for n, k in zip(nodes, keep, strict=True) if k]
        index = {id(n): j for j, n in enumerate(wanted)}
        remapped = [
            _Node(n.path, n.ref, index.get(id(nodes[n.parent]), -1) if n.parent >= 0 else -1)
            for n in wanted
        ]
        deltas = self._read(self._secondary, remapped, limit_ns, seen)
        return self._account(self._secondary, remapped, deltas, [True] * len(remapped), seen)

    # -- the rest ----------------------------------------------------------------------------

    def _account_rest(self, busy_ns: int, below_root: int, kernel_ns: int | None) -> None:
        rest = self._rest
        last_kernel, self._kernel_last = self._kernel_last, kernel_ns
        if rest is None:
            self._rest = _Counter(busy_ns)
            return
        grown = busy_ns - rest.usage_ns
        rest.usage_ns = busy_ns
        level = rest.level
        rest.raw, rest.level = settle(rest.raw, level, max(grown, 0) / 1e9, below_root / 1e9)
        added = rest.level - level
        if kernel_ns is None or last_kernel is None:
            self._rest_total += added  # no kernel reading: all of it is kernel work, as before
            return
        # The kernel's part of the rest, the remainder host userland (hostwork.py). Kernel time
        # the rest has not grown by yet (read skew) waits one interval, no longer.
        kernel = max(kernel_ns - last_kernel, 0) / 1e9
        wanted = kernel + self._kernel_owed
        part = min(wanted, added)
        self._kernel_owed = min(wanted - part, kernel)
        self._rest_total += part
        self._host_total += added - part

    # -- samples -----------------------------------------------------------------------------

    def _bucket(self, ref: ContainerRef, path: str) -> _Bucket:
        b = self._buckets.get(ref)
        if b is None:
            b = self._buckets[ref] = _Bucket((CGROUP_PID, self._next_seq), path, self._scans)
            self._next_seq += 1
        return b

    def _report(self) -> list[TaskSample]:
        out: list[TaskSample] = []
        scan = self._scans
        for ref in list(self._buckets):
            b = self._buckets[ref]
            if scan - b.last_live > LINGER_SCANS:
                del self._buckets[ref]
                continue
            if not b.total and ref.pod_uid and not ref.container_id:
                # a pod's own cgroup that has run nothing outside its containers: no series
                # (processes are rarely placed there; its containers are what the pod runs)
                continue
            if b.sample is None or b.sample.cpu_seconds != b.total:
                b.sample = TaskSample(
                    key=b.key,
                    pid=0,
                    comm=CGROUP_COMM,
                    cgroup=b.path,
                    kernel_thread=False,
                    cpu_seconds=b.total,
                )
            out.append(b.sample)
        rest = self._rest_sample
        if rest is None or rest.cpu_seconds != self._rest_total:
            rest = self._rest_sample = TaskSample(
                key=REST_KEY,
                pid=0,
                comm=REST_COMM,
                cgroup="",
                kernel_thread=True,
                cpu_seconds=self._rest_total,
            )
        out.append(rest)
        if self._kernel_ns is not None:
            host = self._host_sample
            if host is None or host.cpu_seconds != self._host_total:
                host = self._host_sample = TaskSample(
                    key=HOST_KEY,
                    pid=0,
                    comm=HOST_COMM,
                    cgroup="/",
                    kernel_thread=False,
                    cpu_seconds=self._host_total,
                )
            out.append(host)
        return out


def busy_ns_from(text: str, ticks_per_second: int) -> int:
    """/proc/stat's aggregate busy time without steal, in ns (user+nice+system+irq+softirq)."""
    for line in text.split("\n"):
        if line.startswith("cpu "):
            fields = line.split()[1:]
            ticks = 0
            for i in _BUSY_FIELDS:
                if i < len(fields):
                    value = fields[i]
                    if not value.isdigit() or len(value) > 20:
                        raise ValueError(f"not a /proc/stat number: {value[:24]!r}")
                    ticks += int(value)
            return ticks * 1_000_000_000 // ticks_per_second
    raise ValueError("no aggregate cpu line in /proc/stat")
