"""Several GPU backends on one node (NVML and DRM): their readings merged into one GpuReadings.

The first (primary) backend's GPUs keep their own indexes, so an NVIDIA node's `gpu` labels are
NVML's indexes exactly as without other backends. The other backends' GPUs get indexes after
the highest primary index seen so far, once per GPU (by uuid: the PCI address for DRM GPUs) and
kept while the exporter runs, so a backend that misses an interval does not renumber anything.
Should the primary later report an index already given away (it could not be read when the
other GPU was first seen), the primary keeps it and the other GPU is renumbered, with a warning:
`gpu` label values never collide. Versions and XID watching are the primary's; on a node where
the primary reads nothing, the first backend that reads gives them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from exporter.model.gpu_readings import GpuReading, GpuReadings

log = logging.getLogger(__name__)


class GpuMerge:
    def __init__(self) -> None:
        self._assigned: dict[str, int] = {}  # uuid -> index, for the other backends' GPUs
        self._primary_max = -1
        self._primary_versions: tuple[str, str, str] | None = None

    def merge_stamped(
        self, outcomes: Sequence[tuple[GpuReadings | None, float]], now: float
    ) -> tuple[GpuReadings | None, float]:
        """The backends' (readings, read time) merged, with the time the merged readings stand
        for: the primary's, or when it read nothing the first other backend's that read."""
        if not outcomes:
            return None, now
        primary, stamp = outcomes[0]
        if len(outcomes) == 1:
            return primary, stamp
        if primary is None:
            stamp = next((s for r, s in outcomes[1:] if r is not None), now)
        return self.merge([r for r, _ in outcomes]), stamp

    def merge(self, readings: Sequence[GpuReadings | None]) -> GpuReadings | None:
        """One GpuReadings from the backends' (None: that backend read nothing this interval)."""
        if not readings or all(r is None for r in readings):
            return None
        primary = readings[0]
        gpus: list[GpuReading] = list(primary.gpus) if primary is not None else []
        taken = {g.index for g in gpus}
        self._primary_max = max([self._primary_max, *taken])
        for uuid, index in list(self._assigned.items()):
            if index in taken:
                log.warning(
                    "GPU %s: index %d is the primary backend's now; renumbered", uuid, index
                )
                del self._assigned[uuid]
        for other in readings[1:]:
            for gpu in other.gpus if other is not None else ():
                gpus.append(replace(gpu, index=self._index(gpu.uuid or gpu.pci_bus_id, taken)))
        if primary is not None:
            self._primary_versions = (
                primary.driver_version,
                primary.nvml_version,
                primary.cuda_version,
            )
        first = next(r for r in readings if r is not None)
        driver, library, runtime = self._primary_versions or (
            first.driver_version,
            first.nvml_version,
            first.cuda_version,
        )
        return GpuReadings(
            driver_version=driver,
            nvml_version=library,
            cuda_version=runtime,
            gpus=tuple(gpus),
            event_watch=primary.event_watch if primary is not None else None,
        )

    def _index(self, uuid: str, taken: set[int]) -> int:
        index = self._assigned.get(uuid)
        if index is None:
            used = taken | set(self._assigned.values())
            index = max([self._primary_max, *used]) + 1
            self._assigned[uuid] = index
        return index
