"""What a source declares about itself: a SourceSpec, and the check types its probe returns.

Each source module ends with one SPEC; exporter/app/registry.py lists them. Flags
(--collector.NAME), their defaults, the power sources the exporter builds, `wattprobe check`'s
entries and fixes, which zones are split among workloads and the order `top` shows sources in are
all derived from those specs (docs/architecture.md). This module sits just above readings and
config, so every source can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.model.config import Config
from exporter.model.gpu_directory import GpuDirectory, GpuRef
from exporter.model.ports import GpuBackend, PowerSource
from exporter.model.readings import ABSENT, EnergyReading, SourceError

K = TypeVar("K")

# kinds of source
POWER = "power"  # node energy by zone (RAPL, hwmon, the estimate)
ACTIVITY = "activity"  # per-task CPU time (procfs, eBPF)
GPU = "gpu"  # GPU devices (NVML)
IDENTITY = "identity"  # pod names and GPU holders (kubelet, apiserver, PodResources)
# the kind `check` reports identity sources under (docs/check.md): not needed for exit 0
KUBERNETES = "kubernetes"

# statuses, as in `check --json`
OK = "ok"
FAIL = "fail"
ABSENT_STATUS = "absent"  # the node has no such hardware: not a fault (shown as n/a)
DISABLED = "disabled"  # switched off with --no-collector.NAME

# fixes more than one source gives
MOUNT_SYSFS = "mount the host's /sys (read-only) and point --path.sysfs at it"
MOUNT_PROCFS = "mount the host's /proc and point --path.procfs at it (hostPID in Kubernetes)"
FIX_UNKNOWN = "rerun with --log.level debug and see docs/check.md"
FIX_BUG = "a wattprobe bug: please report it with `wattprobe check --log.level debug` output"

# In SourceSpec.workload_zones: every zone kind the source measures, sorted.
ALL_ZONES = "*"


@dataclass(frozen=True)
class CheckResult:
    """One source's entry in `wattprobe check`'s report."""

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
    # a power source's zone kinds that read (the estimate says whether it fills dram beside it)
    zones: tuple[str, ...] = ()

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
            # fix only for a failure; what an absent or disabled source says is a hint, not a fix
            "fix": self.fix if self.status == FAIL else None,
            "hint": self.fix if self.status in (ABSENT_STATUS, DISABLED) and self.fix else None,
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
    zones: tuple[str, ...] = ()  # a power source's zone kinds that read

    @classmethod
    def works(cls, found: str, items: Sequence[str] = (), zones: Sequence[str] = ()) -> Finding:
        return cls(True, found=found, items=tuple(items), zones=tuple(zones))

    @classmethod
    def failed(cls, exc: SourceError, fix: str = "") -> Finding:
        return cls(
            False, reason=exc.reason, detail=exc.detail, fix=fix, absent=exc.reason == ABSENT
        )


# A probe reads the source once, the way the exporter would; it gets the configuration, the
# results of the checks before it (the estimate says whether a measured source works) and what
# a build gets from the other sources (BuildContext).
Probe = Callable[[Config, Sequence[CheckResult], "BuildContext"], Finding]
# Sources that depend on the configuration (kubelet or apiserver) report as a group.
GroupProbe = Callable[[Config, "BuildContext"], Sequence[CheckResult]]


@dataclass(frozen=True)
class DevicePlugin:
    """A GPU vendor's Kubernetes device plugin, as PodResources shows its allocations: the
    resources that are its GPUs and its device-ID grammar (an ID and what the GPU backends know
    of the node's GPUs -> the GPU it names, None for an ID that names none)."""

    vendor: str
    resources: tuple[str, ...]  # resource name patterns (shell style, as --kube.gpu-resources)
    resolve: Callable[[str, GpuDirectory], GpuRef | None]


@dataclass(frozen=True)
class BuildContext:
    """What a power source's build may need from the other registered sources, resolved by the
    registry: the PCI addresses of GPUs that an enabled GPU backend meters itself (hwmon leaves
    their sensors to it, or their energy would count twice on the node)."""

    gpu_metered_pci: Callable[[], frozenset[str]] = frozenset
    # the enabled GPU vendors' device plugins (PodResources device IDs)
    device_plugins: tuple[DevicePlugin, ...] = ()


@dataclass(frozen=True)
class SourceSpec:
    """One source, as its module declares it."""

    name: str  # the check's and the --collector.NAME flag's name
    kind: str  # POWER, ACTIVITY, GPU or IDENTITY
    # the --collector.NAME flag's default; None: no flag (the source is chosen otherwise)
    default_on: bool | None = None
    probe: Probe | None = None  # its `wattprobe check` entry
    group_probe: GroupProbe | None = None  # or entries, for a group of sources
    fixes: Mapping[str, str] = field(default_factory=dict)  # failure reason -> what to do
    # how a power source read every interval is built from the configuration
    build: Callable[[Config, BuildContext], PowerSource] | None = None
    # a power source read only until a measured one has read (the estimate)
    fallback: bool = False
    # Zone kinds a fallback source keeps filling after a measured source has read, for as long
    # as no measured source has given that kind (the estimate's dram beside RAPL's package on
    # AMD): the per-zone fallback, docs/attribution.md. Its other zones stop as before.
    fills_zones: tuple[str, ...] = ()
    # how a GPU backend (kind GPU) is built, and which PCI addresses it meters (for hwmon)
    gpu_backend: Callable[[Config], GpuBackend] | None = None
    gpu_metered_pci: Callable[[Config], Callable[[], frozenset[str]]] | None = None
    # its Kubernetes device plugins' resources and device-ID grammars (PodResources)
    device_plugins: tuple[DevicePlugin, ...] = ()
    zone_source: str = ""  # the source label its readings carry, when not its name
    # older names of its --collector.NAME flag (and WATTPROBE_COLLECTOR_NAME), still accepted
    flag_aliases: tuple[str, ...] = ()
    # Zone kinds split among workloads when this is the first source (in registry order) that
    # measures any zone: the first group with a measured kind wins, filtered to those measured.
    # ALL_ZONES in a group stands for every kind the source measures.
    workload_zones: tuple[tuple[str, ...], ...] = ()

    @property
    def switchable(self) -> bool:
        return self.default_on is not None

    @property
    def zone_label(self) -> str:
        return self.zone_source or self.name

    @property
    def check_kind(self) -> str:
        """The kind in `check`'s report: a GPU's power counts as power (exit status),
        identity sources report as kubernetes."""
        return {GPU: POWER, IDENTITY: KUBERNETES}.get(self.kind, self.kind)


def missing_sysfs_class(config: Config, what: str) -> Finding | None:
    """A FAIL when <sysfs>/class itself is missing: a wrong flag or mount, not absent hardware."""
    path = config.sysfs / "class"
    if path.is_dir():
        return None
    return Finding(
        False,
        reason="no sysfs",
        detail=f"{path} does not exist, so no {what} can be found",
        fix=MOUNT_SYSFS,
    )


def fault_note(fault: Mapping[K, str], key: K) -> str:
    """What `check` says after a zone or sensor: nothing when it read, else its fault (a domain
    listed but not read at all vanished between listing and reading: unreadable)."""
    if key not in fault:
        return ": unreadable"
    return f": {fault[key]}" if fault[key] else ""


def zones_found(readings: Sequence[EnergyReading], items: list[str], noun: str) -> Finding:
    """A power source's check entry: the domains that read (faulted ones are only in items)."""
    good = [r for r in readings if not r.fault]
    summary = ", ".join(f"{r.zone} ({r.device})" for r in good)
    kinds = sorted({r.zone for r in good})
    return Finding.works(f"{len(good)} {noun}: {summary}", items, kinds)
