"""The wattprobe dashboards: cluster power, namespace/pod drill-down, GPU fleet, health, showback.

Conventions every query follows (the tests check them):
- every selector carries cluster="$cluster": the variable is hidden and empty on a single
  cluster, where cluster="" matches the series that have no cluster label;
- node zones overlap (package contains core): power is summed over devices and nodes within
  one zone kind, never across zone kinds, so every power series keeps its zone;
- the recording rules of alerts/wattprobe.rules.yml serve the fleet-wide views; drill-downs
  into a few pods read the raw counters with $__rate_interval;
- energy in kWh is joules / 3.6e6;
- what a pod is billed is all of its energy, active and idle (mode="idle": the idle of GPUs it
  holds, CPU idle where --attribution.idle hands it out): billing views sum over mode and show
  the split beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from alerts.generate import DEFAULT_JOB, job_selector
from dashboards.grafana import (
    JSON,
    Layout,
    Panel,
    Query,
    bargauge,
    dashboard,
    dashed,
    datasource_variable,
    query_variable,
    special_map,
    stat,
    state_timeline,
    table,
    thresholds,
    timeseries,
    value_map,
)
from dashboards.showback import Showback, showback_dashboard

TAGS = ("wattprobe", "energy", "kubernetes")
CRITICAL_XIDS = "48|63|64|74|79|94|95|119|120"  # as in the WattprobeGpuXidError alert

NODE_POWER = "node_zone_source_mode:wattprobe_node_energy_joules:sum_rate5m"
NODE_ZONE_POWER = "node_zone_source:wattprobe_node_energy_joules:sum_rate5m"
# the clock event reasons of alert WattprobeGpuClocksThrottled: faults, not the power cap
THROTTLE_REASONS = "hw_slowdown|hw_thermal_slowdown|sw_thermal_slowdown|hw_power_brake_slowdown"
POD_POWER = "namespace_pod_zone:wattprobe_pod_energy_joules:sum_rate5m"
NAMESPACE_POWER = "namespace_zone:wattprobe_pod_energy_joules:sum_rate5m"
NODE_NAMESPACE_POWER = "node_namespace_zone:wattprobe_pod_energy_joules:sum_rate5m"
POD_ENERGY = "wattprobe_pod_energy_joules_total"
IDLE_POWER = "wattprobe_idle_power_watts"
J_PER_KWH = "3.6e6"
BILLED_COLUMNS = {
    "Value #A": "Energy",
    "Value #B": "Active",
    "Value #C": "Idle",
    "Value #D": "Cost",
}
# joins a MIG instance's series to its profile (3g.20gb ...) and MIG device UUID
MIG_PROFILE = (
    "* on (uuid, gpu_instance, compute_instance) group_left (profile, mig_uuid) "
    "wattprobe_gpu_mig_info"
)


def xid_events(counter: str, window: str) -> str:
    """XID events within the window, per series. A GPU's XID counter series only appears with
    its first event, at 1, and increase() cannot see that first event; the counter minus its
    value one window ago (0 where it did not exist yet) does. A counter reset (the exporter
    restarted) counts 0 rather than a negative number."""
    return f"clamp_min({counter} - ({counter} offset {window} or {counter} * 0), 0)"


ESTIMATED_DASHED = dashed("byRegexp", ".*\\(estimated\\).*")
PRIOR_DASHED = dashed("byRegexp", ".*\\(prior\\).*")
ESTIMATED_NOTE = (
    " Series marked (estimated), dashed, are modelled from CPU usage: all zones of a node"
    " without a power sensor, or the memory (dram) of one whose sensors have no dram zone."
)


@dataclass(frozen=True)
class Settings:
    job: str = DEFAULT_JOB  # scrape job of wattprobe, as in the alert rules
    multi_cluster: bool = False  # show the cluster picker


def sel(*extra: str) -> str:
    """The common selector: cluster, node, plus extra matchers."""
    return "{" + ", ".join(['cluster="$cluster"', 'node=~"$node"', *extra]) + "}"


def billed_energy(by: str, *matchers: str) -> list[Query]:
    """Pod energy over the dashboard's range in kWh, per `by`: all of it (A, what is billed), its
    active part (B) and the idle billed (C). B and C are 0, not missing, where a pod has no such
    series (a pod holding a GPU it never used has only idle), so every row has all three and
    A = B + C. D is its cost per currency (dashboards/showback.py): none where the node has no
    price."""

    def increase(mode: str) -> str:
        selector = sel(*matchers, 'mode="' + mode + '"')
        return f"increase({POD_ENERGY}{selector}[$__range])"

    def part(mode: str, other: str) -> Query:
        return Query(
            f"sum by ({by}) ({increase(mode)} or {increase(other)} * 0) / {J_PER_KWH}",
            instant=True,
            table=True,
        )

    total = f"sum by ({by}) (increase({POD_ENERGY}{sel(*matchers)}[$__range])) / {J_PER_KWH}"
    cost = Showback(sel, pods=matchers).cost(by)
    return [
        Query(total, instant=True, table=True),
        part("active", "idle"),
        part("idle", "active"),
        Query(cost, instant=True, table=True),
    ]


def idle_baseline(title: str, description: str, *matchers: str, gpu: bool) -> Panel:
    """The idle power each zone or GPU is measured against, by where it comes from."""
    device = "GPU {{device}}" if gpu else "{{zone}} {{device}}"
    return timeseries(
        title,
        description
        + " origin: learned (from intervals that were idle, or the intercept of power against"
        " utilization), configured (--power.idle), prior (a conservative default until there is"
        " evidence; dashed). docs/attribution.md says how each is found.",
        [
            Query(
                f"max by (node, zone, device, origin) ({IDLE_POWER}{sel(*matchers)})",
                f"{{{{node}}}} {device} ({{{{origin}}}})",
            )
        ],
        "watt",
        overrides=[PRIOR_DASHED],
    )


def _cluster_variable(settings: Settings) -> JSON:
    return query_variable(
        "cluster",
        "Cluster",
        f"label_values(up{{{job_selector(settings.job)}}}, cluster)",
        hide=0 if settings.multi_cluster else 2,
    )


def _node_variable(settings: Settings) -> JSON:
    return query_variable(
        "node",
        "Node",
        f'label_values(up{{{job_selector(settings.job)}, cluster="$cluster"}}, node)',
        multi=True,
        include_all=True,
    )


def _namespace_variable() -> JSON:
    return query_variable(
        "namespace",
        "Namespace",
        "label_values(wattprobe_pod_energy_joules_total" + sel() + ", namespace)",
    )


def _pod_variable() -> JSON:
    return query_variable(
        "pod",
        "Pod",
        "label_values(wattprobe_pod_energy_joules_total" + sel('namespace="$namespace"') + ", pod)",
        multi=True,
        include_all=True,
    )


def _gpu_variable() -> JSON:
    return query_variable(
        "gpu",
        "GPU",
        "label_values(wattprobe_gpu_info" + sel() + ", gpu)",
        multi=True,
        include_all=True,
    )


# -- 1. cluster power -----------------------------------------------------------------------


def cluster_power(settings: Settings) -> JSON:
    lay = Layout()
    lay.row("Overview")
    lay.add(
        stat(
            "Current power by zone",
            "Current power of the selected nodes per zone kind, summed over nodes and devices. "
            "Zones overlap (package contains core, psys contains package): never add them up.",
            [Query(f"sum by (zone) ({NODE_POWER}{sel()})", "{{zone}}")],
            "watt",
            width=12,
        ),
        stat(
            "Active share of power",
            "Fraction of each zone's energy that is above the learned idle baseline: the part "
            "attributed to workloads.",
            [
                Query(
                    f"sum by (zone) ({NODE_POWER}" + sel('mode="active"') + ") "
                    f"/ sum by (zone) ({NODE_POWER}{sel()})",
                    "{{zone}}",
                )
            ],
            "percentunit",
        ),
        stat(
            "Nodes on estimated power",
            "Nodes where no RAPL or hwmon sensor could be read: their power is modelled from "
            "CPU usage (alert WattprobeNodePowerEstimated).",
            [
                Query(
                    "count(count by (cluster, node, instance) "
                    "(wattprobe_node_energy_joules_total" + sel('source="estimated"') + ") "
                    "unless count by (cluster, node, instance) "
                    "(wattprobe_node_energy_joules_total" + sel('source!="estimated"') + ")) "
                    "or vector(0)"
                )
            ],
            "none",
            steps=thresholds(("green", None), ("blue", 1)),
        ),
    )
    lay.row("Node power")
    lay.add(
        timeseries(
            "Node power by zone",
            "Power per node and zone kind (devices of one kind summed, e.g. both sockets' "
            "package). Zones overlap: compare them, do not stack them." + ESTIMATED_NOTE,
            [
                Query(
                    f"sum by (node, zone, source) ({NODE_POWER}{sel()})",
                    "{{node}} {{zone}} ({{source}})",
                )
            ],
            "watt",
            width=24,
            height=9,
            overrides=[ESTIMATED_DASHED],
        ),
        timeseries(
            "Active vs idle power by zone",
            "Idle is the zone's idle baseline power (panel Idle power baseline); active is the "
            "rest, which wattprobe splits among workloads. Idle billed to pods (the GPUs they "
            "hold) is part of idle here.",
            [Query(f"sum by (zone, mode) ({NODE_POWER}{sel()})", "{{zone}} {{mode}}")],
            "watt",
        ),
        timeseries(
            "Node power against its past day",
            "Each node zone's power divided by its mean over the past day: 1 is usual. Alert "
            "WattprobeNodePowerAnomaly fires above 1.5 when the jump is also 4 standard "
            "deviations and 50 W above that mean for 15 minutes.",
            [
                Query(
                    f"{NODE_ZONE_POWER}{sel()} / avg_over_time({NODE_ZONE_POWER}{sel()}[1d])",
                    "{{node}} {{zone}} ({{source}})",
                )
            ],
            "none",
            steps=thresholds(("green", None), ("orange", 1.5)),
            threshold_style="line",
        ),
        table(
            "Power source per node",
            "Where each node's power comes from: rapl and hwmon are measured, estimated is "
            "modelled.",
            [Query(f"sum by (node, zone, source) ({NODE_POWER}{sel()})", instant=True, table=True)],
            "watt",
            rename={"Value": "Power"},
        ),
        idle_baseline(
            "Idle power baseline",
            "The idle power each zone and GPU of a node is measured against: energy up to it "
            "is idle, the rest active.",
            gpu=False,
        ),
    )
    lay.row("Workloads")
    lay.add(
        bargauge(
            "Top namespaces by power",
            "The 10 namespaces drawing the most power on the selected nodes, per zone kind: "
            "active and the idle billed to their pods.",
            [
                Query(
                    f"topk(10, sum by (namespace, zone) ({NODE_NAMESPACE_POWER}{sel()}))",
                    "{{namespace}} · {{zone}}",
                    instant=True,
                )
            ],
            "watt",
        ),
        bargauge(
            "Top pods by power",
            "The 10 pods drawing the most power on the selected nodes, per zone kind: active "
            "and the idle billed to them.",
            [
                Query(
                    f"topk(10, sum by (namespace, pod, zone) ({POD_POWER}{sel()}))",
                    "{{namespace}}/{{pod}} · {{zone}}",
                    instant=True,
                )
            ],
            "watt",
        ),
        timeseries(
            "Namespace power",
            "Power attributed to each namespace over time, per zone kind, active and billed idle.",
            [
                Query(
                    f"sum by (namespace, zone) ({NODE_NAMESPACE_POWER}{sel()})",
                    "{{namespace}} {{zone}}",
                )
            ],
            "watt",
        ),
        timeseries(
            "Power outside pods",
            "Active power of host processes (system_processes: kubelet, container runtime, "
            "daemons) and kernel threads (kernel_processes).",
            [
                Query(
                    "sum by (node, container, zone) (rate(wattprobe_container_energy_joules_total"
                    + sel('container=~"system_processes|kernel_processes"')
                    + "[$__rate_interval]))",
                    "{{node}} {{container}} {{zone}}",
                )
            ],
            "watt",
        ),
    )
    lay.row("Energy")
    lay.add(
        timeseries(
            "Energy per day",
            "Energy of the trailing 24 hours per zone kind (average power of the day times 24 h), "
            "in kWh." + ESTIMATED_NOTE,
            [
                Query(
                    f"sum by (zone, source) (avg_over_time({NODE_POWER}{sel()}[1d])) * 24 / 1000",
                    "{{zone}} ({{source}})",
                )
            ],
            "kwatth",
            overrides=[ESTIMATED_DASHED],
        ),
        stat(
            "Energy over the selected range",
            "Energy per zone kind over the dashboard's time range, in kWh." + ESTIMATED_NOTE,
            [
                Query(
                    "sum by (zone, source) (increase(wattprobe_node_energy_joules_total"
                    + sel()
                    + f"[$__range])) / {J_PER_KWH}",
                    "{{zone}} ({{source}})",
                    instant=True,
                )
            ],
            "kwatth",
            width=12,
            height=8,
        ),
        table(
            "Namespace energy over the selected range",
            "Energy billed to each namespace over the dashboard's time range, per zone kind, in "
            "kWh: the basis for billing teams. Energy = Active + Idle, Idle being the idle "
            "energy billed to its pods (the GPUs they hold; CPU idle where --attribution.idle "
            "hands it out). Cost: Energy times each node's PUE and price per kWh, per currency "
            "(docs/showback.md); none for nodes without a price.",
            billed_energy("namespace, zone"),
            "kwatth",
            width=24,
            rename=BILLED_COLUMNS,
            sort_by="Energy",
        ),
    )
    return dashboard(
        uid="wattprobe-cluster-power",
        title="wattprobe / Cluster power",
        description="Node power by zone, active vs idle, top namespaces and pods, energy.",
        tags=TAGS,
        variables=[
            datasource_variable(),
            _cluster_variable(settings),
            _node_variable(settings),
        ],
        layout=lay,
        time_from="now-24h",
    )


# -- 2. namespace / pod drill-down ----------------------------------------------------------


def pod_power(settings: Settings) -> JSON:
    namespace = sel('namespace="$namespace"')
    pods = sel('namespace="$namespace"', 'pod=~"$pod"')
    lay = Layout()
    lay.row("Namespace $namespace")
    lay.add(
        timeseries(
            "Namespace power by zone",
            "Power attributed to the namespace's pods on the selected nodes, per zone kind: "
            "active and billed idle.",
            [Query(f"sum by (zone) ({POD_POWER}{namespace})", "{{zone}}")],
            "watt",
        ),
        table(
            "Pods of the namespace by power",
            "Current power of every pod of the namespace, per zone kind, active and billed "
            "idle together.",
            [
                Query(
                    f"sort_desc(sum by (pod, zone) ({POD_POWER}{namespace}))",
                    instant=True,
                    table=True,
                )
            ],
            "watt",
            rename={"Value": "Power"},
            sort_by="Power",
        ),
        timeseries(
            "Namespace power across the cluster",
            "The namespace's power over all nodes of the cluster (recording rule), per zone kind.",
            [
                Query(
                    f"sum by (zone) ({NAMESPACE_POWER}"
                    '{cluster="$cluster", namespace="$namespace"})',
                    "{{zone}}",
                )
            ],
            "watt",
            width=24,
        ),
    )
    lay.row("Pods")
    lay.add(
        timeseries(
            "Pod CPU power",
            "Power of the CPU zones (package, dram, or the node's sensor) attributed to each "
            "selected pod, active and idle apart (idle: where --attribution.idle hands it out).",
            [
                Query(
                    "sum by (pod, zone, mode) (rate(wattprobe_pod_energy_joules_total"
                    + sel('namespace="$namespace"', 'pod=~"$pod"', 'zone!="gpu"')
                    + "[$__rate_interval]))",
                    "{{pod}} {{zone}} {{mode}}",
                )
            ],
            "watt",
        ),
        timeseries(
            "Pod GPU power",
            "GPU power attributed to each selected pod, per GPU, active and idle apart: idle is "
            "the idle power of a GPU the pod holds, billed to it.",
            [
                Query(
                    "sum by (pod, gpu, mode) (rate(wattprobe_pod_energy_joules_total"
                    + sel('namespace="$namespace"', 'pod=~"$pod"', 'zone="gpu"')
                    + "[$__rate_interval]))",
                    "{{pod}} GPU {{gpu}} {{mode}}",
                )
            ],
            "watt",
        ),
        timeseries(
            "Pod share of its node",
            "Each pod's power as a fraction of its node's power in the same zone kind "
            "(active and idle).",
            [
                Query(
                    "sum by (cluster, node, pod, zone) (rate(wattprobe_pod_energy_joules_total"
                    + sel('namespace="$namespace"', 'pod=~"$pod"', 'zone!="gpu"')
                    + "[$__rate_interval])) / on (cluster, node, zone) group_left () "
                    "sum by (cluster, node, zone) (rate(wattprobe_node_energy_joules_total"
                    + sel()
                    + "[$__rate_interval]))",
                    "{{pod}} {{zone}} on {{node}}",
                )
            ],
            "percentunit",
            max_value=1,
        ),
        timeseries(
            "Pod share of its GPUs",
            "Each pod's GPU power as a fraction of the power of the GPU it runs on.",
            [
                Query(
                    "sum by (cluster, node, pod, gpu) (rate(wattprobe_pod_energy_joules_total"
                    + sel('namespace="$namespace"', 'pod=~"$pod"', 'zone="gpu"')
                    + "[$__rate_interval])) / on (cluster, node, gpu) group_left () "
                    "sum by (cluster, node, gpu) (rate(wattprobe_gpu_energy_joules_total"
                    + sel()
                    + "[$__rate_interval]))",
                    "{{pod}} GPU {{gpu}} on {{node}}",
                )
            ],
            "percentunit",
            max_value=1,
        ),
        bargauge(
            "Pod energy over the selected range",
            "Energy billed to each selected pod over the dashboard's time range, per zone kind, "
            "in kWh: active and billed idle (the split: Pod energy, active and idle).",
            [
                Query(
                    "sum by (pod, zone) (increase(wattprobe_pod_energy_joules_total"
                    + pods
                    + f"[$__range])) / {J_PER_KWH}",
                    "{{pod}} · {{zone}}",
                    instant=True,
                )
            ],
            "kwatth",
        ),
        table(
            "Pod energy, active and idle",
            "Energy billed to each selected pod over the dashboard's time range, per zone kind, "
            "in kWh: Energy = Active + Idle, Idle being the idle energy billed to it (the GPUs "
            "it holds; CPU idle where --attribution.idle hands it out). Cost: Energy times its "
            "node's PUE and price per kWh, per currency (docs/showback.md).",
            billed_energy("pod, zone", 'namespace="$namespace"', 'pod=~"$pod"'),
            "kwatth",
            rename=BILLED_COLUMNS,
            sort_by="Energy",
        ),
        timeseries(
            "Container power",
            "Power attributed to each container of the selected pods, per zone kind, active and "
            "billed idle apart (per-container series: serve with --collector.container).",
            [
                Query(
                    "sum by (pod, container, zone, mode) "
                    "(rate(wattprobe_container_energy_joules_total" + pods + "[$__rate_interval]))",
                    "{{pod}}/{{container}} {{zone}} {{mode}}",
                )
            ],
            "watt",
        ),
        timeseries(
            "Container CPU usage",
            "CPU time per second (cores) of each container of the selected pods: the weights "
            "of the CPU power split (serve with --collector.container).",
            [
                Query(
                    "sum by (pod, container) (rate(wattprobe_container_cpu_seconds_total"
                    + pods
                    + "[$__rate_interval]))",
                    "{{pod}}/{{container}}",
                )
            ],
            "short",
        ),
        timeseries(
            "Container GPU driver calls",
            "GPU driver ioctls per second of each container (eBPF): a fallback weight of the "
            "GPU power split (serve with --collector.container).",
            [
                Query(
                    "sum by (pod, container, driver) (rate(wattprobe_container_gpu_ioctls_total"
                    + pods
                    + "[$__rate_interval]))",
                    "{{pod}}/{{container}} {{driver}}",
                )
            ],
            "ops",
        ),
    )
    return dashboard(
        uid="wattprobe-pod-power",
        title="wattprobe / Namespace and pod power",
        description="A namespace's and its pods' CPU and GPU power, share of the node, energy.",
        tags=TAGS,
        variables=[
            datasource_variable(),
            _cluster_variable(settings),
            _node_variable(settings),
            _namespace_variable(),
            _pod_variable(),
        ],
        layout=lay,
    )


# -- 3. GPU fleet ---------------------------------------------------------------------------


def gpu_fleet(settings: Settings) -> JSON:
    gpus = sel('gpu=~"$gpu"')
    whole = sel('gpu=~"$gpu"', 'gpu_instance=""')  # whole GPUs, not their MIG instances
    mig = sel('gpu=~"$gpu"', 'gpu_instance!=""')
    allocations = (
        "max by (node, gpu, gpu_instance, uuid, namespace, pod, container, claim) "
        f"(wattprobe_gpu_allocation_info{gpus})"
    )
    temperature_steps = thresholds(("green", None), ("orange", 80), ("red", 85))
    lay = Layout()
    lay.row("Fleet")
    lay.add(
        stat(
            "GPUs",
            "GPUs found by NVML on the selected nodes.",
            [Query(f"count(wattprobe_gpu_info{gpus})")],
            "none",
            width=4,
        ),
        stat(
            "GPUs lost",
            "GPUs NVML reports as lost (alert WattprobeGpuLost).",
            [Query(f"sum(wattprobe_gpu_lost{gpus})")],
            "none",
            width=4,
            steps=thresholds(("green", None), ("red", 1)),
        ),
        stat(
            "Critical XIDs in range",
            f"Critical XID errors ({CRITICAL_XIDS.replace('|', ', ')}) over the dashboard's time "
            "range (alert WattprobeGpuXidError), a GPU's first one included.",
            [
                Query(
                    "sum("
                    + xid_events(
                        "wattprobe_gpu_xid_errors_total"
                        + sel('gpu=~"$gpu"', f'xid=~"{CRITICAL_XIDS}"'),
                        "$__range",
                    )
                    + ") or vector(0)",
                    instant=True,
                )
            ],
            "none",
            width=4,
            decimals=0,
            steps=thresholds(("green", None), ("red", 1)),
        ),
        stat(
            "Mean utilization",
            "Mean utilization of the selected GPUs.",
            [Query(f"avg(wattprobe_gpu_utilization_ratio{gpus})")],
            "percentunit",
            width=4,
        ),
        stat(
            "GPU power",
            "Power drawn by the selected GPUs together.",
            [Query(f"sum(wattprobe_gpu_power_watts{gpus})")],
            "watt",
            width=4,
        ),
        stat(
            "Allocated GPUs idle for 1 h",
            "GPUs held by a pod with under 1% utilization for the last hour (alert "
            "WattprobeGpuIdleWhileAllocated).",
            [
                Query(
                    f"count(max by (uuid) (wattprobe_gpu_allocation_info{gpus}) "
                    "* on (uuid) (max by (uuid) "
                    f"(max_over_time(wattprobe_gpu_utilization_ratio{gpus}[1h])) < 0.01)) "
                    "or vector(0)"
                )
            ],
            "none",
            width=4,
            steps=thresholds(("green", None), ("blue", 1)),
        ),
    )
    lay.row("Utilization and memory")
    lay.add(
        timeseries(
            "GPU utilization",
            "Fraction of time a kernel ran on each GPU, compared across nodes.",
            [Query(f"wattprobe_gpu_utilization_ratio{gpus}", "{{node}} GPU {{gpu}}")],
            "percentunit",
            width=16,
            max_value=1,
        ),
        bargauge(
            "Mean utilization per node over the range",
            "Mean GPU utilization of each node over the dashboard's time range.",
            [
                Query(
                    "avg by (node) "
                    f"(avg_over_time(wattprobe_gpu_utilization_ratio{gpus}[$__range]))",
                    "{{node}}",
                    instant=True,
                )
            ],
            "percentunit",
            width=8,
            max_value=1,
        ),
        timeseries(
            "GPU memory used, with 1 h forecast",
            "Memory used per GPU (solid), its total (dashed, refId C) and a linear forecast one "
            "hour ahead from the last 30 minutes (dashed, refId B): a forecast crossing the "
            "total means an out-of-memory within the hour. Whole GPUs; MIG instances are in "
            "the MIG instances table.",
            [
                Query(f"wattprobe_gpu_memory_used_bytes{whole}", "{{node}} GPU {{gpu}} used"),
                Query(
                    f"predict_linear(wattprobe_gpu_memory_used_bytes{whole}[30m], 3600)",
                    "{{node}} GPU {{gpu}} in 1 h",
                ),
                Query(f"wattprobe_gpu_memory_total_bytes{whole}", "{{node}} GPU {{gpu}} total"),
            ],
            "bytes",
            width=16,
            overrides=[dashed("byFrameRefID", "B"), dashed("byFrameRefID", "C")],
        ),
        table(
            "MIG instances",
            "Each MIG device (GPU instance, compute instance) with its profile and memory.",
            [
                Query(
                    f"wattprobe_gpu_memory_used_bytes{mig} {MIG_PROFILE}{gpus}",
                    instant=True,
                    table=True,
                ),
                Query(
                    f"wattprobe_gpu_memory_total_bytes{mig} {MIG_PROFILE}{gpus}",
                    instant=True,
                    table=True,
                ),
            ],
            "bytes",
            width=8,
            rename={"Value #A": "Used", "Value #B": "Total"},
            hide=("Time", "__name__", "job", "instance", "cluster", "mig_uuid"),
        ),
    )
    lay.row("Temperature and power")
    lay.add(
        timeseries(
            "GPU temperature",
            "Core temperature per GPU; red above 85 °C (alert WattprobeGpuTemperatureHigh).",
            [Query(f"wattprobe_gpu_temperature_celsius{gpus}", "{{node}} GPU {{gpu}}")],
            "celsius",
            min_value=None,
            steps=temperature_steps,
            threshold_style="line+area",
        ),
        timeseries(
            "GPU power against its limit",
            "Power per GPU (solid) and its enforced power limit (dashed, refId B).",
            [
                Query(f"wattprobe_gpu_power_watts{gpus}", "{{node}} GPU {{gpu}}"),
                Query(f"wattprobe_gpu_power_limit_watts{gpus}", "{{node}} GPU {{gpu}} limit"),
            ],
            "watt",
            overrides=[dashed("byFrameRefID", "B")],
        ),
        timeseries(
            "GPU power as a share of its limit",
            "Power / power limit; above 90% for 5 minutes fires WattprobeGpuPowerNearLimit.",
            [
                Query(
                    f"wattprobe_gpu_power_watts{gpus} "
                    f"/ (wattprobe_gpu_power_limit_watts{gpus} > 0)",
                    "{{node}} GPU {{gpu}}",
                )
            ],
            "percentunit",
            max_value=1,
            steps=thresholds(("green", None), ("red", 0.9)),
            threshold_style="line",
        ),
        timeseries(
            "GPU energy: active vs idle power",
            "Power from the GPU energy counters, split into the idle baseline (panel GPU idle "
            "power baseline) and the active rest. A held GPU's idle is billed to its holders.",
            [
                Query(
                    "sum by (node, gpu, mode) (rate(wattprobe_gpu_energy_joules_total"
                    + gpus
                    + "[$__rate_interval]))",
                    "{{node}} GPU {{gpu}} {{mode}}",
                )
            ],
            "watt",
        ),
        idle_baseline(
            "GPU idle power baseline",
            "The idle power each GPU is measured against: energy up to it is idle (billed to "
            "the pods holding the GPU), the rest active.",
            'zone="gpu"',
            gpu=True,
        ),
        timeseries(
            "GPU clocks",
            "SM and memory clocks per GPU; a drop under load means thermal or power throttling.",
            [Query(f"wattprobe_gpu_clock_hertz{gpus}", "{{node}} GPU {{gpu}} {{clock}}")],
            "hertz",
        ),
        state_timeline(
            "GPU throttled",
            "Whether a fault holds each GPU's clocks down: thermal slowdown, a hardware slowdown "
            "or the power brake (alert WattprobeGpuClocksThrottled after 10 minutes). The power "
            "cap is left out: at full load it is normal (panel GPU clocks).",
            [
                Query(
                    "max by (node, gpu) (wattprobe_gpu_clock_event_active"
                    + sel('gpu=~"$gpu"', f'reason=~"{THROTTLE_REASONS}"')
                    + ")",
                    "{{node}} GPU {{gpu}}",
                )
            ],
            mappings=value_map({"0": ("ok", "green"), "1": ("throttled", "red")}),
            steps=thresholds(("green", None), ("red", 1)),
            width=12,
            height=8,
        ),
        timeseries(
            "ECC errors",
            "ECC errors per GPU and type, each bar the errors since the previous one (the first "
            "bar: since the driver loaded). Any "
            "uncorrected error pages (alert WattprobeGpuEccUncorrected); a steady stream of "
            "corrected ones means wearing memory (XID 92: WattprobeGpuXidWarning).",
            [
                Query(
                    # as for XIDs: a GPU's errors counted before wattprobe started show too
                    "sum by (node, gpu, type) ("
                    + xid_events(f"wattprobe_gpu_ecc_errors_total{gpus}", "$__interval")
                    + ")",
                    "{{node}} GPU {{gpu}} {{type}}",
                )
            ],
            "none",
            bars=True,
        ),
        timeseries(
            "XID errors",
            "XID errors per GPU and code, each bar the events since the previous one. Critical "
            "codes: " + CRITICAL_XIDS.replace("|", ", ") + ".",
            [
                Query(
                    "sum by (node, gpu, xid) ("
                    + xid_events(f"wattprobe_gpu_xid_errors_total{gpus}", "$__interval")
                    + ")",
                    "{{node}} GPU {{gpu}} XID {{xid}}",
                )
            ],
            "none",
            bars=True,
        ),
    )
    lay.row("Pods")
    lay.add(
        table(
            "GPU allocation",
            "Which pod holds which GPU, time-slice or share of it or MIG instance (gpu_instance) "
            "according to the kubelet's PodResources, through a device plugin or a DRA "
            "ResourceClaim (claim), with the GPU's current utilization (n/a: NVML reports none, "
            "as for GPUs in MIG mode).",
            [
                Query(
                    f"{allocations} * on (uuid) group_left () "
                    f"max by (uuid) (wattprobe_gpu_utilization_ratio{gpus}) "
                    # holders of GPUs without utilization (MIG) stay in the table, as NaN
                    f"or {allocations} * NaN",
                    instant=True,
                    table=True,
                )
            ],
            "percentunit",
            width=24,
            rename={"Value": "Utilization"},
            mappings=special_map("nan", "n/a"),
        ),
        timeseries(
            "Per-pod GPU power",
            "GPU power attributed to each pod, per GPU, active and idle apart: idle is the idle "
            "power of a GPU the pod holds, billed to it.",
            [
                Query(
                    "sum by (namespace, pod, gpu, mode) (rate(wattprobe_pod_energy_joules_total"
                    + sel('zone="gpu"', 'gpu=~"$gpu"')
                    + "[$__rate_interval]))",
                    "{{namespace}}/{{pod}} GPU {{gpu}} {{mode}}",
                )
            ],
            "watt",
        ),
        bargauge(
            "Per-pod GPU energy over the selected range",
            "GPU energy billed to each pod over the dashboard's time range, in kWh: active and "
            "the idle of the GPUs it holds.",
            [
                Query(
                    "topk(20, sum by (namespace, pod) (increase(wattprobe_pod_energy_joules_total"
                    + sel('zone="gpu"', 'gpu=~"$gpu"')
                    + f"[$__range])) / {J_PER_KWH})",
                    "{{namespace}}/{{pod}}",
                    instant=True,
                )
            ],
            "kwatth",
        ),
        table(
            "GPU inventory",
            "Every GPU with its model, driver and MIG mode.",
            [Query(f"wattprobe_gpu_info{gpus}", instant=True, table=True)],
            "none",
            width=24,
            hide=("Time", "Value", "__name__", "job", "instance", "cluster"),
        ),
    )
    return dashboard(
        uid="wattprobe-gpu-fleet",
        title="wattprobe / GPU fleet",
        description="GPU utilization, memory, temperature, power, XIDs, allocation and MIG.",
        tags=(*TAGS, "gpu"),
        variables=[
            datasource_variable(),
            _cluster_variable(settings),
            _node_variable(settings),
            _gpu_variable(),
        ],
        layout=lay,
    )


# -- 4. exporter health ---------------------------------------------------------------------


def exporter_health(settings: Settings) -> JSON:
    up = f'up{{{job_selector(settings.job)}, cluster="$cluster", node=~"$node"}}'
    scrape = f'{{{job_selector(settings.job)}, cluster="$cluster", node=~"$node"}}'
    not_absent = sel('reason!="absent"')
    lay = Layout()
    lay.row("Targets")
    lay.add(
        stat(
            "Targets up",
            "wattprobe targets Prometheus scrapes successfully.",
            [Query(f"sum({up})")],
            "none",
        ),
        stat(
            "Targets down",
            "wattprobe targets that fail to scrape (alert WattprobeTargetDown).",
            [Query(f"count({up} == 0) or vector(0)")],
            "none",
            steps=thresholds(("green", None), ("red", 1)),
        ),
        stat(
            "Sources failing",
            "Sources reporting wattprobe_source_up 0 for a reason other than absent hardware "
            "(alert WattprobeSourceDown).",
            [Query(f"count(wattprobe_source_up{not_absent} == 0) or vector(0)")],
            "none",
            steps=thresholds(("green", None), ("orange", 1)),
        ),
        table(
            "Versions",
            "wattprobe and Python versions running, with the number of nodes on each.",
            [
                Query(
                    f"count by (version, python) (wattprobe_build_info{sel()})",
                    instant=True,
                    table=True,
                )
            ],
            "none",
            width=6,
            height=5,
            rename={"Value": "Nodes"},
        ),
    )
    lay.row("Sources")
    lay.add(
        state_timeline(
            "Sources up per node",
            "Whether each source worked in each interval. Sources a node has no hardware for "
            "(reason absent) are left out.",
            [
                Query(
                    f"max by (node, source) (wattprobe_source_up{not_absent})",
                    "{{node}} {{source}}",
                )
            ],
            mappings=value_map({"1": ("up", "green"), "0": ("down", "red")}),
            steps=thresholds(("red", None), ("green", 1)),
        ),
        table(
            "Sources not up",
            "Every source currently not working, with its reason; reason absent means the "
            "node has no such hardware (not a fault).",
            [Query(f"wattprobe_source_up{sel()} == 0", instant=True, table=True)],
            "none",
            width=24,
            hide=("Time", "Value", "__name__", "job", "instance", "cluster"),
        ),
    )
    lay.row("Performance")
    lay.add(
        timeseries(
            "Collect duration by source",
            "Time each source took to read in the last interval.",
            [
                Query(
                    f"max by (node, source) (wattprobe_collect_duration_seconds{sel()})",
                    "{{node}} {{source}}",
                )
            ],
            "s",
        ),
        timeseries(
            "Seconds since the last interval",
            "Age of each agent's last completed interval at the time of the query: about "
            "--interval when the loop keeps up. Climbing while the target is up means the loop "
            "stopped and every value is frozen (alert WattprobeIntervalStale).",
            [
                Query(
                    f"time() - max by (node) (wattprobe_last_interval_timestamp_seconds{sel()})",
                    "{{node}}",
                )
            ],
            "s",
        ),
        timeseries(
            "Attribution intervals per second",
            "Completed intervals per second: 1 / --interval when the loop keeps up.",
            [Query(f"rate(wattprobe_intervals_total{sel()}[$__rate_interval])", "{{node}}")],
            "short",
        ),
        timeseries(
            "Scrape duration",
            "How long Prometheus takes to scrape each wattprobe.",
            [Query(f"scrape_duration_seconds{scrape}", "{{node}}")],
            "s",
        ),
        timeseries(
            "Samples per scrape",
            "Series each wattprobe exposes: grows with pods (and processes with "
            "--collector.process).",
            [Query(f"scrape_samples_scraped{scrape}", "{{node}}")],
            "short",
        ),
        timeseries(
            "eBPF map fill",
            "Entries in each bounded eBPF map as a fraction of its capacity (--activity-source "
            "ebpf). Near 100% the LRU maps evict entries to make room (next panel): raise the "
            "map sizes for the node's process churn.",
            [
                Query(
                    f"max by (node, map) (wattprobe_ebpf_map_entries{sel()} "
                    f"/ wattprobe_ebpf_map_max_entries{sel()})",
                    "{{node}} {{map}}",
                )
            ],
            "percentunit",
            max_value=1,
            steps=thresholds(("green", None), ("red", 0.8)),
            threshold_style="line",
        ),
        timeseries(
            "eBPF map evictions and insert failures",
            "Entries evicted from the bounded eBPF maps per second (solid) and events that found "
            "no room in them (dashed, refId B): non-zero means activity was lost or moved to its "
            "cgroup's exited total before userspace read it (raise the map sizes).",
            [
                Query(
                    "sum by (node, map) (rate(wattprobe_ebpf_map_evictions_total"
                    + sel()
                    + "[$__rate_interval]))",
                    "{{node}} {{map}} evicted",
                ),
                Query(
                    "sum by (node, map) (rate(wattprobe_ebpf_map_insert_failures_total"
                    + sel()
                    + "[$__rate_interval]))",
                    "{{node}} {{map}} insert failed",
                ),
            ],
            "ops",
            overrides=[dashed("byFrameRefID", "B")],
        ),
    )
    lay.row("Attribution")
    rate = "[$__rate_interval]"
    zone_energy = (
        f"sum by (node, zone) (rate(wattprobe_node_energy_joules_total{sel()}{rate}))"
        " or label_replace(sum by (node, zone, gpu) "
        f'(rate(wattprobe_gpu_energy_joules_total{sel()}{rate})), "zone", "gpu", "", "")'
    )
    lay.add(
        timeseries(
            "Energy given up, share of its zone",
            "Energy no activity reading (or, for a GPU, no process list) covered within the "
            "hold bound, as a share of its zone kind's energy (a GPU's: of that GPU's), per "
            "reason: late or failed activity reads, no_process_list. Billed to no pod: pods are "
            "billed that much too little. 0 on a healthy node (alert "
            "WattprobeEnergyUnattributed above 1 %).",
            [
                Query(
                    "sum by (node, zone, gpu, reason) "
                    f"(rate(wattprobe_node_unattributed_energy_joules_total{sel()}{rate})) "
                    f"/ on (node, zone, gpu) group_left () ({zone_energy})",
                    "{{node}} {{zone}} {{gpu}} {{reason}}",
                )
            ],
            "percentunit",
            steps=thresholds(("green", None), ("red", 0.01)),
            threshold_style="line",
        ),
        timeseries(
            "Energy held for its activity reading",
            "Joules held now because the interval's activity read (or a GPU's process list) "
            "was late or failed: handed to the pods when the reading that covers them comes, "
            "given up after 3 intervals (previous panel). Brief spikes are late reads caught "
            "up; a plateau means reads keep failing.",
            [
                Query(
                    f"max by (node, zone, gpu, mode) (wattprobe_node_pending_energy_joules{sel()})",
                    "{{node}} {{zone}} {{gpu}} {{mode}}",
                )
            ],
            "joule",
        ),
    )
    return dashboard(
        uid="wattprobe-exporter-health",
        title="wattprobe / Exporter health",
        description="Scrape targets, sources up per node, collect and scrape durations, eBPF, "
        "energy given up or held for its activity reading.",
        tags=TAGS,
        variables=[
            datasource_variable(),
            _cluster_variable(settings),
            _node_variable(settings),
        ],
        layout=lay,
    )


# -- 5. showback ----------------------------------------------------------------------------


def showback(settings: Settings) -> JSON:
    """Cost, facility energy and carbon per namespace (dashboards/showback.py)."""
    variables = [datasource_variable(), _cluster_variable(settings), _node_variable(settings)]
    return showback_dashboard(sel, variables, TAGS)


DASHBOARDS = {
    "cluster-power.json": cluster_power,
    "pod-power.json": pod_power,
    "gpu-fleet.json": gpu_fleet,
    "exporter-health.json": exporter_health,
    "showback.json": showback,
}


def build_all(settings: Settings) -> dict[str, JSON]:
    return {name: build(settings) for name, build in DASHBOARDS.items()}
