"""Every source the exporter knows, in preference order: one entry per source module's SPEC.

Adding a source is its module (with a SPEC, exporter/model/spec.py) and one line in REGISTRY:
the --collector.NAME flag, its default, the power sources built, the `check` entry and fixes,
the zones split among workloads and `top`'s source order all follow from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from exporter.accounting.zones import ZoneFill
from exporter.kube import check as check_kube
from exporter.model.config import Config
from exporter.model.ports import GpuBackend, PowerSource
from exporter.model.spec import GPU, POWER, BuildContext, SourceSpec
from exporter.sources.activity.ebpf import source as ebpf
from exporter.sources.activity.procfs import source as procfs
from exporter.sources.gpu.drm import source as drm
from exporter.sources.gpu.nvml import check as nvml_check
from exporter.sources.power import estimate, hwmon, rapl

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

    def resolve(self, config: Config) -> Config:
        """The Config with its collectors resolved: the set of enabled --collector.NAME flags,
        each one's default where the Config names none. The one place defaults are applied;
        everything after asks config.collector_on(NAME)."""
        if config.collectors is not None:
            return config
        on = frozenset(name for name, default in self.collector_defaults.items() if default)
        return replace(config, collectors=on)

    def enabled(self, config: Config, name: str) -> bool:
        """Whether --collector.NAME is on (its default when the Config names no collectors)."""
        return self.resolve(config).collector_on(name)

    def _on(self, config: Config, kind: str) -> list[SourceSpec]:
        return [s for s in self.specs if s.kind == kind and self.enabled(config, s.name)]

    def power_sources(self, config: Config) -> list[PowerSource]:
        """The power sources read every interval, built from the configuration."""
        context = self.build_context(config)
        return [s.build(config, context) for s in self._on(config, POWER) if s.build is not None]

    def build_context(self, config: Config) -> BuildContext:
        """What a source's build and probe get from the other enabled sources."""
        return BuildContext(
            gpu_metered_pci=self._gpu_metered_pci(config),
            device_plugins=tuple(p for s in self._on(config, GPU) for p in s.device_plugins),
        )

    def gpu_backends(self, config: Config) -> list[GpuBackend]:
        """The GPU backends read every interval, in registry order (the first is the primary:
        its GPUs keep their indexes; exporter/accounting/gpu_merge.py)."""
        return [s.gpu_backend(config) for s in self._on(config, GPU) if s.gpu_backend is not None]

    def _gpu_metered_pci(self, config: Config) -> Callable[[], frozenset[str]]:
        found = [s.gpu_metered_pci(config) for s in self._on(config, GPU) if s.gpu_metered_pci]

        def metered() -> frozenset[str]:
            return frozenset().union(*(f() for f in found))

        return metered

    @property
    def fallback_sources(self) -> frozenset[str]:
        """Power sources read only until a measured one has read (the estimate)."""
        return frozenset(s.name for s in self.specs if s.fallback)

    @property
    def zone_fills(self) -> tuple[ZoneFill, ...]:
        """The zone kinds each fallback source fills beside measured sources (the estimate's
        dram where the measured source has none: exporter/accounting/zones.py)."""
        return tuple(
            ZoneFill(s.name, s.zone_label, s.fills_zones)
            for s in self.specs
            if s.fallback and s.fills_zones
        )

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
