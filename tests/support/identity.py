"""A pod-identity source for monitor tests (exporter/model/ports.py PodIdentity): fixed answers,
or functions that may fail as a real background source's accessor can."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter.model.identity import ContainerRef, NoNames, WorkloadNames
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import GpuAllocation, PodInfo


@dataclass
class StaticIdentity:
    names: WorkloadNames = field(default_factory=NoNames)
    holders: Callable[[str], Sequence[ContainerRef]] | None = None
    status_providers: Sequence[Callable[[], Sequence[SourceStatus]]] = ()
    pods: Callable[[], Sequence[PodInfo]] = lambda: ()
    allocations: Callable[[], Sequence[GpuAllocation]] = lambda: ()

    def statuses(self) -> Sequence[SourceStatus]:
        out: list[SourceStatus] = []
        for provider in self.status_providers:
            out.extend(provider())
        return out

    def gpu_holders(self, uuid: str) -> Sequence[ContainerRef]:
        return self.holders(uuid) if self.holders is not None else ()

    def pod_info(self) -> Sequence[PodInfo]:
        return self.pods()

    def gpu_allocations(self) -> Sequence[GpuAllocation]:
        return self.allocations()

    def cdi_rejections(self) -> Sequence[tuple[str, int]]:
        return ()
