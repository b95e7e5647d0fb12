"""`wattprobe check`: for each source, whether it works here, what it found, and how to fix it.

Every source has one entry in CHECKS: a SourceCheck naming the source, its kind and a probe.
A probe reads the source once, the way the exporter would, and returns a Finding; the runner
adds the name and kind, reports switched-off collectors as disabled and turns a probe's crash
into a FAIL, so `check` never ends in a traceback. To check a new source, write a probe and
append a SourceCheck (the JSON schema stays the same: docs/check.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from exporter.config import ActivitySource as ActivityChoice
from exporter.config import Config
from exporter.gpu.check import check_nvml
from exporter.readings import ABSENT, SourceError
from exporter.sources.ebpf import EbpfSource
from exporter.sources.ebpf_load import FIXES as EBPF_FIXES
from exporter.sources.estimate import CpuPowerModel
from exporter.sources.hwmon import HwmonSource, discover_sensors
from exporter.sources.procfs import ProcfsSource
from exporter.sources.rapl import FIX_PERMISSION, RaplSource, discover_zones
from exporter.workloads.cgroup import classify_task
from exporter.workloads.cgroupns import namespace_root

log = logging.getLogger(__name__)

# kinds: the exit status needs one working power and one working activity source
K = TypeVar("K")

POWER = "power"
ACTIVITY = "activity"
KUBERNETES = "kubernetes"  # pod names and GPU owners (kubelet, PodResources): not required

# statuses, as in the JSON report
OK = "ok"
FAIL = "fail"
ABSENT_STATUS = "absent"  # the node has no such hardware: not a fault (shown as n/a)
DISABLED = "disabled"  # switched off with --no-collector.NAME

MOUNT_SYSFS = "mount the host's /sys (read-only) and point --path.sysfs at it"
MOUNT_PROCFS = "mount the host's /proc and point --path.procfs at it (hostPID in Kubernetes)"
FIXES: dict[tuple[str, str], str] = {
    ("rapl", ABSENT): "no RAPL here (VMs, non-x86 boards): nothing to fix; hwmon or the estimate "
    "is used",
    ("rapl", "permission denied"): FIX_PERMISSION,
    ("hwmon", ABSENT): "no hwmon power sensors: nothing to fix unless the board has some (load "
    "its driver, e.g. acpi_power_meter or amdgpu)",
    ("hwmon", "permission denied"): "run as root or grant CAP_DAC_READ_SEARCH",
    ("procfs", "read error"): MOUNT_PROCFS,
}
# failures of a driver rather than of access: what to look at
FIX_RAPL_DRIVER = (
    "the powercap driver misbehaves: look for intel_rapl in `dmesg`, then reload it "
    "(`modprobe -r intel_rapl_msr && modprobe intel_rapl_msr`)"
)
FIX_HWMON_DRIVER = "the sensor's driver misbehaves: look for its chip in `dmesg` and `sensors`"
FIX_NVML_OTHER = (
    "run `nvidia-smi` on the host: if it fails too, the driver needs attention (reload it or "
    "reboot); if it works, mount the host's libnvidia-ml.so.1 into the container"
)
FIX_UNKNOWN = "rerun with --log.level debug and see docs/check.md"
FIX_BUG = "a wattprobe bug: please report it with `wattprobe check --log.level debug` output"
FIX_RAPL_VM = (
    "this is a virtual machine: hypervisors rarely pass RAPL through, nothing to fix here; "
    "the estimate (or hwmon) is used"
)
FIX_RAPL_BARE_METAL = (
    "x86 bare metal has RAPL: load its driver with `modprobe intel_rapl_msr` (AMD Zen needs "
    "Linux 5.8 or newer), then check that /sys/class/powercap/intel-rapl:0 appears"
)
INIT_COMMS = ("systemd", "init")


@dataclass(frozen=True)
class CheckResult:
    """One source's entry in the report."""

    source: str
    kind: str  # power, activity or kubernetes
    ok: bool
    found: str = ""  # one line: what works
    reason: str = ""  # short, as wattprobe_source_up's reason label ("" when ok)
    fix: str = ""  # what to do about it (for an absent source: a hint, usually nothing to do)
    disabled: bool = False
    absent: bool = False
    detail: str = ""  # the full explanation of a failure
    items: tuple[str, ...] = ()  # what was found, one per line: zones, sensors, GPUs, pods

    @property
    def status(self) -> str:
        if self.ok:
            return OK
        if self.disabled:
            return DISABLED
        return ABSENT_STATUS if self.absent else FAIL

    def as_dict(self) -> dict[str, object]:
        """The entry in `check --json` (docs/check.md)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "status": self.status,
            "ok": self.ok,
            "found": self.found,
            "items": list(self.items),
            "reason": self.reason,
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Finding:
    """What a probe found: a CheckResult without the source's name and kind."""

    ok: bool
    found: str = ""
    items: tuple[str, ...] = ()
    reason: str = ""
    detail: str = ""
    fix: str = ""
    absent: bool = False
    disabled: bool = False  # switched off by a flag other than --no-collector.NAME

    @classmethod
    def works(cls, found: str, items: Sequence[str] = ()) -> Finding:
        return cls(True, found=found, items=tuple(items))

    @classmethod
    def failed(cls, exc: SourceError, fix: str = "") -> Finding:
        return cls(
            False, reason=exc.reason, detail=exc.detail, fix=fix, absent=exc.reason == ABSENT
        )


