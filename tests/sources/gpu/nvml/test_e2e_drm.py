"""`wattprobe serve` on a fixture host with eight NVIDIA GPUs (the fake libnvidia-ml.so.1) and an
AMD RDNA3 card (sysfs and fdinfo in the kernel's formats, tests/support/drmhost.py): the AMD GPU
gets the
same series after NVML's indexes, its pods split its energy by engine time, and every GPU's
active energy is all attributed."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from exporter.app.top.frame import frame_between
from exporter.app.top.render import Screen, render
from exporter.app.top.scrape import from_text
from tests.conftest import StartExporter
from tests.sources.gpu.nvml.pods import H100_PODS, POD_A, POD_B, GpuPod, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.sources.gpu.nvml.test_e2e import GPU_IDLE_W, Env, one, settle, start, total
from tests.support.drmhost import RDNA3, amdgpu_fdinfo, write_card, write_fd
from tests.support.fixturehost import FixtureHost
from tests.support.running import select

AMD_A = GpuPod(6101, "python3", "a6a6a6a6-9a00-4b00-8c00-000000006101", "a6" * 32)
AMD_B = GpuPod(6102, "python3", "b6b6b6b6-9a00-4b00-8c00-000000006102", "b6" * 32)


def use(host: FixtureHost, a_ns: int, b_ns: int) -> None:
    # pod A holds 3x pod B's VRAM too: an interval without new engine time splits by memory 3:1
    a = amdgpu_fdinfo(RDNA3.pci, 30, gfx_ns=a_ns, vram_kib=3 * 1024 * 1024)
    write_fd(host.procfs, AMD_A.pid, 5, RDNA3.dev_node, a)
    write_fd(host.procfs, AMD_A.pid, 6, RDNA3.dev_node, a)  # a dup of the same client
    b = amdgpu_fdinfo(RDNA3.pci, 31, gfx_ns=b_ns, vram_kib=1024 * 1024)
    write_fd(host.procfs, AMD_B.pid, 5, RDNA3.dev_node, b)


def test_nvidia_and_amd_gpus_served_together(
    exporter: StartExporter,
    tmp_path_factory: pytest.TempPathFactory,
    host: FixtureHost,
    exporter_env: Env,
) -> None:
    add_pods(host, H100_PODS)
    add_pods(host, (AMD_A, AMD_B), start=910000)
    write_card(host.sysfs, RDNA3)
    use(host, 0, 0)
    h100 = Scenario.from_fixture("h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h.nvml")
    proc = start(exporter, host, exporter_env(h100))
    a_ns = b_ns = 0
    for _ in range(4):
        a_ns, b_ns = a_ns + 300_000_000, b_ns + 100_000_000
        use(host, a_ns, b_ns)
        h100.add_energy_j(0, 300.0)
        h100.write()
        settle(proc)
    samples = settle(proc)

    assert one(samples, "wattprobe_source_up", source="nvml") == 1
    assert one(samples, "wattprobe_source_up", source="drm") == 1
    info = select(samples, "wattprobe_gpu_info", gpu="8")
    assert len(info) == 1
    assert dict(next(iter(info))) == {
        "gpu": "8",
        "uuid": RDNA3.pci,
        "model": "AMD GPU 0x744c (amdgpu)",
        "pci_bus_id": RDNA3.pci,
        "driver_version": "550.54.15",  # the node's primary (NVIDIA) driver
        "cuda_version": "12.4",
        "mig_mode": "",
        "vendor": "amd",
    }
    assert {dict(k)["vendor"] for k in select(samples, "wattprobe_gpu_info")} == {
        "nvidia",
        "amd",
    }
    assert one(samples, "wattprobe_gpu_power_watts", gpu="8") == 85.0
    assert one(samples, "wattprobe_gpu_power_limit_watts", gpu="8") == 327.0
    assert one(samples, "wattprobe_gpu_temperature_celsius", gpu="8") == 45.0
    assert one(samples, "wattprobe_gpu_utilization_ratio", gpu="8") == 0.37
    assert one(samples, "wattprobe_gpu_processes", gpu="8") == 2
    assert one(samples, "wattprobe_device_up", source="drm", zone="gpu", device="8") == 1
    # its hwmon sensor is the GPU's now, not a node zone as well
    assert not select(samples, "wattprobe_node_energy_joules_total", device=RDNA3.pci)

    def gpu_energy(index: int, mode: str) -> float:
        return total(samples, "wattprobe_gpu_energy_joules_total", gpu=str(index), mode=mode)

    def pod(uid: str, index: int) -> float:
        return total(
            samples,
            "wattprobe_pod_energy_joules_total",
            pod_uid=uid,
            zone="gpu",
            gpu=str(index),
            mode="active",
        )

    sources = {
        dict(k)["source"] for k in select(samples, "wattprobe_gpu_energy_joules_total", gpu="8")
    }
    assert sources == {"drm_power"}
    a, b = pod(AMD_A.pod_uid, 8), pod(AMD_B.pod_uid, 8)
    assert a > 0 and a / b == pytest.approx(3.0, rel=1e-6)
    assert a + b == pytest.approx(gpu_energy(8, "active"), rel=1e-9)
    # 85 W against the 60 W idle: 25 W active over the time served
    assert gpu_energy(8, "idle") / gpu_energy(8, "active") == pytest.approx(60 / 25, rel=1e-6)
    methods = {
        dict(k)["method"]
        for k in select(samples, "wattprobe_gpu_attribution_intervals_total", gpu="8")
    }
    assert "engine" in methods
    # NVIDIA GPU 0 as before: SM shares 60:20
    na, nb = pod(POD_A.pod_uid, 0), pod(POD_B.pod_uid, 0)
    assert na / nb == pytest.approx(3.0, rel=0.01)
    # every GPU's active energy went to some container
    for index in range(9):
        containers = total(
            samples,
            "wattprobe_container_energy_joules_total",
            zone="gpu",
            gpu=str(index),
            mode="active",
        )
        assert math.isclose(containers, gpu_energy(index, "active"), rel_tol=1e-9, abs_tol=1e-9)
    assert GPU_IDLE_W == 60.0

    # `wattprobe top --from` this node lists the AMD card beside the H100s, with its power
    before = from_text(proc.wait_next_interval(), 0.0)
    use(host, a_ns + 300_000_000, b_ns + 100_000_000)
    proc.wait_next_interval()
    after = from_text(proc.wait_next_interval(), 0.0)
    frame = frame_between(before, after)
    assert frame is not None
    console = Console(width=120, height=60, file=io.StringIO(), record=True, color_system=None)
    console.print(render(frame, Screen("node"), frame.sources, 120, 60))
    rows = [line.split() for line in console.export_text().splitlines()]
    amd = [r for r in rows if r[:1] == ["8"]]
    assert amd and "0x744c" in " ".join(amd[0]) and "85/327" in " ".join(amd[0]), rows
