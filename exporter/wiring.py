"""Builds the sources and the monitor a Config asks for."""

from __future__ import annotations

import logging
from functools import partial

from exporter.config import ActivitySource as ActivityChoice
from exporter.config import Config
from exporter.monitor import ActivitySource, Monitor, MonitorSettings, PowerSource
from exporter.progress import Progress
from exporter.sources.estimate import CpuPowerModel
from exporter.sources.hwmon import HwmonSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.procfs import ProcfsSource
from exporter.sources.rapl import RaplSource

log = logging.getLogger(__name__)


def power_sources(config: Config) -> list[PowerSource]:
    sources: list[PowerSource] = []
    if config.enabled("rapl"):
        sources.append(RaplSource(config.sysfs))
    if config.enabled("hwmon"):
        sources.append(HwmonSource(config.sysfs))
    return sources


def activity_source(config: Config, procfs: ProcfsSource) -> ActivitySource:
    if config.activity_source is ActivityChoice.EBPF:
        raise NotImplementedError("the eBPF activity source is not built yet")
    return procfs


def build_monitor(config: Config, progress: Progress | None = None) -> Monitor:
    """progress: where slow start-up work reports what it waits for, e.g.
    `with progress.step("compiling eBPF programs"): ...` (None: plain log lines)."""
    procfs = ProcfsSource(config.procfs)
    model = None
    if config.enabled("estimate"):
        model = partial(
            CpuPowerModel.for_cpus, idle_w=config.estimate_idle_w, max_w=config.estimate_max_w
        )
    return Monitor(
        cpu=procfs,
        activity=activity_source(config, procfs),
        power_sources=power_sources(config),
        cpu_model=model,
        settings=MonitorSettings(
            idle_power=config.power_idle,
            idle_policy=config.attribution_idle,
            attribution_zones=config.attribution_zones,
            with_processes=config.enabled("process"),
            retention_s=config.retention_s,
        ),
        gpus=NvmlSource(config.procfs) if config.enabled("nvml") else None,
    )
