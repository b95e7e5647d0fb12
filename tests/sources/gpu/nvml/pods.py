"""The pods whose processes the NVML scenarios name by PID, placed in a fixture /proc tree.

NVML reports host PIDs; wattprobe finds their containers through /proc/<pid>/cgroup, so every
GPU process of a scenario that should map to a pod gets a /proc entry here with a kubepods
cgroup (systemd driver, containerd).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.fixturehost import FixtureHost


@dataclass(frozen=True)
class GpuPod:
    pid: int
    comm: str
    pod_uid: str
    container_id: str

    @property
    def cgroup(self) -> str:
        uid = self.pod_uid.replace("-", "_")
        return (
            f"0::/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{self.container_id}.scope\n"
        )


def _pod(pid: int, comm: str, n: int) -> GpuPod:
    return GpuPod(pid, comm, f"{n:08x}-9a00-4b00-8c00-00000000{pid:04d}", f"{n:02x}" * 32)


# h100x8-timesliced: GPU 0 is time-sliced between pods A (SM 60 %) and B (SM 20 %); GPU 1 runs
# pod C; GPU 2's PID 5104 has no /proc entry (another PID namespace); GPU 3 runs pods D and E,
# for which NVML gives memory but no utilization samples.
POD_A = _pod(5101, "python3", 0xA1)
POD_B = _pod(5102, "python3", 0xB2)
POD_C = _pod(5103, "torchrun", 0xC3)
POD_D = _pod(5105, "triton", 0xD4)
POD_E = _pod(5106, "triton", 0xE5)
INVISIBLE_PID = 5104
H100_PODS = (POD_A, POD_B, POD_C, POD_D, POD_E)

# a100-mig: one pod per MIG instance (3g.20gb, 2g.10gb, 1g.5gb); a fourth instance is empty.
POD_MIG_3G = _pod(5201, "python3", 0x31)
POD_MIG_2G = _pod(5202, "python3", 0x22)
POD_MIG_1G = _pod(5203, "python3", 0x11)
MIG_PODS = (POD_MIG_3G, POD_MIG_2G, POD_MIG_1G)

# p100-no-energy: one pod.
POD_P100 = _pod(5301, "caffe", 0x9F)
P100_PODS = (POD_P100,)


def add_pods(host: FixtureHost, pods: tuple[GpuPod, ...], start: int = 900000) -> None:
    for i, pod in enumerate(pods):
        host.add_process(pod.pid, pod.comm, pod.cgroup, start=start + i, utime=100)
