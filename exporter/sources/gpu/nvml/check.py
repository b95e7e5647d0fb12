"""What `wattprobe check` says about NVML: driver and GPUs found, or why not and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.model.config import Config
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.readings import ABSENT, SourceError
from exporter.model.spec import GPU, BuildContext, CheckResult, Finding, SourceSpec
from exporter.sources.gpu.nvml.source import NvmlSource

MOUNT_LIBRARIES = (
    "make the driver's user-space libraries visible: with the NVIDIA container toolkit set "
    "NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (or use the nvidia "
    "runtimeClass); otherwise mount the host's libnvidia-ml.so.1 and set LD_LIBRARY_PATH"
)
FIXES = {
    ABSENT: "no NVIDIA driver on this node: nothing to fix unless it has NVIDIA GPUs "
    "(then install the NVIDIA driver, e.g. through the GPU operator)",
    "library not found": MOUNT_LIBRARIES,
    "driver not loaded": "load the NVIDIA kernel driver (install the NVIDIA driver or let the "
    "GPU operator's driver pod finish), then restart wattprobe",
    "permission denied": "run privileged or give the container the /dev/nvidia* devices "
    "(NVIDIA_VISIBLE_DEVICES=all)",
    "driver/library mismatch": "the mounted libnvidia-ml.so.1 is not the loaded driver's "
    "version: mount the host's driver libraries (after a driver upgrade, reboot or reload)",
}


@dataclass(frozen=True)
class NvmlCheck:
    ok: bool
    found: str = ""
    reason: str = ""
    fix: str = ""
    code: str = ""  # the short reason alone ("absent", "library not found", ...)
    detail: str = ""
    items: tuple[str, ...] = ()  # one line per GPU: "0 NVIDIA H100 80GB HBM3 (MIG off)"


def describe_gpu(gpu: GpuReading) -> str:
    """A GPU without its index: "NVIDIA H100 80GB HBM3 (MIG off)"."""
    if gpu.lost:
        return f"LOST {gpu.uuid}"
    mig = {True: "MIG on", False: "MIG off", None: "MIG n/a"}[gpu.mig_enabled]
    extra = f", {len(gpu.mig_instances)} MIG devices" if gpu.mig_instances else ""
    energy = "" if gpu.energy_mj is not None else ", no energy counter: power integrated"
    return f"{gpu.name} ({mig}{extra}{energy})"


def describe(reading: GpuReadings) -> str:
    """Driver versions and GPUs, runs of alike GPUs folded: "0-7 NVIDIA H100 ... (MIG off)"."""
    runs: list[tuple[int, int, str]] = []
    for gpu in reading.gpus:
        text = describe_gpu(gpu)
        if runs and runs[-1][2] == text and runs[-1][1] == gpu.index - 1:
            runs[-1] = (runs[-1][0], gpu.index, text)
        else:
            runs.append((gpu.index, gpu.index, text))
    gpus = "; ".join(f"{a}-{b} {t}" if a != b else f"{a} {t}" for a, b, t in runs)
    xid = ""
    if reading.event_watch is not None and not reading.event_watch.up:
        xid = f"; XID events not watched: {reading.event_watch.reason}"
    return (
        f"driver {reading.driver_version}, NVML {reading.nvml_version}, "
        f"CUDA {reading.cuda_version}; {len(reading.gpus)} GPUs: {gpus}{xid}"
    )


def check_nvml(procfs: Path) -> NvmlCheck:
    source = NvmlSource(procfs)
    try:
        reading = source.read()
    except SourceError as exc:
        return NvmlCheck(
            False,
            reason=f"{exc.reason}: {exc.detail}",
            fix=FIXES.get(exc.reason, ""),
            code=exc.reason,
            detail=exc.detail,
        )
    finally:
        source.close()
    items = tuple(
        f"{gpu.index} {describe_gpu(gpu)}" + ("" if gpu.lost else f" {gpu.uuid}")
        for gpu in reading.gpus
    )
    return NvmlCheck(True, found=describe(reading), items=items)


FIX_NVML_OTHER = (
    "run `nvidia-smi` on the host: if it fails too, the driver needs attention (reload it or "
    "reboot); if it works, mount the host's libnvidia-ml.so.1 into the container"
)


def probe(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    nvml = check_nvml(config.procfs)
    if nvml.ok:
        return Finding.works(nvml.found, nvml.items)
    return Finding(
        False,
        reason=nvml.code,
        detail=nvml.detail,
        fix=nvml.fix or FIX_NVML_OTHER,
        absent=nvml.code == ABSENT,
    )


# NVML's spec lives with its check: exporter/sources/gpu/nvml/source.py is what this module probes.
SPEC = SourceSpec(
    name="nvml",
    kind=GPU,
    default_on=True,
    probe=probe,
    fixes=FIXES,
    gpu_backend=lambda config: NvmlSource(config.procfs),
)
