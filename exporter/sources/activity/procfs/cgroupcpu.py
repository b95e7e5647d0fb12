"""The kernel's CPU time per cgroup: cgroup v2 cpu.stat usage_usec, cgroup v1 cpuacct.usage.

/proc shows only live processes, so a process that starts and exits between two reads is in no
/proc file the /proc activity source reads. The kernel also charges every process's run time to
its cgroup as it runs, and keeps the total after the process exits: that total is what makes the
/proc source exact per container (exporter/sources/activity/procfs/exited.py).

A task's cgroup text (/proc/<pid>/cgroup, with its v2 path already made a host path) names the
file: the "0::" path under the cgroup2 mount when that path is the task's container, else the
cpuacct line's path under the v1 cpuacct mount (a hybrid host whose runtime uses the cgroupfs
driver places containers in the v1 hierarchies only). The root cgroup is never used: its totals
are the whole machine's, interrupts included.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.cgroupfs.ids import find_v2_root
from exporter.host.cgroupfs.ns import HOST_ROOT
from exporter.host.hostfile import read_whole
from exporter.host.kernelnum import parse_uint

V2 = "v2"
V1 = "v1"
# (hierarchy, path): the path as /proc shows it, "/kubepods.slice/.../cri-containerd-<id>.scope"
Location = tuple[str, str]

_MAX_BYTES = 4096  # cpu.stat is a few hundred bytes; more is not a file the kernel wrote
_USAGE_USEC = "usage_usec "
# where the v1 cpuacct controller is mounted under the cgroup root (systemd links both names)
_V1_DIRS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


def parse_cpu_stat(text: str) -> int:
    """Nanoseconds from cgroup v2 cpu.stat ("usage_usec N" is its first line).

    Raises ValueError without that line or when its number is not one the kernel writes.
    """
    for line in text.split("\n"):
        if line.startswith(_USAGE_USEC):
            return parse_uint(line[len(_USAGE_USEC) :].strip(" \t\r"), "cpu.stat") * 1000
    raise ValueError("no usage_usec in cpu.stat")


def parse_cpuacct_usage(text: str) -> int:
    """Nanoseconds from cgroup v1 cpuacct.usage (one number)."""
    return parse_uint(text.strip(" \t\r\n"), "cpuacct.usage")


def safe_path(path: str) -> bool:
    """A cgroup path that stays under its mount: absolute, not the root, no "." or ".."."""
    if not path.startswith("/") or path == "/" or "\0" in path:
        return False
    return all(seg not in ("", ".", "..") for seg in path[1:].split("/"))


class CgroupCpuFiles:
    """Finds and reads the CPU time files of task cgroups under one cgroup root."""

    def __init__(self, cgroup_root: Path, cgroupns_root: str = HOST_ROOT) -> None:
        v2 = find_v2_root(cgroup_root)
        self._v2 = str(v2) if v2 is not None else None
        # v1 paths in a private cgroup namespace are relative to roots this process cannot
        # find (exporter.host.cgroupfs.ns maps the v2 one only): not read then
        self._v1 = v1_dir(cgroup_root) if cgroupns_root == HOST_ROOT else None

    @property
    def available(self) -> bool:
        return self._v2 is not None or self._v1 is not None

    def locate(self, cgroup_text: str) -> Location | None:
        """Which cgroup's total holds this task's time, or None (the root, unknown, unsafe).

        Only a cgroup that classifies as the task does: its totals must go to the same bucket.
        """
        bucket = classify_cgroup(cgroup_text)
        v1_path = ""
        for line in cgroup_text.split("\n"):
            if line.startswith("0::"):
                path = line[3:]
                if self._v2 is not None and safe_path(path) and classify_cgroup(path) == bucket:
                    return (V2, path)
            elif not v1_path:
                parts = line.split(":", 2)
                if len(parts) == 3 and "cpuacct" in parts[1].split(","):
                    v1_path = parts[2]
        if self._v1 is not None and safe_path(v1_path) and classify_cgroup(v1_path) == bucket:
            return (V1, v1_path)
        return None

    def reader(self, where: Location) -> Callable[[], int]:
        """A function that reads the cgroup's CPU time so far, in ns (once per interval per
        cgroup: the path is joined once). It raises OSError (gone, unreadable) or ValueError."""
        kind, path = where
        if kind == V2:
            return partial(read_usage, f"{self._v2}{path}/cpu.stat", parse_cpu_stat)
        return partial(read_usage, f"{self._v1}{path}/cpuacct.usage", parse_cpuacct_usage)

    def usage_ns(self, where: Location) -> int:
        """The cgroup's CPU time so far. Raises OSError (gone, unreadable) or ValueError."""
        return self.reader(where)()


def v1_dir(cgroup_root: Path) -> str | None:
    """Where the v1 cpuacct controller is mounted under the cgroup root, or None."""
    for name in _V1_DIRS:
        if (cgroup_root / name / "cpuacct.usage").is_file():
            return str(cgroup_root / name)
    return None


def read_usage(path: str, parse: Callable[[str], int]) -> int:
    """One cgroup CPU total file, bounded, parsed by parse (parse_cpu_stat or
    parse_cpuacct_usage)."""
    # whole or refused (FileTooLarge): a huge file is a hostile one, said as such (hostile.py)
    data = read_whole(path, _MAX_BYTES)
    return parse(data.decode("ascii", "replace"))
