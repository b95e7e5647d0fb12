"""Showback: what each namespace's energy costs, in money and carbon, and what idle GPUs waste
(docs/showback.md).

Figures over the dashboard's range read the raw counters and the node's factor gauges, as the
billing tables and `wattprobe report` do, so they hold for any range; per-hour trends read the
recording rules of group wattprobe.showback.rules. The same definitions throughout:
- facility energy = IT energy x the node's PUE (wattprobe_node_pue);
- cost = facility energy (IT energy where the node has no PUE) x its price per kWh, per currency:
  never summed across currencies; a node without a price has no cost, never 0;
- carbon = the same energy x the node's grid intensity (gCO2e/kWh);
- GPU-hours: a pod holding a GPU or MIG device, counted at the dashboard's resolution
  ($__interval); a GPU's price per hour is its model's entry, else resource nvidia.com/gpu's (the
  recording rule node_uuid:wattprobe_gpu_hour_price:max), a MIG device's its resource's entry,
  else its share of its GPU's (node_uuid:wattprobe_mig_device_hour_price:max, its last value in
  the range: a device given back before the range's end keeps its price);
- idle-GPU waste: GPU-hours while WattprobeGpuIdleWhileAllocated fired (whole GPUs: NVML reports
  no utilization in MIG mode).
A factor that changed within the range applies as its average over the range.
"""

from __future__ import annotations

from collections.abc import Callable

from dashboards.grafana import JSON, Layout, Query, dashboard, table, timeseries

POD_ENERGY = "wattprobe_pod_energy_joules_total"
J_PER_KWH = "3.6e6"
MS_PER_HOUR = "3.6e6"
GPU_PRICE = "node_uuid:wattprobe_gpu_hour_price:max"
MIG_PRICE = "node_uuid:wattprobe_mig_device_hour_price:max"
ALLOCATION = "wattprobe_gpu_allocation_info"
IDLE_ALERT = 'alertname="WattprobeGpuIdleWhileAllocated", alertstate="firing"'
Selector = Callable[..., str]


class Showback:
    """The PromQL of the showback views, for one selector (cluster, node), matchers that pick
    pods (namespace, pod: not on the node's factor series) and an optional offset (the previous
    period: offset $__range)."""

    def __init__(self, sel: Selector, offset: str = "", pods: tuple[str, ...] = ()) -> None:
        self.sel = sel
        self.offset = f" offset {offset}" if offset else ""
        self.pods = pods

    def _factor(self, metric: str, *keep: str) -> str:
        by = ", ".join(("cluster", "node", *keep))
        return f"max by ({by}) (avg_over_time({metric}{self.sel()}[$__range]{self.offset}))"

    def joules(self, by: str) -> str:
        """Pod energy over the range per node and `by`: active and billed idle."""
        return (
            f"sum by (cluster, node, {by}) "
            f"(increase({POD_ENERGY}{self.sel(*self.pods)}[$__range]{self.offset}))"
        )

    def _billable(self, by: str) -> str:
        joules = self.joules(by)
        pue = self._factor("wattprobe_node_pue")
        return f"({joules} * on (cluster, node) group_left () {pue} or {joules})"

    def kwh(self, by: str) -> str:
        return f"sum by ({by}) ({self.joules(by)}) / {J_PER_KWH}"

    def estimated_kwh(self, by: str) -> str:
        """The part of kwh(by) from zones modelled on their node (source="estimated": all of a
        node without sensors, or its memory beside a sensor without a dram zone); 0, never
        missing, where there is none. A zone is modelled where its node has a model idle
        baseline for it (wattprobe_idle_power_watts{source="estimated"})."""
        pods = (
            f"sum by (cluster, node, zone, {by}) "
            f"(increase({POD_ENERGY}{self.sel(*self.pods)}[$__range]{self.offset}))"
        )
        estimated = self.sel('source="estimated"')
        modelled = (
            "group by (cluster, node, zone) (last_over_time(wattprobe_idle_power_watts"
            f"{estimated}[$__range]{self.offset}))"
        )
        return (
            f"(sum by ({by}) ({pods} * on (cluster, node, zone) group_left () {modelled})"
            f" or sum by ({by}) ({pods}) * 0) / {J_PER_KWH}"
        )

    def facility_kwh(self, by: str) -> str:
        pue = self._factor("wattprobe_node_pue")
        return (
            f"sum by ({by}) ({self.joules(by)} * on (cluster, node) group_left () {pue}) "
            f"/ {J_PER_KWH}"
        )

    def cost(self, by: str) -> str:
        price = self._factor("wattprobe_energy_price_per_kwh", "currency")
        return (
            f"sum by ({by}, currency) "
            f"({self._billable(by)} * on (cluster, node) group_left (currency) {price}) "
            f"/ {J_PER_KWH}"
        )

    def carbon(self, by: str) -> str:
        intensity = self._factor("wattprobe_carbon_intensity_grams_per_kwh")
        return (
            f"sum by ({by}) ({self._billable(by)} * on (cluster, node) group_left () {intensity}) "
            f"/ {J_PER_KWH}"
        )

    def _held(self, metric: str, *matchers: str, by: str = "cluster, node, namespace, pod") -> str:
        """Samples of each (pod, GPU) at the dashboard's resolution over the range."""
        return (
            f"count_over_time((max by ({by}, gpu, uuid) "
            f"({metric}{self.sel(*self.pods, *matchers)}))[$__range:$__interval]{self.offset})"
        )

    def _allocated(self) -> str:
        """GPUs and MIG devices (gpu_instance, mig_device) alike."""
        device = "cluster, node, namespace, pod, gpu_instance, mig_device"
        return self._held(ALLOCATION, 'uuid!=""', by=device)

    def _idle(self) -> str:
        return self._held("ALERTS", IDLE_ALERT)

    def gpu_hours(self, by: str) -> str:
        return f"sum by ({by}) ({self._allocated()}) * $__interval_ms / {MS_PER_HOUR}"

    def idle_gpu_hours(self, by: str) -> str:
        return f"sum by ({by}) ({self._idle()}) * $__interval_ms / {MS_PER_HOUR}"

    def _priced(self, held: str, by: str) -> str:
        price = f"{GPU_PRICE}{self.sel()}"
        return (
            f"sum by ({by}, currency) "
            f"({held} * on (cluster, node, uuid) group_left (currency) {price}) "
            f"* $__interval_ms / {MS_PER_HOUR}"
        )

    def gpu_cost(self, by: str) -> str:
        whole = self._held(ALLOCATION, 'uuid!=""', 'mig_device=""')
        migs = self._held(
            ALLOCATION, 'uuid!=""', 'mig_device!=""', by="cluster, node, namespace, pod, mig_device"
        )
        mig_price = (
            "max by (cluster, node, uuid, mig_device, currency) "
            f"(last_over_time({MIG_PRICE}{self.sel()}[$__range]{self.offset}))"
        )
        return (
            f"sum by ({by}, currency) ("
            f"{whole} * on (cluster, node, uuid) group_left (currency) {GPU_PRICE}{self.sel()} "
            f"or {migs} * on (cluster, node, uuid, mig_device) group_left (currency) {mig_price}"
            f") * $__interval_ms / {MS_PER_HOUR}"
        )

    def idle_gpu_cost(self, by: str) -> str:
        return self._priced(self._idle(), by)


