"""A writable copy of the fixture sys/proc trees, with helpers to advance its counters.

Every write replaces the file atomically, so the exporter never reads a half-written number.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

STAT_FIELDS_AFTER_COMM = 50


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def stat_line(
    pid: int, comm: str, utime: int, stime: int, *, start: int, flags: int = 0x400100
) -> str:
    """A /proc/<pid>/stat line in the kernel's format (fields after comm as in proc(5))."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", str(flags), "100", "0", "0", "0"]
    fields += [str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start)]
    fields += ["12345678", "1024", "18446744073709551615"] + ["0"] * (STAT_FIELDS_AFTER_COMM - 23)
    return f"{pid} ({comm}) {' '.join(fields)}\n"


@dataclass
class FixtureHost:
    root: Path

    @classmethod
    def copy_of(cls, fixtures: Path, dest: Path) -> FixtureHost:
        dest.mkdir(parents=True)
        for tree in ("sys", "proc"):
            shutil.copytree(fixtures / tree, dest / tree, symlinks=True)
        return cls(dest)

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def procfs(self) -> Path:
        return self.root / "proc"

    def args(self) -> list[str]:
        return ["--path.sysfs", str(self.sysfs), "--path.procfs", str(self.procfs)]

    # -- RAPL and hwmon ---------------------------------------------------------------

    def rapl_dir(self, device: str) -> Path:
        return self.sysfs / "class" / "powercap" / device

    def energy_uj(self, device: str) -> int:
        return int((self.rapl_dir(device) / "energy_uj").read_text())

    def set_energy_uj(self, device: str, value: int) -> None:
        write_atomic(self.rapl_dir(device) / "energy_uj", f"{value}\n")

    def add_energy_j(self, device: str, joules: float) -> None:
        """Advance a RAPL counter, wrapping at max_energy_range_uj like the hardware."""
        max_uj = int((self.rapl_dir(device) / "max_energy_range_uj").read_text())
        value = self.energy_uj(device) + round(joules * 1e6)
        self.set_energy_uj(device, value % max_uj if value >= max_uj else value)

    def hwmon_file(self, hwmon: str, name: str) -> Path:
        return self.sysfs / "class" / "hwmon" / hwmon / name

    def set_hwmon(self, hwmon: str, name: str, value: int) -> None:
        write_atomic(self.hwmon_file(hwmon, name), f"{value}\n")

    def add_hwmon_energy_j(self, hwmon: str, name: str, joules: float) -> None:
        path = self.hwmon_file(hwmon, name)
        self.set_hwmon(hwmon, name, int(path.read_text()) + round(joules * 1e6))

    # -- /proc --------------------------------------------------------------------------

    def add_cpu_ticks(self, busy: int, idle: int) -> None:
        """Advance /proc/stat's aggregate line: busy goes to user, idle to idle."""
        path = self.procfs / "stat"
        lines = path.read_text().splitlines()
        fields = lines[0].split()
        fields[1] = str(int(fields[1]) + busy)
        fields[4] = str(int(fields[4]) + idle)
        lines[0] = "cpu  " + " ".join(fields[1:])
        write_atomic(path, "\n".join(lines) + "\n")

    def process_stat(self, pid: int) -> list[str]:
        text = (self.procfs / str(pid) / "stat").read_text()
        close = text.rfind(")")
        return [text[: close + 1], *text[close + 2 :].split()]

    def add_process_ticks(self, pid: int, utime: int, stime: int = 0) -> None:
        head, *rest = self.process_stat(pid)
        rest[11] = str(int(rest[11]) + utime)
        rest[12] = str(int(rest[12]) + stime)
        write_atomic(self.procfs / str(pid) / "stat", head + " " + " ".join(rest) + "\n")

    def add_process(
        self, pid: int, comm: str, cgroup: str, *, start: int, utime: int = 0, flags: int = 0x400100
    ) -> None:
        # The process appears whole, as the kernel shows it: a running exporter that read the
        # directory between its files (an empty cgroup file) would place it in the root cgroup
        # and, with its cgroup cached, bill it there until the next recheck.
        staging = self.procfs / f".{pid}.new"
        staging.mkdir()
        (staging / "cgroup").write_text(cgroup)
        (staging / "stat").write_text(stat_line(pid, comm, utime, 0, start=start, flags=flags))
        staging.rename(self.procfs / str(pid))

    def remove_process(self, pid: int) -> None:
        shutil.rmtree(self.procfs / str(pid))
