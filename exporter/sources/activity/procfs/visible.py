"""Whether /proc shows wattprobe every process: procfs mounted with hidepid.

With hidepid=1/2 (noaccess/invisible, or 4/ptraceable) the kernel shows a process's /proc
directory only to the process's own user, to members of the mount's gid= group, and to whoever
may ptrace-read it: CAP_SYS_PTRACE. A non-root exporter without it would see its own processes
only and hand the node's energy to them; the procfs activity source reports that as
"permission denied" instead (docs/security.md, least privilege).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.host.caps import CAP_SYS_PTRACE, SELF_STATUS, effective_caps
from exporter.host.hostfile import read_text_bounded
from exporter.model.readings import SourceError, TaskSample

PERMISSION = "permission denied"
RECHECK_S = 60.0  # mount options change only by a remount: looked at again once a minute
_NOT_HIDING = ("", "0", "off")


@dataclass(frozen=True, slots=True)
class ProcMount:
    mountpoint: str
    hidepid: str  # as mountinfo shows it: "", "0"/"off", "1"/"noaccess", "2"/"invisible", ...
    gid: int | None


def parse_mountinfo(text: str, mountpoint: str) -> ProcMount | None:
    """The last proc mount at mountpoint in /proc/self/mountinfo text (the one on top)."""
    found = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] != "proc":
            continue
        if fields[4].replace("\\040", " ") != mountpoint:
            continue
        options = dict(o.partition("=")[::2] for o in tail[2].split(","))
        gid = options.get("gid", "")
        found = ProcMount(mountpoint, options.get("hidepid", ""), int(gid) if gid else None)
    return found


def hidden_reason(mount: ProcMount | None, caps: int, groups: Sequence[int]) -> str | None:
    """Why other users' processes are hidden from this process, or None when they are not."""
    if mount is None or mount.hidepid in _NOT_HIDING:
        return None
    if caps & (1 << CAP_SYS_PTRACE):
        return None
    if mount.gid is not None and mount.gid in groups:
        return None
    via = f" or membership of group {mount.gid}" if mount.gid is not None else ""
    return (
        f"{mount.mountpoint} is mounted with hidepid={mount.hidepid}: processes of other users "
        f"are hidden; needs CAP_SYS_PTRACE{via}"
    )


def _current_reason(procfs: Path) -> str | None:
    try:
        text = read_text_bounded("/proc/self/mountinfo", 16 << 20)
        status = read_text_bounded(str(SELF_STATUS), 65536)
    except OSError:
        return None  # no way to tell: read as before
    try:
        caps = effective_caps(status)
    except ValueError:
        caps = 0  # a kernel that shows no CapEff: count on no capability
    mount = parse_mountinfo(text, os.path.realpath(procfs))
    return hidden_reason(mount, caps, [os.getegid(), *os.getgroups()])


class VisibleProcfs:
    """An activity source that fails with "permission denied" while /proc hides processes."""

    def __init__(
        self,
        inner: Callable[[], Sequence[TaskSample]],
        procfs: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = "procfs"
        self._inner = inner
        self._procfs = procfs
        self._clock = clock
        self._checked_at: float | None = None
        self._reason: str | None = None

    def tasks(self) -> Sequence[TaskSample]:
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= RECHECK_S:
            self._reason = _current_reason(self._procfs)
            self._checked_at = now
        if self._reason is not None:
            raise SourceError(PERMISSION, self._reason)
        return self._inner()
