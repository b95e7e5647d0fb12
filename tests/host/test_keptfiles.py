"""exporter.host.keptfiles: kept descriptors on the kernel's cgroupfs, a fresh open elsewhere."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from exporter.host.hostfile import FileTooLarge, NotRegularFile
from exporter.host.keptfiles import KeptFiles, is_cgroupfs
from tests.support.kubecgroups import v2_root


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_elsewhere_every_read_opens_the_file_and_sees_a_replacement(tmp_path: Path) -> None:
    files = KeptFiles(str(tmp_path))
    assert not files.keeping and not is_cgroupfs(str(tmp_path))
    f = tmp_path / "cpu.stat"
    f.write_text("usage_usec 1\n")
    assert files.read(str(f), 64) == b"usage_usec 1\n"
    tmp = tmp_path / "new"
    tmp.write_text("usage_usec 2\n")
    tmp.rename(f)  # how fixtures (and nothing in the kernel) replace a file
    assert files.read(str(f), 64) == b"usage_usec 2\n"
    assert files.opens == 2


def test_a_file_past_its_bound_is_refused_not_cut(tmp_path: Path) -> None:
    f = tmp_path / "cpu.stat"
    f.write_bytes(b"x" * 65)
    with pytest.raises(FileTooLarge):
        KeptFiles(str(tmp_path)).read(str(f), 64)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cpu.stat"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):
        KeptFiles(str(tmp_path)).read(str(fifo), 64)


def test_on_cgroupfs_one_open_per_file_then_pread_and_a_removed_cgroup_is_dropped() -> None:
    root = v2_root()  # root and a cgroup v2 mount (a missing part fails in CI)
    made = root / f"wattprobe-kept-{secrets.token_hex(4)}"
    made.mkdir()
    files = KeptFiles(str(root))
    try:
        assert files.keeping
        path = str(made / "cpu.stat")
        first = files.read(path, 4096)
        second = files.read(path, 4096)
        assert first.startswith(b"usage_usec ") and second.startswith(b"usage_usec ")
        assert files.opens == 1
        fds = open_fds()
        made.rmdir()
        with pytest.raises(OSError):
            files.read(path, 4096)  # the kept descriptor of a removed cgroup: ENODEV
        assert open_fds() == fds - 1, "the descriptor of a removed cgroup is closed"
    finally:
        if made.exists():
            made.rmdir()
        files.close()


def test_keep_only_closes_the_descriptors_of_cgroups_no_longer_read() -> None:
    root = v2_root()
    made = [root / f"wattprobe-kept-{secrets.token_hex(4)}" for _ in range(3)]
    files = KeptFiles(str(root))
    try:
        for d in made:
            d.mkdir()
            files.read(str(d / "cpu.stat"), 4096)
        fds = open_fds()
        files.keep_only({str(made[0] / "cpu.stat")})
        assert open_fds() == fds - 2
        files.read(str(made[0] / "cpu.stat"), 4096)
        assert files.opens == 3
    finally:
        files.close()
        for d in made:
            d.rmdir()