# A probe gets the configuration and the results of the checks before it.
Probe = Callable[[Config, Sequence[CheckResult]], Finding]


@dataclass(frozen=True)
class SourceCheck:
    source: str
    kind: str
    probe: Probe
    collector: str | None = None  # the --collector.NAME that switches it; None: always on


@dataclass(frozen=True)
class GroupCheck:
    """Checks whose sources depend on the configuration (kubelet or apiserver): one function
    returning their results; a crash becomes one FAIL named after the group."""

    name: str
    kind: str
    run: Callable[[Config], Sequence[CheckResult]]


# -- probes ------------------------------------------------------------------------------


def probe_procfs(config: Config, _earlier: Sequence[CheckResult]) -> Finding:
    procfs = ProcfsSource(config.procfs, namespace_root(config.cgroup_root))
    try:
        cpu = procfs.cpu_times()
        tasks = procfs.tasks()
    except SourceError as exc:
        return Finding.failed(exc, FIXES[("procfs", "read error")])
    refs = [classify_task(t.cgroup, t.kernel_thread) for t in tasks]
    in_containers = sum(1 for r in refs if r.container_id)
    pods = Counter(r.pod_uid for r in refs if r.pod_uid)
    found = (
        f"{cpu.ncpu} CPUs, {len(tasks)} processes, {in_containers} in containers ({len(pods)} pods)"
    )
    init = next((t.comm for t in tasks if t.pid == 1), "")
    if not in_containers and init and init not in INIT_COMMS:
        # PID 1 is not an init system: most likely a container's own /proc
        found += (
            f"; PID 1 is {init!r}, so this may be a container's own /proc: "
            "for the host's processes use hostPID and --path.procfs"
        )
    items = [f"pod {uid}: {_plural(n, 'process', 'processes')}" for uid, n in sorted(pods.items())]
    return Finding.works(found, items)


