"""`wattprobe check`: for each source, whether it works here, what it found, and how to fix it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from exporter.config import ActivitySource as ActivityChoice
from exporter.config import Config
from exporter.gpu.check import check_nvml
from exporter.readings import ABSENT, EnergyReading, SourceError
from exporter.sources.ebpf import EbpfSource
from exporter.sources.ebpf_load import FIXES as EBPF_FIXES
from exporter.sources.estimate import CpuPowerModel
from exporter.sources.hwmon import HwmonSource
from exporter.sources.procfs import ProcfsSource
from exporter.sources.rapl import FIX_PERMISSION, RaplSource
from exporter.workloads.cgroup import classify_task

POWER = "power"
ACTIVITY = "activity"

FIXES: dict[tuple[str, str], str] = {
    (
        "rapl",
        ABSENT,
    ): "no RAPL here (VMs, non-x86 boards): nothing to fix; hwmon or the estimate is used",
    ("rapl", "permission denied"): FIX_PERMISSION,
    (
        "hwmon",
        ABSENT,
    ): "no hwmon power sensors: nothing to fix unless the board has some (load its driver)",
    ("hwmon", "permission denied"): "run as root or grant CAP_DAC_READ_SEARCH",
    (
        "procfs",
        "read error",
    ): "mount the host's /proc and point --path.procfs at it (hostPID in Kubernetes)",
}


@dataclass(frozen=True)
class CheckResult:
    source: str
    kind: str  # power or activity
    ok: bool
    found: str = ""
    reason: str = ""
    fix: str = ""
    disabled: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _power(source: str, read: Callable[[], Sequence[EnergyReading]]) -> CheckResult:
    try:
        readings = read()
    except SourceError as exc:
        fix = FIXES.get((source, exc.reason), "")
        return CheckResult(source, POWER, False, reason=f"{exc.reason}: {exc.detail}", fix=fix)
    found = ", ".join(f"{r.zone} ({r.device})" for r in readings)
    return CheckResult(source, POWER, True, found=f"{len(readings)} zones: {found}")


def _disabled(source: str, kind: str) -> CheckResult:
    return CheckResult(
        source, kind, False, reason="disabled", fix=f"--collector.{source} to enable", disabled=True
    )


def _ebpf(config: Config) -> CheckResult:
    """Load the probes for real (compile, attach, one read of the maps), then unload them."""
    if config.activity_source is ActivityChoice.PROCFS:
        return CheckResult(
            "ebpf",
            ACTIVITY,
            False,
            reason="disabled by --activity-source procfs",
            fix="--activity-source auto (or ebpf) to use it",
            disabled=True,
        )
    try:
        source = EbpfSource.start(
            config.procfs, config.cgroup_root, config.ebpf_kernel_headers, config.ebpf_gpu_ioctls
        )
        try:
            tasks = source.tasks()
        finally:
            source.close()
    except SourceError as exc:
        return CheckResult(
            "ebpf",
            ACTIVITY,
            False,
            reason=f"{exc.reason}: {exc.detail}",
            fix=EBPF_FIXES.get(exc.reason, ""),
        )
    info = source.info
    return CheckResult(
        "ebpf",
        ACTIVITY,
        True,
        found=f"{len(tasks)} tasks seen; tracefs {info.tracefs}; {info.describe()}",
    )


def run_checks(config: Config) -> list[CheckResult]:
    results: list[CheckResult] = []
    procfs = ProcfsSource(config.procfs)
    try:
        cpu = procfs.cpu_times()
        tasks = procfs.tasks()
        in_containers = sum(
            1 for t in tasks if classify_task(t.cgroup, t.kernel_thread).container_id
        )
        results.append(
            CheckResult(
                "procfs",
                ACTIVITY,
                True,
                found=f"{cpu.ncpu} CPUs, {len(tasks)} processes, {in_containers} in containers",
            )
        )
    except SourceError as exc:
        cpu = None
        results.append(
            CheckResult(
                "procfs",
                ACTIVITY,
                False,
                reason=f"{exc.reason}: {exc.detail}",
                fix=FIXES.get(("procfs", exc.reason), ""),
            )
        )
    results.append(_ebpf(config))
    for name, factory in (("rapl", RaplSource), ("hwmon", HwmonSource)):
        if config.enabled(name):
            results.append(_power(name, factory(config.sysfs).read))
        else:
            results.append(_disabled(name, POWER))
    measured = any(r.ok for r in results if r.kind == POWER)
    if not config.enabled("estimate"):
        results.append(_disabled("estimate", POWER))
    elif cpu is None:
        results.append(
            CheckResult(
                "estimate",
                POWER,
                False,
                reason="needs /proc/stat",
                fix=FIXES[("procfs", "read error")],
            )
        )
    else:
        model = CpuPowerModel.for_cpus(cpu.ncpu, config.estimate_idle_w, config.estimate_max_w)
        use = (
            "standby: measured power is available" if measured else "in use: no power sensor found"
        )
        results.append(
            CheckResult(
                "estimate",
                POWER,
                True,
                found=f"{use}; model {model.idle_w:g} W idle .. {model.max_w:g} W busy",
            )
        )
    if config.enabled("nvml"):
        nvml = check_nvml(config.procfs)
        results.append(CheckResult("nvml", POWER, nvml.ok, nvml.found, nvml.reason, nvml.fix))
    else:
        results.append(_disabled("nvml", POWER))
    # imported here: check_kube builds on CheckResult from this module
    from exporter.check_kube import kube_checks  # noqa: PLC0415

    results.extend(kube_checks(config))
    return results


def exit_status(results: Sequence[CheckResult]) -> int:
    """0 when at least one power source and one activity source work, else 1."""
    power = any(r.ok for r in results if r.kind == POWER)
    activity = any(r.ok for r in results if r.kind == ACTIVITY)
    return 0 if power and activity else 1
