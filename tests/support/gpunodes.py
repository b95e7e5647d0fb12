"""Character device nodes with GPU majors, so that real ioctl-probe tests need no GPU.

The probe counts an ioctl by the device number of the file its fd refers to. A node made with
mknod(2) has that number without any driver behind it: opening it for I/O fails (ENXIO), but an
O_PATH fd to it sits in the fd table like any other file, and ioctl(2) on it reaches the syscall
tracepoint before the kernel refuses it (EBADF). Needs root (CAP_MKNOD).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR = (
    195  # Documentation/admin-guide/devices.txt; also exporter/sources/activity/ebpf/gpu_majors.py
)
DRM_MAJOR = 226
FB_MAJOR = 29  # framebuffers: their FBIO* ioctls are _IOC type 'F' too

NVIDIA_CMD = 0xC0104600  # _IOWR('F', nr, 16): NVIDIA's RM ioctls; | nr
DRM_CMD = 0xC0106400  # _IOWR('d', nr, 16): DRM's; | nr
FBIOGET_VSCREENINFO = 0x4600  # _IO('F', 0)
OTHERS = (0x5401, 0x541B, 0x80086601, 0xC0104700, 0xC0106500)  # TCGETS, FIONREAD, 'f', 'G', 'e'


@dataclass(frozen=True)
class GpuNodes:
    """Nodes in one directory; each names a device the probe must tell apart."""

    nvidia0: Path  # char 195:0, as /dev/nvidia0
    nvidiactl: Path  # char 195:255, as /dev/nvidiactl
    card0: Path  # char 226:0, as /dev/dri/card0
    fb0: Path  # char 29:0, as /dev/fb0
    block195: Path  # a block device with NVIDIA's major: not a character device

    @property
    def directory(self) -> Path:
        return self.nvidia0.parent


def make_gpu_nodes(directory: Path, *, nvidia_major: int = NVIDIA_MAJOR) -> GpuNodes:
    directory.mkdir(parents=True, exist_ok=True)
    nodes = GpuNodes(
        nvidia0=directory / "nvidia0",
        nvidiactl=directory / "nvidiactl",
        card0=directory / "card0",
        fb0=directory / "fb0",
        block195=directory / "block195",
    )
    for path, kind, major, minor in (
        (nodes.nvidia0, stat.S_IFCHR, nvidia_major, 0),
        (nodes.nvidiactl, stat.S_IFCHR, nvidia_major, 255),
        (nodes.card0, stat.S_IFCHR, DRM_MAJOR, 0),
        (nodes.fb0, stat.S_IFCHR, FB_MAJOR, 0),
        (nodes.block195, stat.S_IFBLK, NVIDIA_MAJOR, 0),
    ):
        os.mknod(path, 0o600 | kind, os.makedev(major, minor))
    return nodes


# A script (python -c ISSUE_SCRIPT DIR N M K) that issues, with O_PATH fds on the nodes of
# make_gpu_nodes(DIR): N NVIDIA-type ioctls on NVIDIA nodes, M DRM-type ones on the DRM node,
# and K ioctls of each decoy kind the probe must not count (NVIDIA-type on /dev/null, on the
# framebuffer node (FBIOGET_VSCREENINFO), on the block node and on the DRM node; DRM-type on
# /dev/null and on an NVIDIA node; other types on an NVIDIA node; NVIDIA-type on an fd number
# beyond the fd table); says so, then sleeps until killed. Every call fails (EBADF, ENOTTY): the
# probe counts at syscall entry.
ISSUE_SCRIPT = f"""
import fcntl, os, signal, sys
d, n, m, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def fd(name):
    return os.open(os.path.join(d, name), os.O_PATH)
nv0, ctl, card, fb, blk = fd("nvidia0"), fd("nvidiactl"), fd("card0"), fd("fb0"), fd("block195")
null = os.open("/dev/null", os.O_RDONLY)
def call(f, cmd):
    try:
        fcntl.ioctl(f, cmd, bytes(16))
    except OSError:
        pass
for i in range(n):
    call(nv0 if i % 2 else ctl, {NVIDIA_CMD:#x} | (i & 0xFF))
for i in range(m):
    call(card, {DRM_CMD:#x} | (i & 0xFF))
others = {OTHERS!r}
for i in range(k):
    call(null, {NVIDIA_CMD:#x} | (i & 0xFF))
    call(null, 0x4601)  # _IO('F', 1)
    call(fb, {FBIOGET_VSCREENINFO:#x})
    call(blk, {NVIDIA_CMD:#x})
    call(card, {NVIDIA_CMD:#x})
    call(null, {DRM_CMD:#x} | (i & 0xFF))
    call(nv0, {DRM_CMD:#x})
    call(nv0, others[i % len(others)])
    call(1 << 20, {NVIDIA_CMD:#x})
print("done", flush=True)
signal.pause()
"""
