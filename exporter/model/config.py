"""The exporter's configuration: one frozen dataclass, built from flags and WATTPROBE_* env vars."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from exporter.model.showback import Showback

DEFAULT_PORT = 28390
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PODRESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# where CDI specs live (the CDI reference library's defaults; the later directory wins a clash)
CDI_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
# device plugin resources that are GPUs (shell patterns): NVIDIA's plugin, its time-slicing and
# MPS renames (nvidia.com/gpu.shared), GKE's plugin, MIG resources, Volcano's vGPU count
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu*", "nvidia.com/mig-*", "volcano.sh/vgpu-number")


class ActivitySource(StrEnum):
    AUTO = "auto"
    EBPF = "ebpf"
    PROCFS = "procfs"


class GpuIoctls(StrEnum):
    """Whether the eBPF source counts GPU ioctls: its syscall tracepoint costs every syscall."""

    AUTO = "auto"  # when the node has NVIDIA or DRM device nodes
    ON = "on"
    OFF = "off"

    @property
    def wanted(self) -> bool | None:
        """EbpfSource.start's argument: None lets the source look for GPU device nodes."""
        return None if self is GpuIoctls.AUTO else self is GpuIoctls.ON


class PodSource(StrEnum):
    """The --kube.pod-source values every build has; the registered pod sources
    (exporter/kube/podsources.py POD_SOURCES) add theirs, so Config.pod_source is a str."""

    AUTO = "auto"
    NONE = "none"
    KUBELET = "kubelet"
    APISERVER = "apiserver"


class IdleAttribution(StrEnum):
    # A GPU's idle goes to the pods holding it (PodResources, else a context on the GPU), by
    # their active share; CPU zones' idle stays on the node. An unheld GPU's idle too.
    HOLDERS = "holders"
    NONE = "none"  # idle energy stays on the node
    REQUESTS = "requests"  # a GPU's idle goes evenly to the pods PodResources says hold it
    ACTIVITY = "activity"  # idle is split like active energy


@dataclass(frozen=True)
class IdlePower:
    """--power.idle: 'auto' learns each zone's idle baseline; watts can be given per zone."""

    default_w: float | None = None  # None: learn
    per_zone_w: tuple[tuple[str, float], ...] = ()

    def for_zone(self, zone: str) -> float | None:
        for name, watts in self.per_zone_w:
            if name == zone:
                return watts
        return self.default_w

    @classmethod
    def parse(cls, text: str) -> IdlePower:
        """'auto', '12.5' (every zone), or 'package=20,dram=3' (others learned)."""
        text = text.strip()
        if text == "auto":
            return cls()
        if "=" not in text:
            return cls(default_w=_parse_watts(text))
        pairs: list[tuple[str, float]] = []
        default: float | None = None
        for item in text.split(","):
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or not name:
                raise ValueError(f"{item!r} is not ZONE=WATTS")
            if name == "*":
                default = _parse_watts(value)
            else:
                pairs.append((name, _parse_watts(value)))
        return cls(default_w=default, per_zone_w=tuple(pairs))


# One zone's idle power: a rack-scale GPU board is a few kW; 100 kW is no device's idle
MAX_IDLE_WATTS = 100_000.0


def _parse_watts(text: str) -> float:
    try:
        watts = float(text.strip().removesuffix("W").removesuffix("w"))
    except ValueError:
        raise ValueError(f"{text!r} is not a power in watts") from None
    if not math.isfinite(watts) or watts < 0:
        raise ValueError(f"{text!r} must be a finite, non-negative number of watts")
    if watts > MAX_IDLE_WATTS:
        raise ValueError(f"{text!r} is out of range: 0 to {MAX_IDLE_WATTS:g} W")
    return watts


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Prometheus-style durations ('5s', '500ms', '1m30s') or plain seconds, to seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            value, unit = float(match.group(1)), match.group(2)
            seconds += value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
            pos = match.end()
        if pos != len(text) or not text:
            raise ValueError(f"{text!r} is not a duration (e.g. 5s, 500ms, 1m)") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{text!r} must be a positive duration")
    return seconds


# What each duration flag accepts (seconds, inclusive). A value outside is a one-line error at
# start-up, not an agent that burns a core (an interval of 1 us) or never becomes ready (1e9 s).
# Intervals: under 100 ms a step's own cost (a /proc scan, a map read, NVML calls) is most of
# the interval and the deltas are mostly rounding; over an hour /readyz waits an hour and
# rate() over usual windows sees nothing. Timeouts: under 50 ms a healthy read on a loaded node
# misses; over 10 minutes a dead peer holds a thread that long. Retention and metadata TTL: at
# least 1 s (a scrape must be able to see a last increase), at most a week of series kept.
DurationRange = tuple[float, float]
INTERVAL_RANGE: DurationRange = (0.1, 3600.0)
TIMEOUT_RANGE: DurationRange = (0.05, 600.0)
RETENTION_RANGE: DurationRange = (1.0, 7 * 86400.0)


