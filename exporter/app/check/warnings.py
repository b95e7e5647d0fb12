"""Warnings of `wattprobe check` about the configuration itself: what works but is not fit for
every use. They do not change the exit status."""

from __future__ import annotations

from exporter.app.registry import PROCESS, REGISTRY
from exporter.model.config import Config

# Measured against the kernel's cpu.stat (docs/attribution.md, "Error against cpu.stat"): with
# host work, short-lived work and late reads, per-process attribution is off by tens of per cent
# per container, while the default per-cgroup path is within 1 %. (A process moving between
# containers, once -100 % / +94 %, is re-read at once since issue 27: +21 % left, as steady.)
# So per-process series are for finding which process spends, not for billing.
PROCESS_NOT_FOR_BILLING = (
    "--collector.process: per-process attribution is not for billing (measured +7 % to +63 % "
    "per container against cpu.stat with host work, short-lived processes and late reads on a "
    "loaded node; the default per-cgroup path stays within 1 %): bill from an exporter "
    "without it (docs/attribution.md, Error against cpu.stat)"
)


def config_warnings(config: Config) -> list[str]:
    out = []
    if REGISTRY.enabled(config, PROCESS):
        out.append(PROCESS_NOT_FOR_BILLING)
    return out
