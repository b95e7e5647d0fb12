"""The live fleet's eBPF node (tests/support/livestack.py): this machine itself.

Its exporter reads the real /proc and /sys with `--activity-source ebpf` (real probes: root,
bcc, tracefs, kernel headers, cgroup v2; tests/support/ebpfparts.py). This machine has no RAPL and
no
hwmon sensor (both report reason="absent", and power is estimated) and no NVIDIA driver. A
process in a kubepods-like real cgroup v2 directory (tests/support/kubecgroups.py) issues
NVIDIA-type
(`_IOC` type 'F') ioctls on an NVIDIA device node and DRM-type ('d') ones on a DRM node (mknod'd,
no driver behind them: tests/support/gpunodes.py) at a steady rate, so the GPU ioctl counters and
the
eBPF map gauges have data; the node's fake kubelet names its pod.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.gpunodes import make_gpu_nodes
from tests.support.kubecgroups import KubeContainer, kube_container
from tests.support.kubefakes import Ctr, pod_object

NODE = "ebpf"
POD = "cuda-client-0"
CONTAINER = "client"
# per batch, every BATCH_S: 400 NVIDIA and 100 DRM ioctls per second
NVIDIA_PER_BATCH = 40
DRM_PER_BATCH = 10
BATCH_S = 0.1

# Joins the container's cgroup itself (the test process runs threads: no preexec_fn), says so,
# then issues the ioctls on O_PATH fds of the nodes (EBADF: the probe counts the syscall, not its
# result) until its parent goes away.
IOCTL_LOOP = """
import fcntl, os, sys, time
procs, nodes = sys.argv[1], sys.argv[2]
nvidia, drm, batch_s = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
with open(procs, "w") as f:
    f.write(str(os.getpid()))
parent = os.getppid()
nv = os.open(os.path.join(nodes, "nvidia0"), os.O_PATH)
card = os.open(os.path.join(nodes, "card0"), os.O_PATH)
def call(fd, cmd):
    try:
        fcntl.ioctl(fd, cmd, bytes(16))
    except OSError:
        pass
print("in", flush=True)
while os.getppid() == parent:
    for i in range(nvidia):
        call(nv, 0xC0104600 | (i & 0xFF))  # _IOWR('F', nr, 16)
    for i in range(drm):
        call(card, 0xC0106400 | (i & 0xFF))  # _IOWR('d', nr, 16)
    time.sleep(batch_s)
"""

EXPORTER_ARGS = (
    "--activity-source",
    "ebpf",
    # this machine has no GPU device nodes, so auto would not attach the ioctl probe
    "--ebpf.gpu-ioctls",
    "on",
)


@dataclass
class GpuClient:
    """The ioctl-issuing process in its kubepods cgroup."""

    container: KubeContainer
    proc: subprocess.Popen[str]
    stack: contextlib.ExitStack

    def pod(self) -> dict[str, Any]:
        """The pod as the node's kubelet lists it."""
        return pod_object(
            name=POD,
            namespace="ml",
            uid=self.container.pod_uid,
            node=NODE,
            containers=[Ctr(CONTAINER, f"containerd://{self.container.container_id}")],
        )

    def stop(self) -> None:
        self.stack.close()  # kills the process, then removes the cgroup directories


def start_gpu_client() -> GpuClient:
    stack = contextlib.ExitStack()
    try:
        container = stack.enter_context(kube_container())
        nodes = make_gpu_nodes(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                IOCTL_LOOP,
                str(container.path / "cgroup.procs"),
                str(nodes.directory),
                str(NVIDIA_PER_BATCH),
                str(DRM_PER_BATCH),
                str(BATCH_S),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        stack.callback(proc.wait, timeout=10)
        stack.callback(proc.kill)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the child writes it or dies (EOF)
        if line.strip() != "in" or proc.pid not in container.pids():
            raise AssertionError(f"GPU client did not join {container.path}: {line!r}")
    except BaseException:
        stack.close()
        raise
    return GpuClient(container, proc, stack)