def change(now: str, before: str) -> str:
    """now - before; all of now where there was nothing before (a new namespace)."""
    return f"{now} - ({before} or {now} * 0)"


def showback_dashboard(sel: Selector, variables: list[JSON], tags: tuple[str, ...]) -> JSON:
    now, before = Showback(sel), Showback(sel, "$__range")
    lay = Layout()
    lay.row("Per namespace over the selected range")
    lay.add(
        table(
            "Namespace energy and carbon",
            "Per namespace over the dashboard's time range: kWh billed to its pods (active and "
            "billed idle), facility kWh (times each node's PUE; nodes without a PUE left out), "
            "carbon in gCO2e (facility energy, IT energy without a PUE, times the node's grid "
            "intensity; nodes without one left out), GPU-hours held, GPU-hours held while "
            "WattprobeGpuIdleWhileAllocated fired, and how much of the kWh is modelled rather "
            'than measured (zones with source="estimated" on their node: all of a node without '
            "power sensors, or the memory of one whose sensors have no dram zone).",
            [
                Query(now.kwh("namespace"), instant=True, table=True),
                Query(now.facility_kwh("namespace"), instant=True, table=True),
                Query(now.carbon("namespace"), instant=True, table=True),
                Query(now.gpu_hours("namespace"), instant=True, table=True),
                Query(now.idle_gpu_hours("namespace"), instant=True, table=True),
                Query(now.estimated_kwh("namespace"), instant=True, table=True),
            ],
            "short",
            width=24,
            rename={
                "Value #A": "kWh",
                "Value #B": "Facility kWh",
                "Value #C": "Carbon (gCO2e)",
                "Value #D": "GPU-hours",
                "Value #E": "Idle GPU-hours",
                "Value #F": "of kWh estimated",
            },
            sort_by="kWh",
        ),
        table(
            "Namespace cost",
            "Per namespace and currency over the dashboard's time range: the energy cost "
            "(facility kWh, IT kWh where the node has no PUE, times the node's price per kWh), "
            "the GPU allocation cost (GPU-hours times the GPU's price per hour: its model's, "
            "else resource nvidia.com/gpu's) and, part of it, the idle-GPU waste. Currencies are "
            "never added together; nodes without a price have no cost here.",
            [
                Query(now.cost("namespace"), instant=True, table=True),
                Query(now.gpu_cost("namespace"), instant=True, table=True),
                Query(now.idle_gpu_cost("namespace"), instant=True, table=True),
            ],
            "short",
            width=24,
            rename={
                "Value #A": "Energy cost",
                "Value #B": "GPU cost",
                "Value #C": "Idle-GPU waste",
            },
            sort_by="Energy cost",
        ),
    )
    lay.row("Idle GPUs")
    lay.add(
        table(
            "Idle-GPU waste by pod",
            "Pods that held a GPU while WattprobeGpuIdleWhileAllocated fired (allocated, at most "
            "1 % busy, for over an hour), over the dashboard's time range: the GPU-hours and "
            "their price. The first hour of each idle stretch, the alert's `for`, is not counted.",
            [
                Query(now.idle_gpu_cost("namespace, pod, node, gpu"), instant=True, table=True),
            ],
            "short",
            rename={"Value": "Idle-GPU waste"},
            sort_by="Idle-GPU waste",
        ),
        timeseries(
            "Idle-GPU waste per hour",
            "Idle-GPU waste of the past hour per namespace and currency (recording rule "
            "namespace_pod:wattprobe_gpu_idle_waste_cost:increase1h).",
            [
                Query(
                    "sum by (namespace, currency) "
                    f"(namespace_pod:wattprobe_gpu_idle_waste_cost:increase1h{sel()})",
                    "{{namespace}} ({{currency}})",
                )
            ],
            "short",
        ),
    )
    lay.row("Trends")
    lay.add(
        timeseries(
            "Energy cost per hour by namespace",
            "Energy cost of the past hour per namespace and currency (recording rule "
            "namespace_pod:wattprobe_energy_cost:increase1h).",
            [
                Query(
                    "sum by (namespace, currency) "
                    f"(namespace_pod:wattprobe_energy_cost:increase1h{sel()})",
                    "{{namespace}} ({{currency}})",
                )
            ],
            "short",
        ),
        timeseries(
            "Carbon per hour by namespace",
            "gCO2e of the past hour per namespace (recording rule "
            "namespace_pod:wattprobe_carbon_grams:increase1h).",
            [
                Query(
                    f"sum by (namespace) (namespace_pod:wattprobe_carbon_grams:increase1h{sel()})",
                    "{{namespace}}",
                )
            ],
            "short",
        ),
        timeseries(
            "PUE per node",
            "Each node's facility PUE (wattprobe_node_pue): total facility energy over IT "
            "energy, 1 at best. Nodes without one configured are not shown and get no facility "
            "energy.",
            [Query(f"max by (node) (wattprobe_node_pue{sel()})", "{{node}}")],
            "none",
            min_value=1,
        ),
        timeseries(
            "Cost per hour left on the nodes",
            "Energy cost of the past hour that stays on each node, per currency: CPU idle kept on "
            "the node, host and kernel processes, GPUs nobody holds, energy no activity reading "
            "covered (recording rule node:wattprobe_node_overhead_energy_cost:increase1h). A "
            "node's bill is its pods' cost plus this.",
            [
                Query(
                    "sum by (node, currency) "
                    f"(node:wattprobe_node_overhead_energy_cost:increase1h{sel()})",
                    "{{node}} ({{currency}})",
                )
            ],
            "short",
        ),
    )
    lay.row("Top movers against the previous period")
    lay.add(
        table(
            "Top movers: energy",
            "kWh per namespace over the dashboard's range and its change against the period "
            "just before (of the same length); a namespace new in this period changes by all of "
            "its energy.",
            [
                Query(now.kwh("namespace"), instant=True, table=True),
                Query(
                    change(now.kwh("namespace"), before.kwh("namespace")),
                    instant=True,
                    table=True,
                ),
            ],
            "short",
            rename={"Value #A": "kWh", "Value #B": "Change"},
            sort_by="Change",
        ),
        table(
            "Top movers: cost",
            "Energy cost per namespace and currency over the dashboard's range and its change "
            "against the period just before (of the same length).",
            [
                Query(now.cost("namespace"), instant=True, table=True),
                Query(
                    change(now.cost("namespace"), before.cost("namespace")),
                    instant=True,
                    table=True,
                ),
            ],
            "short",
            rename={"Value #A": "Energy cost", "Value #B": "Change"},
            sort_by="Change",
        ),
    )
    return dashboard(
        uid="wattprobe-showback",
        title="wattprobe / Showback",
        description="Cost, facility energy (PUE) and carbon per namespace, idle-GPU waste, "
        "top movers (docs/showback.md).",
        tags=(*tags, "showback"),
        variables=variables,
        layout=lay,
        time_from="now-30d",
    )
