"""The report's PromQL over wattprobe's raw series (not the recording rules), evaluated at the end
of one chunk (a UTC day) with the chunk's length as the range, kept per node so the node's
factors (PUE, price, carbon intensity) apply before anything is summed across nodes. Node means
(cluster, node): two clusters may both have a node "worker-1"."""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP = "1m"  # GPU hours are counted minute by minute
STEP_MS = 60_000
PRICE = "wattprobe_energy_price_per_kwh"
IDLE_UTILIZATION = "0.01"  # the WattprobeGpuIdleWhileAllocated alert's threshold
DEVICE = "gpu_instance, mig_device"  # which MIG device of the GPU ("" for the whole GPU)


def node_matcher(nodes: list[str]) -> str:
    return (
        'node=~"'
        + "|".join(re.escape(n).replace("\\", "\\\\").replace('"', '\\"') for n in nodes)
        + '"'
    )


@dataclass(frozen=True)
class Queries:
    """Every expression of one chunk: `selector` holds the user's matchers plus the node batch."""

    selector: str
    range_ms: int
    idle_for_ms: int

    def _sel(self, *extra: str) -> str:
        return "{" + ", ".join(m for m in (self.selector, *extra) if m) + "}"

    @property
    def _range(self) -> str:
        return f"[{self.range_ms}ms]"

    @property
    def _minutes(self) -> str:
        # the chunk's minute points (start, end]: one short of the range, so the point at the
        # start (the previous chunk's last) is not counted twice, under left-closed ranges
        # (Prometheus 2) and left-open ones (3) alike
        return f"[{self.range_ms - 1}ms:{STEP}]"

    def _over(self, by: str, agg: str, fn: str, metric: str) -> str:
        """`agg by (by) (fn(metric{selector}[chunk]))`."""
        return f"{agg} by ({by}) ({fn}({metric}{self._sel()}{self._range}))"

    def pod_energy(self) -> str:
        return self._over(
            "cluster, node, namespace", "sum", "increase", "wattprobe_pod_energy_joules_total"
        )

    def node_energy(self) -> str:
        return self._over(
            "cluster, node, zone", "sum", "increase", "wattprobe_node_energy_joules_total"
        )

    def attributed_zones(self) -> str:
        # zone kinds split among workloads: those with pod or container series (the
        # pseudo-containers system_processes and kernel_processes are always served)
        name = '__name__=~"wattprobe_(pod|container)_energy_joules_total"'
        return f"count by (cluster, node, zone) (last_over_time({self._sel(name)}{self._range}))"

    def gpu_energy(self) -> str:
        return self._over("cluster, node", "sum", "increase", "wattprobe_gpu_energy_joules_total")

    def factor(self, metric: str) -> str:
        return self._over("cluster, node", "avg", "avg_over_time", metric)

    def energy_price(self) -> str:
        return self._over("cluster, node, currency", "avg", "avg_over_time", PRICE)

    def energy_price_samples(self) -> str:
        return self._over("cluster, node, currency", "sum", "count_over_time", PRICE)

    def gpu_models(self) -> str:
        return self._over(
            "cluster, node, uuid, model", "max", "last_over_time", "wattprobe_gpu_info"
        )

    def gpu_hour_price(self) -> str:
        return (
            "avg by (cluster, node, currency, model, resource) "
            f"(avg_over_time(wattprobe_gpu_hour_price{self._sel()}{self._range}))"
        )

    def _allocations(self, *matchers: str, by: str = "") -> str:
        # a pod holds a GPU (or MIG device) once however many of its containers share it
        labels = ", ".join(x for x in ("cluster, node, namespace, pod, uuid", by) if x)
        held = self._sel('uuid!=""', *matchers)
        return f"max by ({labels}) (wattprobe_gpu_allocation_info{held})"

    def gpu_minutes(self) -> str:
        """Minutes each (node, namespace, GPU or MIG device) was allocated, once per pod
        holding it."""
        held = self._allocations(by=DEVICE)
        by = f"cluster, node, namespace, uuid, {DEVICE}"
        return f"sum by ({by}) (count_over_time(({held}){self._minutes}))"

    def mig_resources(self) -> str:
        """The resource each MIG device was allocated as (its price per resource)."""
        held = self._sel('uuid!=""', 'mig_device!=""', 'resource!=""')
        return (
            "max by (cluster, node, uuid, mig_device, resource) "
            f"(last_over_time(wattprobe_gpu_allocation_info{held}{self._range}))"
        )

    def mig_shares(self) -> str:
        """Each MIG GPU instance's share of its GPU (its price from the GPU's)."""
        return self._over(
            "cluster, node, uuid, gpu_instance",
            "max",
            "last_over_time",
            "wattprobe_gpu_mig_slice_ratio",
        )

    def idle_gpu_minutes(self) -> str:
        """Minutes of allocation while WattprobeGpuIdleWhileAllocated fires: its condition
        (allocated, at most 1% busy over 5 minutes) true at every minute from idle_for ago to
        now."""
        # whole GPUs only: NVML reports no utilization in MIG mode (as the showback rules)
        whole = self._allocations('mig_device=""')
        idle = (
            f"{whole} * on (uuid) group_left () "
            f"(max by (uuid) (max_over_time(wattprobe_gpu_utilization_ratio{self._sel()}[5m])) "
            f"< {IDLE_UTILIZATION})"
        )
        # The alert fires once `t - ActiveAt >= for`: its condition true at the minute `for`
        # before t and at every minute since, for/1m + 1 points (true from 0m: firing from 60m,
        # not 59m). The window holds exactly those points, under left-closed and left-open
        # ranges alike (tests/app/report/test_idle_minutes.py).
        points = self.idle_for_ms // STEP_MS + 1
        window_ms = self.idle_for_ms + STEP_MS - 1
        held = f"count_over_time(({idle})[{window_ms}ms:{STEP}]) >= {points}"
        return f"sum by (cluster, node, namespace, uuid) (count_over_time(({held}){self._minutes}))"

    def nodes(self) -> str:
        return self._over("node", "count", "last_over_time", "wattprobe_node_energy_joules_total")