def probe_ebpf(config: Config, _earlier: Sequence[CheckResult]) -> Finding:
    """Load the programs for real (compile, attach, one read of the maps), then unload them."""
    if config.activity_source is ActivityChoice.PROCFS:
        return Finding(
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
        return Finding.failed(exc, EBPF_FIXES.get(exc.reason, ""))
    info = source.info
    items = [f"tracepoint {t}" for t in info.tracepoints]
    items += [f"missing (optional): {t}" for t in info.missing_optional]
    items += [f"off: {t}" for t in info.switched_off]
    items += [f"kernel headers: {info.headers.describe()}", f"compiled in {info.compile_s:.2f}s"]
    return Finding.works(
        f"{len(tasks)} tasks seen; tracefs {info.tracefs}; {info.describe()}", items
    )


def _sysfs_class(config: Config, name: str) -> Finding | None:
    """A FAIL when <sysfs>/class itself is missing: a wrong flag or mount, not absent hardware."""
    path = config.sysfs / "class"
    if path.is_dir():
        return None
    return Finding(
        False,
        reason="no sysfs",
        detail=f"{path} does not exist, so no {name} can be found",
        fix=MOUNT_SYSFS,
    )


def _is_virtual_machine(procfs: Path) -> bool | None:
    """From the cpuinfo flags: True in a VM, False on x86 bare metal, None when unknown."""
    try:
        text = (procfs / "cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    flags = next((line for line in text.splitlines() if line.startswith("flags")), None)
    if flags is None:
        return None  # not x86
    return "hypervisor" in flags.split()


def _fault_note(fault: Mapping[K, str], key: K) -> str:
    """What to say after a zone or sensor: nothing when it read, else its fault (a domain
    listed but not read at all vanished between listing and reading: unreadable)."""
    if key not in fault:
        return ": unreadable"
    return f": {fault[key]}" if fault[key] else ""


def probe_rapl(config: Config, _earlier: Sequence[CheckResult]) -> Finding:
    missing = _sysfs_class(config, "RAPL zone")
    if missing is not None:
        return missing
    source = RaplSource(config.sysfs)
    try:
        readings = source.read()
    except SourceError as exc:
        fix = FIXES.get(("rapl", exc.reason), FIX_RAPL_DRIVER)
        if exc.reason == ABSENT:
            vm = _is_virtual_machine(config.procfs)
            if vm is not None:
                fix = FIX_RAPL_VM if vm else FIX_RAPL_BARE_METAL
        return Finding.failed(exc, fix)
    zones, duplicates = discover_zones(source.powercap)
    # a zone that failed is a reading with a fault; one not read at all vanished meanwhile
    fault = {r.device: r.fault for r in readings}
    good = [r for r in readings if not r.fault]
    items = [
        f"{z.zone} {z.device} ({z.name})"
        + (f", wraps at {z.max_energy_uj / 1e6:.0f} J" if z.max_energy_uj else "")
        + _fault_note(fault, z.device)
        for z in zones
    ]
    items += [f"left out: {d}, the same counter as its MSR zone" for d in duplicates]
    summary = ", ".join(f"{r.zone} ({r.device})" for r in good)
    return Finding.works(f"{len(good)} zones: {summary}", items)


def probe_hwmon(config: Config, _earlier: Sequence[CheckResult]) -> Finding:
    missing = _sysfs_class(config, "hwmon sensor")
    if missing is not None:
        return missing
    source = HwmonSource(config.sysfs)
    try:
        readings = source.read()
    except SourceError as exc:
        return Finding.failed(exc, FIXES.get(("hwmon", exc.reason), FIX_HWMON_DRIVER))
    fault = {(r.zone, r.device): r.fault for r in readings}
    good = [r for r in readings if not r.fault]
    items = [
        f"{s.zone} ({s.device}, {s.kind} {'counter' if s.kind == 'energy' else 'reading'})"
        + (f", at most {s.max_power_w:g} W" if s.max_power_w is not None else "")
        + _fault_note(fault, (s.zone, s.device))
        for s in discover_sensors(source.hwmon_class)
    ]
    summary = ", ".join(f"{r.zone} ({r.device})" for r in good)
    return Finding.works(f"{len(good)} sensors: {summary}", items)


def probe_estimate(config: Config, earlier: Sequence[CheckResult]) -> Finding:
    try:
        cpu = ProcfsSource(config.procfs).cpu_times()
    except SourceError as exc:
        return Finding(
            False, reason="needs /proc/stat", detail=exc.detail, fix=FIXES[("procfs", "read error")]
        )
    model = CpuPowerModel.for_cpus(cpu.ncpu, config.estimate_idle_w, config.estimate_max_w)
    measured = any(r.ok for r in earlier if r.kind == POWER)
    use = "standby: measured power is available" if measured else "in use: no power sensor found"
    return Finding.works(f"{use}; model {model.idle_w:g} W idle .. {model.max_w:g} W busy")


def probe_nvml(config: Config, _earlier: Sequence[CheckResult]) -> Finding:
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


# The checks of this node's own sources, in report order; all_checks() adds the Kubernetes
# group (pod source and PodResources, exporter/check_kube.py). A new source appends here.
CHECKS: tuple[SourceCheck, ...] = (
    SourceCheck("procfs", ACTIVITY, probe_procfs),
    SourceCheck("ebpf", ACTIVITY, probe_ebpf),
    SourceCheck("rapl", POWER, probe_rapl, collector="rapl"),
    SourceCheck("hwmon", POWER, probe_hwmon, collector="hwmon"),
    SourceCheck("estimate", POWER, probe_estimate, collector="estimate"),
    SourceCheck("nvml", POWER, probe_nvml, collector="nvml"),
)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# -- running -----------------------------------------------------------------------------


def run_one(check: SourceCheck, config: Config, earlier: Sequence[CheckResult]) -> CheckResult:
    if check.collector is not None and not config.enabled(check.collector):
        return CheckResult(
            check.source,
            check.kind,
            False,
            reason="disabled",
            fix=f"--collector.{check.collector} to enable",
            disabled=True,
        )
    try:
        f = check.probe(config, earlier)
    except Exception as exc:  # a check must report, never crash
        log.debug("check %s crashed", check.source, exc_info=True)
        return CheckResult(
            check.source,
            check.kind,
            False,
            reason="internal error",
            detail=f"{type(exc).__name__}: {exc}",
            fix=FIX_BUG,
        )
    return CheckResult(
        check.source,
        check.kind,
        f.ok,
        found=f.found,
        reason=f.reason or ("" if f.ok else "failed"),
        fix=f.fix or ("" if f.ok or f.absent or f.disabled else FIX_UNKNOWN),
        disabled=f.disabled,
        absent=f.absent,
        detail=f.detail,
        items=f.items,
    )


def run_group(group: GroupCheck, config: Config) -> list[CheckResult]:
    try:
        return [_with_fix(r) for r in group.run(config)]
    except Exception as exc:  # a check must report, never crash
        log.debug("check %s crashed", group.name, exc_info=True)
        return [
            CheckResult(
                group.name,
                group.kind,
                False,
                reason="internal error",
                detail=f"{type(exc).__name__}: {exc}",
                fix=FIX_BUG,
            )
        ]


def _with_fix(r: CheckResult) -> CheckResult:
    """Every failure says what to do, even one a group did not foresee."""
    if r.status != FAIL or r.fix:
        return r
    return replace(r, fix=FIX_UNKNOWN, reason=r.reason or "failed")


def run_checks(
    config: Config, checks: Sequence[SourceCheck | GroupCheck] | None = None
) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in all_checks() if checks is None else checks:
        if isinstance(check, GroupCheck):
            results.extend(run_group(check, config))
        else:
            results.append(run_one(check, config, tuple(results)))
    return results


def all_checks() -> tuple[SourceCheck | GroupCheck, ...]:
    # imported here: check_kube builds on this module's CheckResult
    from exporter.check_kube import kube_checks  # noqa: PLC0415

    return (*CHECKS, GroupCheck(KUBERNETES, KUBERNETES, kube_checks))


def exit_status(results: Sequence[CheckResult]) -> int:
    """0 when at least one power source and one activity source work, else 1."""
    power = any(r.ok for r in results if r.kind == POWER)
    activity = any(r.ok for r in results if r.kind == ACTIVITY)
    return 0 if power and activity else 1
