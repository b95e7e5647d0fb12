"""Every source the exporter knows, in preference order: one entry per source module's SPEC.

Adding a source is its module (with a SPEC, exporter/sourcespec.py) and one line in REGISTRY:
the --collector.NAME flag, its default, the power sources built, the `check` entry and fixes,
the zones split among workloads and `top`'s source order all follow from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config import Config
from exporter.sources import estimate, hwmon, rapl
from exporter.sources.drm import source as drm
from exporter.sources.ebpf import source as ebpf
from exporter.sources.nvml import check as nvml_check
from exporter.sources.procfs import source as procfs
from exporter.sourcespec import POWER, PowerReader, SourceSpec
from exporter.workloads import check as check_kube

# Collectors that switch an output rather than a source: (name, default, help).
PROCESS = "process"
# Per-container series of pods' containers: off by default so that a pod costs a few series
# (its pod series; docs/metrics.md counts them). The pseudo-containers (host processes, kernel
# threads) are node-level and always served.
CONTAINER = "container"
SWITCHES: tuple[tuple[str, bool, str], ...] = (
    (PROCESS, False, "the process collector"),
    (CONTAINER, False, "per-container series of pods' containers"),
)


@dataclass(frozen=True)
class Registry:
    """Specs in order: power sources earlier in the list are preferred for workload zones, and
    `check` reports in this order."""

    specs: tuple[SourceSpec, ...]
    switches: tuple[tuple[str, bool, str], ...] = SWITCHES

    def with_source(self, spec: SourceSpec, before: str | None = None) -> Registry:
        """A registry with one more source, appended or placed before the named one."""
        if any(s.name == spec.name for s in self.specs):
            raise ValueError(f"a source named {spec.name!r} is registered already")
        specs = list(self.specs)
        at = next((i for i, s in enumerate(specs) if s.name == before), len(specs))
        specs.insert(at, spec)
        return Registry(tuple(specs), self.switches)

    @property
    def collector_defaults(self) -> dict[str, bool]:
        """--collector.NAME flags and their defaults."""
        flags = {s.name: s.default_on for s in self.specs if s.default_on is not None}
        flags.update((name, on) for name, on, _help in self.switches)
        return flags

    @property
    def collector_aliases(self) -> dict[str, tuple[str, ...]]:
        """Older names of --collector.NAME flags, by the current name."""
        return {s.name: s.flag_aliases for s in self.specs if s.flag_aliases}

    def collector_help(self, name: str) -> str:
        help_texts = {n: h for n, _on, h in self.switches}
        return help_texts.get(name, f"the {name} collector")

    def enabled(self, config: Config, name: str) -> bool:
        """Whether --collector.NAME is on (its default when the Config names no collectors)."""
        if config.collectors is None:
            return self.collector_defaults[name]
        return name in config.collectors

    def power_sources(self, config: Config) -> list[PowerReader]:
        """The power sources read every interval, built from the configuration."""
        return [
            s.build(config)
            for s in self.specs
            if s.kind == POWER and s.build is not None and self.enabled(config, s.name)
        ]

    @property
    def zone_preferences(self) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
        """(source label, zone groups) for exporter/accounting/zones.py, most preferred first."""
        return tuple((s.zone_label, s.workload_zones) for s in self.specs if s.workload_zones)

    @property
    def source_order(self) -> dict[str, int]:
        """Power sources' labels -> their place, for `top`'s zone table."""
        labels = [s.zone_label for s in self.specs if s.kind == POWER]
        return {label: i for i, label in enumerate(labels)}

    def fixes(self) -> dict[tuple[str, str], str]:
        """(source, reason) -> what to do, as `check` prints it."""
        return {(s.name, r): fix for s in self.specs for r, fix in s.fixes.items()}


# activity sources, then power sources in preference order, then GPUs and identity
REGISTRY = Registry(
    (
        procfs.SPEC,
        ebpf.SPEC,
        rapl.SPEC,
        hwmon.SPEC,
        estimate.SPEC,
        nvml_check.SPEC,
        drm.SPEC,
        check_kube.SPEC,
    )
)
