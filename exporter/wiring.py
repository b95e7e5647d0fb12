"""Builds the sources and the monitor a Config asks for."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from exporter.accounting.monitor import ActivitySource, Monitor, MonitorSettings, PowerSource
from exporter.cgroupfs.ns import namespace_root
from exporter.config import ActivitySource as ActivityChoice
from exporter.config import Config
from exporter.gpu.backend import GpuBackend, LatestReadings
from exporter.progress import Progress
from exporter.readings import SourceError, SourceStatus
from exporter.registry import PROCESS, REGISTRY, Registry
from exporter.sources.drm.source import SPEC as DRM
from exporter.sources.drm.source import DrmSource
from exporter.sources.ebpf.load import FIXES as EBPF_FIXES
from exporter.sources.ebpf.load import LOAD_FAILED
from exporter.sources.ebpf.source import NAME as EBPF
from exporter.sources.ebpf.source import EbpfSource
from exporter.sources.estimate import SPEC as ESTIMATE
from exporter.sources.estimate import NodeModels
from exporter.sources.nvml.check import SPEC as NVML
from exporter.sources.nvml.source import NvmlSource
from exporter.sources.procfs.source import ProcfsSource, gpu_pid_owners
from exporter.sources.procfs.visible import VisibleProcfs
from exporter.workloads.gpus import NvmlDirectory
from exporter.workloads.kube import KubeWorkloads

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A source the configuration insists on cannot start: the exporter exits with this line."""


def power_sources(config: Config, registry: Registry = REGISTRY) -> list[PowerSource]:
    """The power sources read every interval, in registry order (each SPEC's build)."""
    return list(registry.power_sources(config))


def activity_source(
    config: Config, procfs: ProcfsSource, progress: Progress | None = None
) -> tuple[ActivitySource, tuple[SourceStatus, ...]]:
    """The activity source, and eBPF's start-up failure when auto fell back to procfs.

    /proc/stat (node busy/idle) comes from procfs whichever source measures tasks.
    """
    if config.activity_source is ActivityChoice.PROCFS:
        return procfs, ()
    try:
        # bcc compiles the programs here: seconds on a busy node, so it shows as a step
        with (progress or Progress()).step("compiling and loading the eBPF programs"):
            ebpf = EbpfSource.start(
                config.procfs,
                config.cgroup_root,
                config.ebpf_kernel_headers,
                config.ebpf_gpu_ioctls.wanted,
                # per-process map entries only when per-process metrics are wanted
                per_process=REGISTRY.enabled(config, PROCESS),
            )
        return ebpf, ()
    except Exception as exc:
        error = exc if isinstance(exc, SourceError) else SourceError(LOAD_FAILED, repr(exc))
        if not isinstance(exc, SourceError):
            log.debug("eBPF load failed unexpectedly", exc_info=True)
    fix = EBPF_FIXES.get(error.reason, "")
    if config.activity_source is ActivityChoice.EBPF:
        raise StartupError(
            f"--activity.source ebpf: {error.reason}: {error.detail}"
            + (f"; fix: {fix}" if fix else "")
        )
    log.warning(
        "eBPF activity source unavailable (%s: %s); using procfs. Fix: %s",
        error.reason,
        error.detail,
        fix or "see `wattprobe check`",
    )
    return procfs, (SourceStatus(EBPF, False, error.reason, error.detail),)


@dataclass(frozen=True)
class Parts:
    """What a Config asks for, built and not started: the monitor, the Kubernetes threads
    (names, PodResources) and the activity source (eBPF holds programs and maps). The owner
    starts and closes them (exporter/agent.py)."""

    monitor: Monitor
    kube: KubeWorkloads
    activity: ActivitySource

    def start(self) -> None:
        """Start the Kubernetes threads (pod names, PodResources)."""
        self.kube.start()

    def close(self) -> None:
        """Release everything the parts hold, once the monitor's loop has ended: NVML and its
        event thread, the source reader threads, the eBPF programs and maps, the Kubernetes
        threads and the PodResources connection (stopping is safe when never started)."""
        self.monitor.close()
        if isinstance(self.activity, Closeable):
            self.activity.close()
        self.kube.stop()


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None: ...


def build(config: Config, progress: Progress | None = None) -> Parts:
    """progress: where slow start-up work (compiling the eBPF programs) reports what it waits
    for; None: plain log lines. Starts no thread."""
    with_processes = REGISTRY.enabled(config, PROCESS)
    # per process only when processes are exported; else per cgroup where cgroupfs has totals
    ns_root = namespace_root(config.cgroup_root)
    procfs = ProcfsSource(
        config.procfs,
        ns_root,
        cgroupfs=config.cgroup_root,
        per_process=with_processes,
    )
    model = None
    if REGISTRY.enabled(config, ESTIMATE.name):
        model = NodeModels(config)
    activity, startup_statuses = activity_source(config, procfs, progress)
    if activity is procfs and not procfs.per_cgroup:
        # under hidepid, say so rather than bill our own processes alone
        activity = VisibleProcfs(procfs.tasks, config.procfs)
    kube = KubeWorkloads.from_config(config)  # pod names and GPU holders
    gpus = (
        LatestReadings(NvmlSource(config.procfs)) if REGISTRY.enabled(config, NVML.name) else None
    )
    # AMD and Intel GPUs beside NVIDIA's: their indexes follow NVML's (exporter/gpu/merge.py)
    backends: list[GpuBackend] = [gpus] if gpus is not None else []
    if REGISTRY.enabled(config, DRM.name):
        backends.append(DrmSource(config.sysfs, config.procfs))
    monitor = Monitor(
        cpu=procfs,
        activity=activity,
        power_sources=power_sources(config),
        cpu_model=model,
        settings=MonitorSettings(
            idle_power=config.power_idle,
            idle_policy=config.attribution_idle,
            attribution_zones=config.attribution_zones,
            with_processes=with_processes,
            retention_s=config.retention_s,
            read_timeout_s=config.read_timeout_s,
        ),
        gpus=backends[0] if backends else None,
        more_gpus=backends[1:],
        startup_statuses=startup_statuses,
        gpu_holders=kube.gpu_holders,
        # GPU processes the task list lacks (per-cgroup tasks): their container from /proc
        gpu_pids=gpu_pid_owners(config.procfs, ns_root).resolve if backends else None,
        names=kube.names,
        status_providers=[kube.statuses],
        pod_info=kube.pod_info,
        gpu_allocations=kube.gpu_allocations,
    )
    # PodResources names GPUs by UUID, index or minor number: the GPU backend's last read ties
    # them together
    kube.set_gpu_directory(NvmlDirectory(config.procfs, gpus.gpus if gpus else tuple))
    return Parts(monitor, kube, activity)


def build_monitor(config: Config, progress: Progress | None = None) -> Monitor:
    """A monitor with its Kubernetes threads started (daemon threads, left to the process's
    end): for tests and benchmarks; `serve` uses exporter/agent.py and `top` its MonitorFeed,
    which close all."""
    parts = build(config, progress)
    parts.start()
    return parts.monitor
