"""One day's answers for a batch of nodes, keyed by node: what compute works on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from typing import NamedTuple

J_PER_KWH = Fraction(3_600_000)
NODE_ROW = "(node)"  # what stays on the node: not a namespace
GPU_ZONE = "gpu"
# a GPU priced by its model first; else by the device plugin's resource for a whole GPU (also
# what the NVIDIA device plugin's single MIG strategy names MIG devices: never a slice's price)
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
# a MIG share is n/7 or n/4 (wattprobe_gpu_mig_slice_ratio): read back exactly from its float
MAX_SHARE_DENOMINATOR = 64
ZERO = Fraction(0)


class Held(NamedTuple):
    """What a namespace held on a node: a whole GPU (gpu_instance and mig_device "") or a MIG
    device on it."""

    node: str
    namespace: str
    uuid: str
    gpu_instance: str = ""
    mig_device: str = ""


@dataclass(frozen=True)
class GpuPrice:
    currency: str
    model: str
    resource: str
    per_hour: Fraction


@dataclass(frozen=True)
class Chunk:
    """One day's answers for a batch of nodes, keyed by node (and namespace, zone, GPU)."""

    day: date
    pod_j: Mapping[tuple[str, str], Fraction]  # (node, namespace)
    node_zone_j: Mapping[tuple[str, str], Fraction]  # (node, zone)
    attributed: frozenset[tuple[str, str]]  # (node, zone) split among workloads
    gpu_j: Mapping[str, Fraction]
    pue: Mapping[str, Fraction]
    carbon: Mapping[str, Fraction]  # gCO2e per kWh
    price: Mapping[str, Mapping[str, Fraction]]  # node -> currency -> price per kWh
    gpu_minutes: Mapping[Held, Fraction]
    idle_minutes: Mapping[tuple[str, str, str], Fraction]  # (node, namespace, uuid): whole GPUs
    gpu_model: Mapping[tuple[str, str], str]  # (node, uuid)
    gpu_prices: Mapping[str, tuple[GpuPrice, ...]]
    # (node, uuid, mig_device) -> the resource a MIG device was allocated as
    mig_resource: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    # (node, uuid, gpu_instance) -> the MIG GPU instance's share of its GPU
    mig_share: Mapping[tuple[str, str, str], Fraction] = field(default_factory=dict)

    def node_energy(self, node: str) -> Fraction:
        """The node's IT energy: its zone kinds split among workloads, plus its GPUs."""
        return self.node_energies().get(node, ZERO)

    def node_energies(self) -> dict[str, Fraction]:
        """node_energy of every node with measured energy, in one pass."""
        out = dict.fromkeys(self.nodes, ZERO)
        for (node, zone), joules in self.node_zone_j.items():
            if (node, zone) in self.attributed and zone != GPU_ZONE:
                out[node] += joules
        for node, joules in self.gpu_j.items():
            out[node] += joules
        return out

    def pods_by_node(self) -> dict[str, dict[str, Fraction]]:
        """node -> namespace -> pod energy, in one pass."""
        out: dict[str, dict[str, Fraction]] = defaultdict(dict)
        for (node, namespace), joules in self.pod_j.items():
            out[node][namespace] = joules
        return dict(out)

    @property
    def nodes(self) -> frozenset[str]:
        """Nodes with measured energy in this chunk."""
        return frozenset(n for n, _ in self.node_zone_j) | frozenset(self.gpu_j)
