"""An incremental /proc scanner: reads what it must every interval and reuses what did not change.

Reading every process's stat and cgroup file through Python's text I/O costs several times what
the kernel needs to produce them (docs/benchmarks.md). Per interval this scanner:
- reads each /proc/<pid>/stat with one os.open/os.read/os.close, and when the bytes are those of
  the last interval (a process that did not run) reuses the TaskSample built from them; for a
  process that ran (same "pid (comm)" and start time) it parses only the fields that move;
- reads /proc/<pid>/cgroup only for a process it has not seen (new PID, or a reused PID: its
  start time differs), for one whose comm changed (it exec'd: runc and systemd move a process
  into its cgroup before exec'ing the workload), and otherwise every `recheck_every` intervals,
  spread over the intervals by PID. A process moved to another cgroup without exec'ing is
  therefore attributed to its old cgroup for at most that many intervals (1 minute at the
  defaults): Kubernetes places a container's processes before they exec, so in practice only
  hand-made moves (echo PID > cgroup.procs) wait for the recheck. Where the cgroups' CPU totals
  are read (exited.py), a cgroup that lost a process shows it at once: recheck() re-reads the
  cgroups of the processes cached there, in the same interval.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from stat import S_ISREG
from typing import Protocol

from exporter.host.cgroupfs.ns import HOST_ROOT, to_host_file
from exporter.host.files import short_error
from exporter.host.hostfile import OPEN_FLAGS, FileTooLarge, NotRegularFile, file_kind
from exporter.host.kernelnum import MAX_DIGITS
from exporter.model.readings import SourceError, TaskSample

log = logging.getLogger(__name__)

RECHECK_EVERY = 12  # intervals between cgroup re-reads of an unchanged process
_CHUNK = 4096  # a stat line is well under 1 KiB; longer files are read on
_MAX_FIELD = MAX_DIGITS  # a /proc number: u64 max and s64 min are both 20 characters


class StatFields(Protocol):
    """The parsed /proc/<pid>/stat fields the scanner uses (procfs.ProcStat)."""

    @property
    def pid(self) -> int: ...
    @property
    def comm(self) -> str: ...
    @property
    def flags(self) -> int: ...
    @property
    def utime_ticks(self) -> int: ...
    @property
    def stime_ticks(self) -> int: ...
    @property
    def start_ticks(self) -> int: ...


class _Known:
    """What the last scan found for one PID directory (a plain slotted class: thousands are
    made every interval, and a frozen dataclass costs twice as much to build)."""

    __slots__ = ("head", "sample", "stat")

    def __init__(self, stat: bytes, sample: TaskSample, head: bytes) -> None:
        self.stat = stat
        self.sample = sample
        self.head = head  # "pid (comm)": the part of stat that names the process


# hostfile.OPEN_FLAGS (O_NONBLOCK): a FIFO in a fixture /proc reads EOF at once, never waits.
# No fstat on the common path: this runs for every process every interval, and what a FIFO
# reads (nothing) fails the stat parse like any garbage. A file that fills the first chunk is
# checked and bounded (_read_rest): a device such as /dev/zero or a huge sparse file there
# costs at most MAX_FILE_BYTES, never an endless read.
# /proc/<pid>/stat is under 1 KiB; /proc/<pid>/cgroup a few KiB on a v1 host with deep paths
MAX_FILE_BYTES = 65536


def read_file(path: str) -> bytes:
    """The whole file in as few syscalls as Python allows (procfs files report size 0)."""
    fd = os.open(path, OPEN_FLAGS)
    try:
        data = os.read(fd, _CHUNK)
        return data + _read_rest(fd, path) if len(data) == _CHUNK else data
    finally:
        os.close(fd)


def _read_rest(fd: int, path: str) -> bytes:
    """What follows a full first chunk: only from a regular file, and at most MAX_FILE_BYTES in
    all (NotRegularFile, FileTooLarge: the caller skips the process like an unreadable one)."""
    mode = os.fstat(fd).st_mode
    if not S_ISREG(mode):
        raise NotRegularFile(path, file_kind(mode))
    parts = []
    left = MAX_FILE_BYTES - _CHUNK
    while chunk := os.read(fd, min(left + 1, _CHUNK)):
        parts.append(chunk)
        left -= len(chunk)
        if left < 0:
            raise FileTooLarge(path, MAX_FILE_BYTES)
    return b"".join(parts)


def decode(data: bytes) -> str:
    # comm is any bytes but NUL (prctl PR_SET_NAME): a name that is not UTF-8 must not hide the
    # process from attribution, so undecodable bytes become U+FFFD
    return data.decode("utf-8", "replace")


class ProcScanner:
    """Keeps the last scan's per-PID results; scan() returns one TaskSample per live process."""

    def __init__(
        self,
        root: str,
        *,
        parse_stat: Callable[[str], StatFields],
        kthread_flag: int,
        ticks_per_second: int,
        recheck_every: int = RECHECK_EVERY,
        cgroup_namespace_root: str = HOST_ROOT,
    ) -> None:
        self._parse_stat = parse_stat
        # host path of the exporter's cgroup namespace root (exporter.host.cgroupfs.ns)
        self._cgroupns_root = cgroup_namespace_root
        self._kthread = kthread_flag
        self._ticks = ticks_per_second
        self._root = root
        self._recheck_every = max(1, recheck_every)
        self._known: dict[str, _Known] = {}
        self._scans = 0
        self.cgroup_reads = 0  # for benchmarks and tests: how many cgroup files were read

    def scan(self) -> list[TaskSample]:
        root = self._root
        try:
            names = os.listdir(root)
        except OSError as exc:
            raise SourceError("read error", f"cannot list {root}: {short_error(exc)}") from exc
        self._scans += 1
        scan = self._scans
        every = self._recheck_every
        known = self._known
        seen: dict[str, _Known] = {}
        samples: list[TaskSample] = []
        for name in names:
            if not name.isdigit():
                continue
            try:
                # inline read_file(): this line runs for every process every interval
                fd = os.open(f"{root}/{name}/stat", OPEN_FLAGS)
                try:
                    stat = os.read(fd, _CHUNK)
                    if len(stat) == _CHUNK:
                        stat += _read_rest(fd, f"{root}/{name}/stat")
                finally:
                    os.close(fd)
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited between listing and reading
            except OSError as exc:
                log.debug("skipping %s/%s: %s", root, name, exc)
                continue
            prev = known.get(name)
            # each process's cgroup is re-read once every `every` scans, spread by PID
            recheck = (int(name) + scan) % every == 0
            entry: _Known | None = prev
            if prev is None or prev.stat != stat:
                entry = self._parse(name, stat, prev, recheck)
            elif recheck:
                entry = self._recheck(name, prev)
            if entry is not None:
                seen[name] = entry
                samples.append(entry.sample)
        self._known = seen  # PIDs that are gone are forgotten
        return samples

    def recheck(self, cgroups: set[str]) -> list[TaskSample]:
        """Re-read the cgroup of every process of the last scan cached in one of `cgroups` (a
        process that moved without exec'ing); the last scan's samples, updated."""
        known = self._known
        for name, entry in list(known.items()):
            if entry.sample.cgroup in cgroups:
                fresh = self._recheck(name, entry)
                if fresh is None:
                    del known[name]  # exited meanwhile: the cgroup total keeps its time
                else:
                    known[name] = fresh
        return [e.sample for e in known.values()]

    def _cgroup(self, name: str) -> str | None:
        """The process's cgroup file, or None when it exited (or cannot be read)."""
        try:
            text = decode(read_file(f"{self._root}/{name}/cgroup"))
        except (FileNotFoundError, ProcessLookupError):
            return None  # exited after its stat was read
        except OSError as exc:
            log.debug("skipping %s/%s: %s", self._root, name, exc)
            return None
        self.cgroup_reads += 1
        if not text:
            return None  # the kernel writes at least "0::/": nothing is not its file (a FIFO)
        return sys.intern(to_host_file(text, self._cgroupns_root))

    def _recheck(self, name: str, prev: _Known) -> _Known | None:
        """A process that did not run: only its cgroup may have changed."""
        cgroup = self._cgroup(name)
        if cgroup is None:
            return None
        if cgroup == prev.sample.cgroup:
            return prev
        return _Known(prev.stat, replace(prev.sample, cgroup=cgroup), prev.head)

    def _parse(
        self, name: str, stat_bytes: bytes, prev: _Known | None, recheck: bool
    ) -> _Known | None:
        end = stat_bytes.rfind(b")") + 1  # "pid (comm)": comm may hold spaces and ')'
        if prev is not None and not recheck and end == len(prev.head):
            sample = self._ran(stat_bytes, end, prev)
            if sample is not None:
                return _Known(stat_bytes, sample, prev.head)
        try:
            stat = self._parse_stat(decode(stat_bytes))
        except ValueError as exc:
            log.debug("skipping %s/%s: %s", self._root, name, exc)
            return None
        key = (stat.pid, stat.start_ticks)
        old = prev.sample if prev is not None else None
        same = old is not None and old.key == key and old.comm == stat.comm and not recheck
        # the same process that did not exec keeps its cgroup; any other reads it
        cgroup = old.cgroup if same and old is not None else self._cgroup(name)
        if cgroup is None:
            return None
        sample = TaskSample(
            key=key,
            pid=stat.pid,
            comm=stat.comm,
            cgroup=cgroup,
            kernel_thread=bool(stat.flags & self._kthread),
            cpu_seconds=(stat.utime_ticks + stat.stime_ticks) / self._ticks,
        )
        return _Known(stat_bytes, sample, stat_bytes[:end])

    def _ran(self, stat: bytes, end: int, prev: _Known) -> TaskSample | None:
        """The common case, a known process that ran: same pid, comm and start time, new CPU
        time. Only the fields that move are parsed; None sends the line to the full parser."""
        if not stat.startswith(prev.head):
            return None  # another comm: it exec'd (or renamed itself)
        # fields after ") ": state is field 3, so field n of proc(5) is rest[n - 3]
        rest = stat[end + 1 :].split(None, 20)
        if len(rest) < 21:
            return None
        old = prev.sample
        utime, stime, flags_field, start = rest[11], rest[12], rest[6], rest[19]
        # longer than the kernel writes: the full parser refuses the line
        if max(len(utime), len(stime), len(flags_field), len(start)) > _MAX_FIELD:
            return None
        try:
            same_start = int(start) == old.key[1]
            ticks = int(utime) + int(stime)
            flags = int(flags_field)
        except ValueError:
            return None
        if not same_start or ticks < 0 or flags < 0:
            return None  # a new process under the same PID and name, or garbage (unsigned fields)
        return TaskSample(
            key=old.key,
            pid=old.pid,
            comm=old.comm,
            cgroup=old.cgroup,
            kernel_thread=bool(flags & self._kthread),
            cpu_seconds=ticks / self._ticks,
        )