def format_duration(seconds: float) -> str:
    """Seconds as the shortest duration parse_duration reads back: 0.1 -> 100ms, 3600 -> 1h."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def bounded_duration(bounds: DurationRange) -> Callable[[str], float]:
    """parse_duration, refusing values outside bounds with one line naming the range."""
    low, high = bounds

    def parse(text: str) -> float:
        seconds = parse_duration(text)
        if not low <= seconds <= high:
            raise ValueError(
                f"{text.strip()!r} is out of range: "
                f"{format_duration(low)} to {format_duration(high)}"
            )
        return seconds

    return parse


def parse_listen_address(text: str) -> tuple[str, int]:
    """':28390', '127.0.0.1:9000', '[::1]:9000' -> (host, port); an empty host means all."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isascii() or not port_text.isdigit():  # "٣".isdigit() is True
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. :{DEFAULT_PORT})")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


@dataclass(frozen=True)
class HttpLimits:
    """The HTTP server's limits (exporter/web/http.py, docs/security.md)."""

    max_connections: int = 4096  # open connections (a memory bound); more are refused at once
    max_requests: int = 40  # scrapes waiting for a render (node_exporter's default); 0: none
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    write_timeout_s: float = 30.0
    max_header_bytes: int = 16384
    max_request_line: int = 8192


# The default source read deadline never goes below this: short test intervals on a loaded machine
# must not turn an ordinary slow read into a timeout.
MIN_SOURCE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Config:
    listen_host: str = ""
    listen_port: int = DEFAULT_PORT
    telemetry_path: str = "/metrics"
    web_config_file: Path | None = None
    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    cgroupfs: Path | None = None  # None: <sysfs>/fs/cgroup
    interval_s: float = 5.0
    activity_source: ActivitySource = ActivitySource.AUTO
    # the --collector.NAME flags that are on; None: each one's default (exporter/app/registry.py)
    collectors: frozenset[str] | None = None
    power_idle: IdlePower = field(default_factory=IdlePower)
    attribution_idle: IdleAttribution = IdleAttribution.HOLDERS
    attribution_zones: tuple[str, ...] = ()  # empty: chosen from what the node measures
    retention_s: float = 600.0
    estimate_idle_w: float | None = None  # None: from the core count
    estimate_max_w: float | None = None
    # the node's instance type for the estimate (its node.kubernetes.io/instance-type label);
    # "": the DMI product name when it names one (AWS Nitro), else the CPU model alone
    estimate_instance_type: str = ""
    pod_source: str = PodSource.AUTO  # auto, none or a registered source's name
    node_name: str = field(default_factory=lambda: os.environ.get("NODE_NAME", ""))
    log_level: str = "info"
    log_format: str = "plain"  # plain, logfmt or json (exporter/app/cli/logformat.py)
    ebpf_kernel_headers: Path | None = None  # None: the running kernel's, else a generic set
    ebpf_gpu_ioctls: GpuIoctls = GpuIoctls.AUTO
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    # Kubernetes identity (docs/kubernetes.md); "" URLs are derived from the environment
    kubelet_url: str = ""
    apiserver_url: str = ""
    kube_token_file: Path = SERVICE_ACCOUNT_DIR / "token"
    kube_ca_file: Path = SERVICE_ACCOUNT_DIR / "ca.crt"
    kube_insecure_skip_tls_verify: bool = False
    kube_timeout_s: float = 10.0
    kube_poll_interval_s: float = 10.0
    kube_metadata_ttl_s: float = 3600.0
    kube_pod_labels: tuple[str, ...] = ()  # wattprobe_pod_info allow-list; empty: no such metric
    podresources_socket: Path | None = PODRESOURCES_SOCKET  # None: PodResources off
    cdi_spec_dirs: tuple[Path, ...] = CDI_SPEC_DIRS  # DRA claims' CDI devices -> GPUs
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES  # device plugin resources: GPUs
    source_timeout_s: float | None = None  # None: half the interval, at least MIN_SOURCE_TIMEOUT_S
    # the --showback.* flags (validated) and the file whose values win over them
    showback: Showback = field(default_factory=Showback)
    showback_config_file: Path | None = None

    def collector_on(self, name: str) -> bool:
        """Whether --collector.NAME is on. The defaults are resolved once, by the registry
        (Registry.resolve: the CLI, wiring and `check` do it), into the set of enabled names; a
        Config that still says "each one's default" (None) cannot answer here."""
        if self.collectors is None:
            raise ValueError(
                f"collector {name!r}: the Config's collectors are not resolved "
                "(exporter/app/registry.py: Registry.resolve)"
            )
        return name in self.collectors

    @property
    def cgroup_root(self) -> Path:
        return self.cgroupfs if self.cgroupfs is not None else self.sysfs / "fs" / "cgroup"

    @property
    def read_timeout_s(self) -> float:
        """How long each interval waits for its source reads (exporter/accounting/deadline.py)."""
        if self.source_timeout_s is not None:
            return self.source_timeout_s
        return max(self.interval_s / 2, MIN_SOURCE_TIMEOUT_S)
