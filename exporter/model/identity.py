"""Who energy is attributed to: container references, the pseudo-containers, and the names
Kubernetes gives them. The bottom layer: sources, workloads, attribution and the monitor all use
these, so this module imports nothing of the exporter's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

SYSTEM_PROCESSES = "system_processes"
KERNEL_PROCESSES = "kernel_processes"


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A container-like bucket that energy is attributed to. Hashable: used as a key."""

    container_id: str = ""  # runtime's 64-hex id; "" for pseudo-containers and pod-level tasks
    pod_uid: str = ""  # with dashes; "" outside pods
    runtime: str = ""
    qos: str = ""  # guaranteed, burstable, besteffort for pods
    pseudo: str = ""  # system_processes, kernel_processes, or ""
    # Computed once: refs key the per-task and per-container maps of every interval (tens of
    # thousands of lookups), and the generated __hash__ would rebuild a tuple for each.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        fields = (self.container_id, self.pod_uid, self.runtime, self.qos, self.pseudo)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[ContainerRef], tuple[str, str, str, str, str]]:
        # str hashes differ between processes: an unpickled ref computes its own
        return ContainerRef, (self.container_id, self.pod_uid, self.runtime, self.qos, self.pseudo)

    @property
    def name_hint(self) -> str:
        """What the container label shows before Kubernetes names are known."""
        return self.pseudo


SYSTEM = ContainerRef(pseudo=SYSTEM_PROCESSES)
KERNEL = ContainerRef(pseudo=KERNEL_PROCESSES)


class WorkloadNames(Protocol):
    """Kubernetes names for containers and pods; empty strings where unknown."""

    def container(self, ref: ContainerRef) -> tuple[str, str, str]:
        """(namespace, pod, container)"""
        ...

    def pod(self, pod_uid: str) -> tuple[str, str]:
        """(namespace, pod)"""
        ...


class NoNames:
    """Before pod metadata exists: pseudo-containers carry their name, the rest only their IDs."""

    def container(self, ref: ContainerRef) -> tuple[str, str, str]:
        return "", "", ref.pseudo

    def pod(self, pod_uid: str) -> tuple[str, str]:
        return "", ""
