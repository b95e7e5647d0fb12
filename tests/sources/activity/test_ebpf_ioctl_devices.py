"""The ioctl probe tells an ioctl's device with real probes: which majors count (the dev_class
map, kept current from /proc/devices) and what happens without kernel BTF.

Devices are mknod'd nodes (tests/support/gpunodes.py): the probe reads the device number, no driver
needed. Needs root, bcc, tracefs, kernel headers and BTF; missing parts skip locally and fail in
CI.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sources.activity.ebpf.btf import VMLINUX
from exporter.sources.activity.ebpf.gpu_majors import DEV_NVIDIA, FIXED, DeviceClasses
from exporter.sources.activity.ebpf.load import IOCTL_TRACEPOINT, NO_BTF, Loaded
from tests.support.ebpfparts import require_ebpf
from tests.support.gpunodes import DRM_CMD, NVIDIA_CMD, make_gpu_nodes
from tests.support.realparts import missing

pytestmark = pytest.mark.real

UVM_MAJOR = 240  # a dynamic major no device on this machine has (/proc/devices lists 245 up)
IOCTL = ":".join(IOCTL_TRACEPOINT)


def counted(loaded: Loaded, pid: int) -> tuple[int, int]:
    """(NVIDIA, DRM) ioctls of process pid in the tasks map, after a switch-out adds them."""
    time.sleep(0.05)  # sleeping switches this process out: its slot's counts reach the entry
    for key, value in loaded.bpf[b"tasks"].items():
        if key.value == pid:
            return value.ioctls[0], value.ioctls[1]
    return 0, 0


def issue(path: Path, cmd: int, times: int) -> None:
    fd = os.open(path, os.O_PATH)
    try:
        for _ in range(times):
            # EBADF: an O_PATH fd takes no ioctl, but the probe has counted the syscall
            with contextlib.suppress(OSError):
                fcntl.ioctl(fd, cmd, bytes(16))
    finally:
        os.close(fd)


@pytest.fixture
def proc_devices(tmp_path: Path) -> Path:
    path = tmp_path / "devices"
    path.write_text(f"Character devices:\n  1 mem\n{UVM_MAJOR} nvidia-uvm\n")
    return path


@pytest.fixture
def loaded(proc_devices: Path) -> Iterator[Loaded]:
    require_ebpf()
    if not VMLINUX.is_file():
        missing(f"kernel BTF ({VMLINUX})")
    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415

    result = load(ioctls=True, proc_devices=proc_devices)
    try:
        yield result
    finally:
        result.bpf.cleanup()


def test_dynamic_major_counts_while_proc_devices_names_it(
    loaded: Loaded, proc_devices: Path, tmp_path: Path
) -> None:
    assert IOCTL in loaded.info.tracepoints
    nodes = make_gpu_nodes(tmp_path / "uvm", nvidia_major=UVM_MAJOR)
    fixed = make_gpu_nodes(tmp_path / "fixed")
    me = os.getpid()
    classes = DeviceClasses(loaded.bpf[b"dev_class"], proc_devices)
    assert classes.classes == {**FIXED, UVM_MAJOR: DEV_NVIDIA}  # as the loader wrote it

    before = counted(loaded, me)
    issue(nodes.nvidia0, NVIDIA_CMD, 40)
    issue(nodes.nvidia0, DRM_CMD, 5)  # a DRM-type ioctl on an NVIDIA device: not counted
    issue(fixed.card0, DRM_CMD, 3)
    after = counted(loaded, me)
    assert (after[0] - before[0], after[1] - before[1]) == (40, 3)

    # the module is unloaded: its major is no longer NVIDIA's, the fixed ones stay
    proc_devices.write_text("Character devices:\n  1 mem\n")
    classes.refresh()
    assert classes.classes == FIXED
    before = counted(loaded, me)
    issue(nodes.nvidia0, NVIDIA_CMD, 40)
    issue(fixed.nvidiactl, NVIDIA_CMD, 7)
    after = counted(loaded, me)
    assert (after[0] - before[0], after[1] - before[1]) == (7, 0)

    # and it comes back (as nvidia-uvm does on a process's first CUDA call)
    proc_devices.write_text(f"Character devices:\n{UVM_MAJOR} nvidia-uvm\n")
    classes.refresh()
    before = counted(loaded, me)
    issue(nodes.nvidiactl, NVIDIA_CMD, 11)
    after = counted(loaded, me)
    assert (after[0] - before[0], after[1] - before[1]) == (11, 0)


def test_unreadable_proc_devices_keeps_what_the_map_has(loaded: Loaded, proc_devices: Path) -> None:
    classes = DeviceClasses(loaded.bpf[b"dev_class"], proc_devices)
    proc_devices.unlink()
    classes.refresh()
    assert classes.classes == {**FIXED, UVM_MAJOR: DEV_NVIDIA}
    # a fresh reader sees the map, not an empty one
    assert DeviceClasses(loaded.bpf[b"dev_class"], proc_devices).classes == classes.classes


def test_without_kernel_btf_the_ioctl_probe_is_not_attached(tmp_path: Path) -> None:
    """No BTF, no way to tell an ioctl's device: no ioctl is counted rather than every 'F'
    one; the scheduler probes still load and count."""
    require_ebpf()
    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415

    result = load(ioctls=True, btf=tmp_path / "no-vmlinux")
    try:
        assert IOCTL not in result.info.tracepoints
        assert any(m.startswith(f"{NO_BTF} for GPU ioctls") for m in result.info.missing_optional)
        assert f"missing {NO_BTF} for GPU ioctls" in result.info.describe()
        time.sleep(0.1)
        assert len(result.bpf[b"tasks"]) > 0
    finally:
        result.bpf.cleanup()
