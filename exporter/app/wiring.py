"""Builds the sources and the monitor a Config asks for."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from exporter.accounting.monitor import Monitor, MonitorParts, MonitorSettings
from exporter.app.progress import Progress
from exporter.app.registry import PROCESS, REGISTRY, Registry
from exporter.host.cgroupfs.ns import namespace_root
from exporter.kube.gpus import BackendDirectory
from exporter.kube.kube import KubeWorkloads
from exporter.kube.nodelabels import with_node_instance_type
from exporter.model.config import ActivitySource as ActivityChoice
from exporter.model.config import Config
from exporter.model.ports import ActivitySource, PowerSource
from exporter.model.readings import MapStats, SourceError, SourceStatus, TaskSample
from exporter.sources.activity.ebpf.load import FIXES as EBPF_FIXES
from exporter.sources.activity.ebpf.load import LOAD_FAILED
from exporter.sources.activity.ebpf.source import NAME as EBPF
from exporter.sources.activity.ebpf.source import EbpfSource
from exporter.sources.activity.procfs.source import ProcfsSource, gpu_pid_owners
from exporter.sources.activity.procfs.visible import VisibleProcfs
from exporter.sources.gpu.backend import LatestGpus
from exporter.sources.power.estimate import ESTIMATED

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A source the configuration insists on cannot start: the exporter exits with this line."""


def power_sources(config: Config, registry: Registry = REGISTRY) -> list[PowerSource]:
    """The power sources read every interval, in registry order (each SPEC's build)."""
    return list(registry.power_sources(config))


class KernelTotals:
    """The eBPF source's default: per-container CPU time from the kernel's own cgroup totals
    (the procfs source's cgroup tree: cpu.stat, cpuacct.usage, and the host's rest), GPU ioctls
    per process from the probes. The kernel already sums every task's run time per cgroup, so no
    program runs on each context switch to sum it again (docs/ebpf.md). One read is both: the
    monitor reads it under one deadline, and both halves cover the same time."""

    def __init__(self, cpu: ProcfsSource, probes: EbpfSource) -> None:
        self.name = probes.name  # what the node runs: eBPF, with the kernel's totals
        self.probes = probes
        self._cpu = cpu

    def tasks(self) -> list[TaskSample]:
        # the probes first: their cgroup_mkdir paths say whether the tree must be listed again
        probes = self.probes.tasks()
        return [*self._cpu.tasks(walk=self.probes.cgroups_made()), *probes]

    def map_stats(self) -> Sequence[MapStats]:
        return self.probes.map_stats()

    def close(self) -> None:
        self.probes.close()
        self._cpu.close()


def activity_source(
    config: Config, procfs: ProcfsSource, progress: Progress | None = None
) -> tuple[ActivitySource, tuple[SourceStatus, ...]]:
    """The activity source, and eBPF's start-up failure when auto fell back to procfs.

    /proc/stat (node busy/idle) comes from procfs whichever source measures tasks. eBPF runs a
    program on every context switch only for per-process series (--collector.process), or where
    the cgroup tree has no CPU totals to read; otherwise per-container CPU is the cgroups' own
    totals, beside the probes' GPU ioctls (KernelTotals).
    """
    config = REGISTRY.resolve(config)
    if config.activity_source is ActivityChoice.PROCFS:
        return procfs, ()
    per_process = config.collector_on(PROCESS) or not procfs.per_cgroup
    try:
        # bcc compiles the programs here: seconds on a busy node, so it shows as a step
        with (progress or Progress()).step("compiling and loading the eBPF programs"):
            ebpf = EbpfSource.start(
                config.procfs,
                config.cgroup_root,
                config.ebpf_kernel_headers,
                config.ebpf_gpu_ioctls.wanted,
                per_process=per_process,
            )
        return (ebpf if per_process else KernelTotals(procfs, ebpf)), ()
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
    starts and closes them (exporter/app/agent.py)."""

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
    config = REGISTRY.resolve(config)
    if config.collector_on(ESTIMATED):
        config = with_node_instance_type(config, os.environ)
    with_processes = config.collector_on(PROCESS)
    # per process only when processes are exported; else per cgroup where cgroupfs has totals
    ns_root = namespace_root(config.cgroup_root)
    procfs = ProcfsSource(
        config.procfs,
        ns_root,
        cgroupfs=config.cgroup_root,
        per_process=with_processes,
    )
    activity, startup_statuses = activity_source(config, procfs, progress)
    if activity is procfs and not procfs.per_cgroup:
        # under hidepid, say so rather than bill our own processes alone
        activity = VisibleProcfs(procfs.tasks, config.procfs)
    gpus = REGISTRY.gpu_backends(config)  # NVIDIA's first: the primary keeps its indexes
    # The monitor publishes each interval's merged GPUs; the directory built from them names
    # the GPUs that PodResources lists (by UUID, index, minor number, PCI address or card).
    latest = LatestGpus()
    context = REGISTRY.build_context(config)
    kube = KubeWorkloads.from_config(  # pod names and GPU holders
        config,
        gpu_directory=BackendDirectory(config.procfs, latest.gpus),
        device_plugins=context.device_plugins,
    )
    monitor = Monitor(
        MonitorParts(
            cpu=procfs,
            activity=activity,
            power=power_sources(config),
            gpus=gpus,
            identity=kube,
            gpu_pids=gpu_pid_owners(config.procfs, ns_root).resolve if gpus else None,
            startup_statuses=startup_statuses,
            on_gpus=latest.publish,
        ),
        MonitorSettings(
            idle_power=config.power_idle,
            idle_policy=config.attribution_idle,
            attribution_zones=config.attribution_zones,
            zone_preferences=REGISTRY.zone_preferences,
            fallback_sources=REGISTRY.fallback_sources,
            zone_fills=REGISTRY.zone_fills,
            with_processes=with_processes,
            retention_s=config.retention_s,
            read_timeout_s=config.read_timeout_s,
        ),
    )
    return Parts(monitor, kube, activity)


def build_monitor(config: Config, progress: Progress | None = None) -> Monitor:
    """A monitor with its Kubernetes threads started (daemon threads, left to the process's
    end): for tests and benchmarks; `serve` uses exporter/app/agent.py and `top` its MonitorFeed,
    which close all."""
    parts = build(config, progress)
    parts.start()
    return parts.monitor
