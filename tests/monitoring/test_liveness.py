"""Liveness: every dashboard query and every rule expression, run against a real Prometheus
scraping real exporters (tests/support/livestack.py), must parse, refer to series that exist, and -
for dashboard panels - return data whose legend labels are filled.

The fleet has every source: fixture nodes with RAPL, hwmon, fake NVML GPUs, pod names from a
kubelet or an apiserver and GPU allocations from PodResources, and this machine itself with real
eBPF probes. Every panel and every variable must therefore work: PENDING lists only what waits
for a series not merged yet. Should a panel need a source the fleet cannot have yet, it is listed
there with the reason; the list
is exact both ways (something failing that is not listed fails the test, and something listed
that works fails it too: "remove it from the list").

Keys: "panel <dashboard uid> / <panel title>", "variable $<name>", "metric <name>",
"label <metric>{<label>}".
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_FILE
from dashboards.generate import DASHBOARDS_DIR
from tests.sources.gpu.nvml.pods import POD_A, POD_B
from tests.support import liveebpf
from tests.support.livefactors import MIG_1G_PRICE
from tests.support.livegpus import APP_FAULT, BUSY_GPU, CRITICAL, HOT_GPU, HOTTER_GPU, OFF_THE_BUS
from tests.support.livekube import (
    GPU_NAMESPACE,
    H100_HOLDERS,
    H100_PODS,
    IDLE_GPU,
    IDLE_GPU_CLAIM,
    MIG_HOLDERS,
    MIG_PODS,
    POD_IDLE,
    pod_name,
)
from tests.support.livestack import SCRAPE_INTERVAL_S, LiveStack, start_live_stack
from tests.support.monitoringstack import PrometheusAPI, PromQLError
from tests.support.promql import (
    label_values_query,
    legend_labels,
    refs,
    substitute,
    template_variables,
)
from tests.support.realparts import require_binary

# the live stack serves per-container series: three drill-down panels and the pod-name checks
# read them (--collector.container)
pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.container_series]

COLLECT_S = float(os.environ.get("WATTPROBE_LIVENESS_SECONDS", "40"))

PENDING: dict[str, str] = {}

# Variable values the dashboards are looked at with, where Grafana's default (the first value)
# would not show everything: the first namespace, "batch", has no GPU pods and issues no GPU
# driver calls, so its GPU panels are rightly empty. The fleet's GPU pods (and the eBPF node's
# GPU client) run in GPU_NAMESPACE; it must be one of the variable's values.
SELECTED = {"namespace": GPU_NAMESPACE}

# Labels that legitimately do not exist in this test's single-cluster Prometheus.
OPTIONAL_LABELS = {"cluster": 'single cluster: no cluster label, cluster="" matches'}
# Variables that legitimately have no value here (hidden cluster picker, single cluster).
OPTIONAL_VARIABLES = {"cluster"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    prometheus = require_binary("prometheus")
    alertmanager = require_binary("prometheus-alertmanager")
    gcc = require_binary("gcc")  # builds the fake libnvidia-ml.so.1
    live = start_live_stack(
        tmp_path_factory.mktemp("live"), prometheus, alertmanager, gcc, COLLECT_S
    )
    try:
        yield live
    finally:
        live.stop()


# -- what exists in Prometheus ----------------------------------------------------------------


@dataclass
class Catalogue:
    """Metric names and their label names as stored in Prometheus (empty labels are absent)."""

    api: PrometheusAPI
    names: set[str]
    _labels: dict[str, set[str]] = field(default_factory=dict)

    def labels(self, metric: str) -> set[str]:
        if metric not in self._labels:
            series = self.api.series(f'{{__name__="{metric}"}}')
            self._labels[metric] = {k for s in series for k in s if k != "__name__"}
        return self._labels[metric]


@dataclass
class Verdict:
    """Problems of one thing (a query, a variable); pending keys it depends on."""

    problems: list[str] = field(default_factory=list)
    pending: set[str] = field(default_factory=set)  # keys of PENDING that explain problems
    # names (metrics, labels) not found and not announced in a pending list: typos, renames
    unknown_names: list[str] = field(default_factory=list)


def check_references(expr: str, extra_labels: set[str], cat: Catalogue) -> Verdict:
    """Every metric must exist; every label it names must exist on one of its metrics."""
    verdict = Verdict()
    found = refs(expr)
    present = set()
    missing_pending = set()  # pending metrics the expression names: their labels are unseen
    for metric in sorted(found.metrics):
        if metric in cat.names:
            present.add(metric)
            continue
        key = f"metric {metric}"
        verdict.problems.append(f"no series named {metric}")
        if key in PENDING:
            verdict.pending.add(key)
            missing_pending.add(key)
        else:
            verdict.unknown_names.append(f"no series named {metric}")
    if not present:
        return verdict
    available = set().union(*(cat.labels(m) for m in present))
    for label in sorted(
        (found.matcher_labels | found.grouping_labels | extra_labels) - set(OPTIONAL_LABELS)
    ):
        if label in available:
            continue
        verdict.problems.append(f"label {label} on none of {sorted(present)}")
        # a label may belong to a metric still pending (e.g. pod on wattprobe_gpu_allocation_info
        # joined with a GPU gauge): it is pending with that metric
        keys = ({f"label {m}{{{label}}}" for m in found.metrics} & set(PENDING)) or missing_pending
        verdict.pending |= keys
        if not keys:
            verdict.unknown_names.append(f"label {label} on none of {sorted(present)}")
    return verdict


# -- dashboards -------------------------------------------------------------------------------


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS_DIR.glob("*.json"))}


def resolve_variables(
    dashboard: dict[str, Any], cat: Catalogue, builtins: dict[str, str]
) -> tuple[dict[str, str], dict[str, Verdict]]:
    """Variable values as Grafana would set them by default; a verdict per variable."""
    values = dict(builtins)
    verdicts: dict[str, Verdict] = {}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        name = var["name"]
        parsed = label_values_query(substitute(var["query"], values))
        assert parsed, f"variable {name}: only label_values() queries are checked here"
        expr, label = parsed
        verdict = check_references(expr, {label}, cat)
        found = sorted({s[label] for s in cat.api.series(expr) if s.get(label)})
        if not found and name not in OPTIONAL_VARIABLES:
            verdict.problems.append(f"label_values({expr}, {label}) is empty")
            if f"variable ${name}" in PENDING:
                verdict.pending.add(f"variable ${name}")
        verdicts[name] = verdict
        if name in SELECTED:
            if SELECTED[name] not in found:
                verdict.problems.append(f"{SELECTED[name]!r} is not one of {found}")
            values[name] = SELECTED[name]
        elif var.get("includeAll"):
            values[name] = var.get("allValue", ".*")
        else:
            values[name] = found[0] if found else ""
    return values, verdicts


def run_target(
    target: dict[str, Any], expr: str, api: PrometheusAPI, window: tuple[float, float]
) -> list[Any]:
    start, end = window
    if target.get("instant"):
        return api.query(expr, at=end)
    return api.query_range(expr, start, end, step=SCRAPE_INTERVAL_S)


def check_panel(
    panel: dict[str, Any],
    values: dict[str, str],
    variable_verdicts: dict[str, Verdict],
    cat: Catalogue,
    window: tuple[float, float],
) -> Verdict:
    verdict = Verdict()
    for target in panel["targets"]:
        used = template_variables(target["expr"]) & set(variable_verdicts)
        for v in used:
            verdict.problems += [f"${v}: {p}" for p in variable_verdicts[v].problems]
            verdict.pending |= variable_verdicts[v].pending
        expr = substitute(target["expr"], values)
        legend = legend_labels(target.get("legendFormat", ""))
        refs_verdict = check_references(expr, legend, cat)
        verdict.problems += refs_verdict.problems
        verdict.pending |= refs_verdict.pending
        verdict.unknown_names += refs_verdict.unknown_names
        try:
            result = run_target(target, expr, cat.api, window)
        except PromQLError as err:
            # a query Prometheus rejects is never excused by a pending list
            raise AssertionError(f"{panel['title']} {target['refId']}: {err}\n{expr}") from err
        if not result:
            verdict.problems.append(f"{target['refId']} returned no data: {expr}")
            continue
        for label in sorted(legend):
            if not any(series["metric"].get(label) for series in result):
                verdict.problems.append(
                    f"{target['refId']} legend label {label} empty in every series"
                )
    return verdict


def judge(key: str, verdict: Verdict) -> str | None:
    """A failure message, or None when the outcome is what the pending lists say."""
    listed = key in PENDING
    if listed and verdict.unknown_names:
        return f"{key}: pending, but refers to names no list announces: {verdict.unknown_names}"
    if verdict.problems and not listed:
        if verdict.pending:
            pending = sorted(verdict.pending)
            return f"{key}: fails through pending {pending} but is not listed: {verdict.problems}"
        return f"{key}: {verdict.problems}"
    if not verdict.problems and listed:
        return f"{key}: works now - remove it from PENDING ({PENDING[key]})"
    return None


def dashboard_window(stack: LiveStack) -> tuple[tuple[float, float], dict[str, str]]:
    """The time range a dashboard shows (all of the run) and Grafana's built-in variables."""
    end = time.time()
    start = stack.started + 2 * SCRAPE_INTERVAL_S
    builtins = {
        "__rate_interval": f"{4 * SCRAPE_INTERVAL_S}s",  # Grafana: max(interval+scrape, 4*scrape)
        "__interval": f"{SCRAPE_INTERVAL_S}s",  # the step of range queries (run_target)
        "__interval_ms": f"{1000 * SCRAPE_INTERVAL_S}",
        "__range": f"{int(end - start)}s",
    }
    return (start, end), builtins


def test_every_dashboard_panel_query_returns_data(stack: LiveStack) -> None:
    api = stack.api
    cat = Catalogue(api, api.metric_names())
    (start, end), builtins = dashboard_window(stack)
    failures: list[str] = []
    seen: set[str] = set()
    checked = 0
    for dashboard in dashboards().values():
        values, variable_verdicts = resolve_variables(dashboard, cat, builtins)
        for name, verdict in variable_verdicts.items():
            key = f"variable ${name}"
            if key not in seen:
                seen.add(key)
                failures.append(judge(key, verdict) or "")
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            key = f"panel {dashboard['uid']} / {panel['title']}"
            seen.add(key)
            checked += 1
            failures.append(
                judge(key, check_panel(panel, values, variable_verdicts, cat, (start, end))) or ""
            )
    unknown = {k for k in PENDING if k.startswith(("panel ", "variable ")) and k not in seen}
    failures += [f"{k}: listed as pending but no such panel or variable" for k in sorted(unknown)]
    failures = [f for f in failures if f]
    assert checked > 50
    assert not failures, "\n".join(failures) + "\n" + stack.logs()


def run_panel(stack: LiveStack, uid: str, title: str) -> dict[str, list[Any]]:
    """A panel's results per refId, its queries run as Grafana would with default variables."""
    api = stack.api
    window, builtins = dashboard_window(stack)
    board = next(d for d in dashboards().values() if d["uid"] == uid)
    values, _ = resolve_variables(board, Catalogue(api, api.metric_names()), builtins)
    panel = next(p for p in board["panels"] if p["title"] == title)
    return {
        t["refId"]: run_target(t, substitute(t["expr"], values), api, window)
        for t in panel["targets"]
    }


def last(series: dict[str, Any]) -> float:
    """The value of an instant result, or the last value of a range result."""
    return float(series["value"][1] if "value" in series else series["values"][-1][1])


def test_gpu_panels_show_what_the_fake_gpus_did(stack: LiveStack) -> None:
    """Not only data, but the right data: the faults of tests/support/livegpus.py as a user sees
    them."""
    h100, a100 = stack.node("gpu").gpus, stack.node("sensorless").gpus
    assert h100 is not None and a100 is not None
    fleet = "wattprobe-gpu-fleet"

    def stat(title: str) -> float:
        (series,) = run_panel(stack, fleet, title)["A"]
        return last(series)

    assert stat("GPUs") == h100.scenario.gpu_count() + a100.scenario.gpu_count()
    (lost,) = run_panel(stack, fleet, "GPUs lost")["A"]
    assert {float(v) for t, v in lost["values"] if t < stack.faults_at - 1} == {0}
    assert last(lost) == 1
    # XID 79 once; XID 13 is not critical. Both are their GPU's first XID (a new series).
    assert stat("Critical XIDs in range") == 1
    bars = run_panel(stack, fleet, "XID errors")["A"]
    events = {
        (s["metric"]["node"], s["metric"]["gpu"], s["metric"]["xid"]): math.fsum(
            float(v) for _, v in s["values"]
        )
        for s in bars
    }
    assert events == {
        ("gpu", str(APP_FAULT[0]), str(APP_FAULT[1])): 1,
        ("gpu", str(OFF_THE_BUS[0]), str(OFF_THE_BUS[1])): 1,
    }
    # each bar stands after the faults, not before
    assert min(t for s in bars for t, v in s["values"] if float(v) > 0) >= stack.faults_at - 1

    mig = run_panel(stack, fleet, "MIG instances")
    used = {(s["metric"]["gpu_instance"], s["metric"]["profile"]): last(s) for s in mig["A"]}
    total = {(s["metric"]["gpu_instance"], s["metric"]["profile"]): last(s) for s in mig["B"]}
    want = {
        (a100.scenario[f"gpu.0.mig.{m}.gi"], a100.scenario[f"gpu.0.mig.{m}.name"].split()[-1]): m
        for m in range(4)
    }
    assert used == {k: a100.scenario.number(f"gpu.0.mig.{m}.memory.used") for k, m in want.items()}
    assert total == {
        k: a100.scenario.number(f"gpu.0.mig.{m}.memory.total") for k, m in want.items()
    }


def test_gpu_energy_rates_follow_power_and_split_between_pods(stack: LiveStack) -> None:
    """The fake counters advance at each GPU's power: their rate in Prometheus shows it."""
    api = stack.api
    # a window after the faults, so the lost GPU was lost all through it
    window = min(20, int(time.time() - stack.faults_at) - 2 * SCRAPE_INTERVAL_S)
    assert window >= 5, "collect longer (WATTPROBE_LIVENESS_SECONDS)"
    rates = {
        (s["metric"]["node"], s["metric"]["gpu"]): float(s["value"][1])
        for s in api.query(
            f"sum by (node, gpu) (rate(wattprobe_gpu_energy_joules_total[{window}s]))"
        )
    }
    power = {
        (s["metric"]["node"], s["metric"]["gpu"]): float(s["value"][1])
        for s in api.query("wattprobe_gpu_power_watts")
    }
    lost = ("gpu", str(OFF_THE_BUS[0]))
    assert set(rates) == set(power) | {lost}
    for key, watts in power.items():
        assert rates[key] == pytest.approx(watts, rel=0.15), key
    assert rates[lost] == 0  # lost (and its counter still) since the faults
    # GPU 0 is time-sliced: its two pods split its active energy by SM share, 60:20
    pods = {
        s["metric"]["pod_uid"]: float(s["value"][1])
        for s in api.query(
            'wattprobe_pod_energy_joules_total{node="gpu", zone="gpu", gpu="0", mode="active"}'
        )
    }
    assert pods[POD_A.pod_uid] / pods[POD_B.pod_uid] == pytest.approx(3, rel=0.01)


def test_pods_are_named_by_both_pod_sources(stack: LiveStack) -> None:
    """Every pod of the fixture nodes is named, through the kubelet and through the apiserver
    alike, and the pod picker lists the fleet's real pod names."""
    api = stack.api
    fixture_nodes = 'node=~"measured|gpu|sensorless|broken"'
    unnamed = api.query(f'wattprobe_pod_energy_joules_total{{{fixture_nodes}, pod=""}}')
    assert not unnamed, [s["metric"] for s in unnamed]

    def names(node: str) -> set[tuple[str, str, str]]:
        rows = api.series(f'wattprobe_container_cpu_seconds_total{{node="{node}", pod!=""}}')
        return {(r["namespace"], r["pod"], r.get("container", "")) for r in rows}

    by_kubelet, by_apiserver = names("measured"), names("broken")
    assert ("shop", "web-7d9c8b6f5-x2k4p", "nginx") in by_kubelet
    # the static pod too: the apiserver shows it as a mirror pod with another uid
    assert ("kube-system", "kube-apiserver-node-1", "kube-apiserver") in by_apiserver
    assert by_kubelet == by_apiserver

    board = next(d for d in dashboards().values() if d["uid"] == "wattprobe-pod-power")
    values, _ = resolve_variables(board, Catalogue(api, api.metric_names()), {})
    pod_var = next(v for v in board["templating"]["list"] if v["name"] == "pod")
    parsed = label_values_query(substitute(pod_var["query"], values))
    assert parsed is not None
    expr, label = parsed
    assert {s[label] for s in api.series(expr)} == {
        "trainer-0",  # the fixture's
        *(name for _pod, name, _container in (*H100_PODS, *MIG_PODS)),
        liveebpf.POD,
    }


def test_gpu_allocation_panels_show_who_holds_which_gpu(stack: LiveStack) -> None:
    """PodResources' assignments as the GPU fleet dashboard shows them: time-slices, MIG
    instances, and the one allocated GPU nobody uses."""
    h100, a100 = stack.node("gpu").gpus, stack.node("sensorless").gpus
    assert h100 is not None and a100 is not None
    fleet = "wattprobe-gpu-fleet"
    rows = run_panel(stack, fleet, "GPU allocation")["A"]
    got = {
        (
            s["metric"]["node"],
            s["metric"]["gpu"],
            s["metric"].get("gpu_instance", ""),
            s["metric"]["pod"],
        ): float(s["value"][1])
        for s in rows
    }
    want = {
        ("gpu", str(gpu), "", pod_name(pod)): h100.scenario.number(f"gpu.{gpu}.util.gpu") / 100
        for gpu, holders in H100_HOLDERS.items()
        for pod in holders
    }
    assert {k: v for k, v in got.items() if k[0] == "gpu"} == pytest.approx(want)
    # MIG instances: held, but NVML gives no utilization in MIG mode (n/a in the table)
    mig = {k[2:]: v for k, v in got.items() if k[0] == "sensorless"}
    assert set(mig) == {
        (a100.scenario[f"gpu.0.mig.{device}.gi"], pod_name(pod))
        for device, pod in MIG_HOLDERS.items()
    }
    assert all(math.isnan(v) for v in mig.values())
    assert set(got) == set(want) | {("sensorless", "0", *k) for k in mig}
    # the idle GPU is held through a DRA claim, the time-slices through the device plugin
    claims = {s["metric"].get("claim", "") for s in rows if s["metric"]["gpu"] == str(IDLE_GPU)}
    assert claims == {IDLE_GPU_CLAIM}
    assert {s["metric"].get("claim", "") for s in rows if s["metric"]["gpu"] != str(IDLE_GPU)} == {
        ""
    }

    (idle,) = run_panel(stack, fleet, "Allocated GPUs idle for 1 h")["A"]
    assert last(idle) == 1  # GPU 4 (held by the notebook); 6 and 7 are idle but not held


def test_ebpf_panels_show_the_gpu_client(stack: LiveStack) -> None:
    """The eBPF node's real probes: the GPU client's driver calls under its pod's name, and the
    maps' fill and (no) evictions."""
    calls = run_panel(stack, "wattprobe-pod-power", "Container GPU driver calls")["A"]
    assert {
        (s["metric"]["pod"], s["metric"]["container"], s["metric"]["driver"]) for s in calls
    } == {(liveebpf.POD, liveebpf.CONTAINER, "nvidia"), (liveebpf.POD, liveebpf.CONTAINER, "drm")}
    window = int(time.time() - stack.started) - 4 * SCRAPE_INTERVAL_S
    rates = {
        s["metric"]["driver"]: float(s["value"][1])
        for s in stack.api.query(
            # the pod: other ioctl-issuing containers may come and go on this machine
            "rate(wattprobe_container_gpu_ioctls_total"
            f'{{node="{liveebpf.NODE}", pod="{liveebpf.POD}"}}[{window}s])'
        )
    }
    # 40 NVIDIA and 10 DRM ioctls per batch, a batch at most every 0.1 s
    per_s = 1 / liveebpf.BATCH_S
    assert (
        0.3 * per_s * liveebpf.NVIDIA_PER_BATCH
        < rates["nvidia"]
        <= 1.05 * per_s * liveebpf.NVIDIA_PER_BATCH
    )
    assert rates["nvidia"] / rates["drm"] == pytest.approx(
        liveebpf.NVIDIA_PER_BATCH / liveebpf.DRM_PER_BATCH, rel=0.05
    )

    health = "wattprobe-exporter-health"
    fill = {s["metric"]["map"]: last(s) for s in run_panel(stack, health, "eBPF map fill")["A"]}
    assert set(fill) == {"tasks", "exited"}
    assert 0 < fill["tasks"] < 0.8  # this machine's processes, far from the bound
    drops = run_panel(stack, health, "eBPF map evictions and insert failures")
    for ref in ("A", "B"):
        assert {s["metric"]["map"] for s in drops[ref]} == {"tasks", "exited"}
        assert all(float(v) == 0 for s in drops[ref] for _t, v in s["values"]), ref


# -- rules ------------------------------------------------------------------------------------


# The edge alerts read the edge forwarder's own series (vmagent's vm_persistentqueue_*, the
# Prometheus agent's remote storage), which this stack has no forwarder for:
# tests/monitoring/test_edge_forwarding.py checks each group against a receiver fed by its
# forwarder.
EDGE_GROUP = "wattprobe.edge.alerts"
EDGE_GROUPS = {EDGE_GROUP, "wattprobe.edge-prometheus-agent.alerts"}


def rules() -> list[dict[str, Any]]:
    return [
        r
        for g in yaml.safe_load(RULES_FILE.read_text())["groups"]
        if g["name"] not in EDGE_GROUPS
        for r in g["rules"]
    ]


def test_every_rule_expression_parses_and_refers_to_existing_series(stack: LiveStack) -> None:
    api = stack.api
    cat = Catalogue(api, api.metric_names())
    failures = []
    for rule in rules():
        name = rule.get("alert") or rule["record"]
        try:
            api.query(rule["expr"])
        except PromQLError as err:
            failures.append(f"{name}: {err}")
            continue
        verdict = check_references(rule["expr"], set(), cat)
        if verdict.unknown_names:
            failures.append(f"{name}: {verdict.unknown_names}")
    # the metric and label entries of the pending lists must all still be missing
    for key in sorted(k for k in PENDING if k.startswith(("metric ", "label "))):
        if key.startswith("metric ") and key.removeprefix("metric ") in cat.names:
            failures.append(f"{key}: exists now - remove it from PENDING")
        if key.startswith("label "):
            metric, label = key.removeprefix("label ").rstrip("}").split("{")
            if metric in cat.names and label in cat.labels(metric):
                failures.append(f"{key}: exists now - remove it from PENDING")
    assert not failures, "\n".join(failures)


def test_recording_rules_produce_series(stack: LiveStack) -> None:
    api = stack.api
    for rule in rules():
        if "record" in rule:
            result = api.query(rule["record"])
            assert result, f"{rule['record']} has no series"
            assert all(float(s["value"][1]) >= 0 for s in result), rule["record"]
            assert any(float(s["value"][1]) > 0 for s in result), f"{rule['record']} is all zero"


# -- alerts -----------------------------------------------------------------------------------

# What the live fleet's faults must fire (tests/support/livestack.py, tests/support/livegpus.py,
# tests/support/livekube.py), as (alertname, node, severity, the labels that say which GPU, XID,
# instance or source): no more, no fewer.
WHICH = ("gpu", "gpu_instance", "xid", "source", "reason", "device")
AlertKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


def alert_key(labels: dict[str, str]) -> AlertKey:
    which = tuple((k, labels[k]) for k in WHICH if k in labels)
    return labels["alertname"], labels.get("node", ""), labels["severity"], which


EXPECTED_FIRING: set[AlertKey] = {
    ("WattprobeNodePowerEstimated", "sensorless", "info", ()),
    ("WattprobeNodePowerEstimated", liveebpf.NODE, "info", ()),  # this machine: no RAPL, hwmon
    ("WattprobeTargetDown", "gone", "warning", ()),
    (
        "WattprobeSourceDown",
        "broken",
        "warning",
        (("source", "rapl"), ("reason", "unparsable value")),
    ),
    ("WattprobeGpuHighUtilization", "gpu", "warning", (("gpu", str(BUSY_GPU)),)),
    ("WattprobeGpuPowerNearLimit", "gpu", "warning", (("gpu", str(BUSY_GPU)),)),
    ("WattprobeGpuTemperatureHigh", "gpu", "warning", (("gpu", str(HOT_GPU)),)),
    ("WattprobeGpuTemperatureHigh", "gpu", "warning", (("gpu", str(HOTTER_GPU)),)),
    ("WattprobeGpuTemperatureHigh", "gpu", "critical", (("gpu", str(HOTTER_GPU)),)),
    (
        "WattprobeGpuXidError",
        "gpu",
        "critical",
        (("gpu", str(OFF_THE_BUS[0])), ("xid", str(OFF_THE_BUS[1]))),
    ),
    ("WattprobeGpuLost", "gpu", "critical", (("gpu", str(OFF_THE_BUS[0])),)),
    # a warning since issue 20: pre-allocating frameworks sit at 95% by design
    (
        "WattprobeGpuMemoryNearlyFull",
        "sensorless",
        "warning",
        (("gpu", "0"), ("gpu_instance", "13")),
    ),
    # GPU 5 fell off the bus: its reading is unreadable (device_up 0) while NVML itself works
    ("WattprobeDeviceDown", "gpu", "warning", (("source", "nvml"), ("device", "5"))),
    # GPU 4 only: GPUs 6 and 7 are as idle but held by nobody, the MIG GPU reports no utilization
    ("WattprobeGpuIdleWhileAllocated", "gpu", "info", (("gpu", str(IDLE_GPU)),)),
}


def _firing(api: PrometheusAPI) -> list[dict[str, Any]]:
    return [a for a in api.alerts() if a["state"] == "firing"]


def test_alert_rules_fire_exactly_where_the_live_fleet_is_degraded(stack: LiveStack) -> None:
    """The real rules (`for` shortened, tests/support/livestack.py) against the real exporters."""
    firing = _firing(stack.api)
    got = {alert_key(a["labels"]) for a in firing}
    assert got == EXPECTED_FIRING, (
        f"unexpected: {sorted(got - EXPECTED_FIRING)}\nmissing: {sorted(EXPECTED_FIRING - got)}"
    )
    # the sensorless node's and this machine's rapl and hwmon are down with reason="absent": no
    # alert for them; nodes without a GPU (no libnvidia-ml.so.1, no /proc/driver/nvidia) report
    # nvml absent; no node has an AMD or Intel GPU: drm is absent on every one
    absent = stack.api.query('wattprobe_source_up{reason="absent"} == 0')
    nodes = ("sensorless", "measured", "broken", "gpu", liveebpf.NODE)
    assert {(s["metric"]["node"], s["metric"]["source"]) for s in absent} == {
        *((node, "drm") for node in nodes),
        ("sensorless", "rapl"),
        ("sensorless", "hwmon"),
        ("measured", "nvml"),
        ("broken", "nvml"),
        (liveebpf.NODE, "rapl"),
        (liveebpf.NODE, "hwmon"),
        (liveebpf.NODE, "nvml"),
    }
    # every pod source, PodResources and eBPF source of the fleet is up
    up = stack.api.query('wattprobe_source_up{source=~"kubelet|apiserver|podresources|ebpf"} == 1')
    assert sorted((s["metric"]["node"], s["metric"]["source"]) for s in up) == [
        ("broken", "apiserver"),
        (liveebpf.NODE, "ebpf"),
        (liveebpf.NODE, "kubelet"),
        ("gpu", "kubelet"),
        ("gpu", "podresources"),
        ("measured", "kubelet"),
        ("sensorless", "kubelet"),
        ("sensorless", "podresources"),
    ]
    gpu = stack.node("gpu").gpus
    assert gpu is not None
    by_key = {alert_key(a["labels"]): a for a in firing}
    lost = by_key[("WattprobeGpuLost", "gpu", "critical", (("gpu", str(OFF_THE_BUS[0])),))]
    assert lost["labels"]["uuid"] == gpu.uuid(OFF_THE_BUS[0])
    hot = next(
        a for k, a in by_key.items() if k[0] == "WattprobeGpuTemperatureHigh" and k[2] == "critical"
    )
    assert hot["annotations"]["summary"] == (
        f"GPU {HOTTER_GPU} on gpu is overheating ({CRITICAL[HOTTER_GPU]} °C)."
    )
    a100 = stack.node("sensorless").gpus
    assert a100 is not None
    idle = by_key[("WattprobeGpuIdleWhileAllocated", "gpu", "info", (("gpu", str(IDLE_GPU)),))]
    assert {k: idle["labels"][k] for k in ("namespace", "pod", "container", "uuid")} == {
        "namespace": GPU_NAMESPACE,
        "pod": pod_name(POD_IDLE),
        "container": "jupyter",
        "uuid": gpu.uuid(IDLE_GPU),
    }
    assert idle["annotations"]["summary"] == (
        f"GPU {IDLE_GPU} on gpu is allocated to {GPU_NAMESPACE}/{pod_name(POD_IDLE)} but idle."
    )
    # held through a DRA ResourceClaim: the alert names it
    assert idle["labels"]["claim"] == IDLE_GPU_CLAIM
    assert (
        f"through ResourceClaim {IDLE_GPU_CLAIM} for over an hour"
        in (idle["annotations"]["description"])
    )
    full = next(a for k, a in by_key.items() if k[0] == "WattprobeGpuMemoryNearlyFull")
    assert full["labels"]["compute_instance"] == "0"
    assert full["annotations"]["description"].startswith(
        f"GPU 0 instance 13 ({a100.uuid(0)}) on node sensorless has used 97% of its memory"
    )


def test_alertmanager_delivers_the_firing_alerts_to_a_webhook(stack: LiveStack) -> None:
    def delivered(alerts: list[dict[str, Any]]) -> bool:
        return {alert_key(a["labels"]) for a in alerts} >= EXPECTED_FIRING

    alerts = stack.webhook.wait_for(delivered, timeout=60)
    assert delivered(alerts), f"webhook got {alerts}\n{stack.logs()}"
    estimated = next(
        a
        for a in alerts
        if a["labels"]["alertname"] == "WattprobeNodePowerEstimated"
        and a["labels"]["node"] == "sensorless"
    )
    assert estimated["status"] == "firing"
    sensorless = stack.node("sensorless")
    assert sensorless.exporter is not None
    assert estimated["labels"] == {
        "alertname": "WattprobeNodePowerEstimated",
        "severity": "info",
        "job": "wattprobe",
        "node": "sensorless",
        "instance": f"127.0.0.1:{sensorless.exporter.port}",
    }
    annotations = estimated["annotations"]
    assert annotations["summary"] == "Power of node sensorless is estimated, not measured."
    assert "wattprobe on node sensorless found no RAPL or hwmon" in annotations["description"]
    assert annotations["runbook_url"].endswith("/docs/runbooks.md#wattprobenodepowerestimated")
    down = next(a for a in alerts if a["labels"]["alertname"] == "WattprobeTargetDown")
    assert down["labels"]["node"] == "gone" and down["labels"]["severity"] == "warning"
    gpu = stack.node("gpu")
    assert gpu.exporter is not None and gpu.gpus is not None
    xid = next(a for a in alerts if a["labels"]["alertname"] == "WattprobeGpuXidError")
    assert xid["status"] == "firing"
    assert xid["labels"] == {
        "alertname": "WattprobeGpuXidError",
        "severity": "critical",
        "job": "wattprobe",
        "node": "gpu",
        "instance": f"127.0.0.1:{gpu.exporter.port}",
        "gpu": str(OFF_THE_BUS[0]),
        "uuid": gpu.gpus.uuid(OFF_THE_BUS[0]),
        "xid": str(OFF_THE_BUS[1]),
    }
    assert xid["annotations"]["summary"] == (
        f"GPU {OFF_THE_BUS[0]} on gpu reported critical XID {OFF_THE_BUS[1]}."
    )
    assert xid["annotations"]["runbook_url"].endswith("/docs/runbooks.md#wattprobegpuxiderror")


# -- showback ---------------------------------------------------------------------------------


def test_showback_rules_price_the_live_fleet_by_its_factors(stack: LiveStack) -> None:
    """The showback rules on real exporters and the factor series of
    tests/support/livefactors.py: each node's own factors, no cost where no price, currencies
    apart, namespaces and nodes the sums of their parts, idle waste for the idle GPU's holder."""
    api = stack.api
    # evaluated once at one instant, so every rule reads the same recorded samples
    at = time.time() - 2 * SCRAPE_INTERVAL_S

    def by(expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(s["metric"].get(k, "") for k in labels): float(s["value"][1])
            for s in api.query(expr, at=at)
        }

    pods = "namespace_pod:wattprobe_pod_energy_kwh:increase1h"
    kwh = by(pods, "node", "namespace", "pod")
    cost = by(
        "namespace_pod:wattprobe_energy_cost:increase1h", "node", "namespace", "pod", "currency"
    )
    # gpu: PUE 1.25, 0.25 EUR; measured: PUE 1.5, 0.2 USD; sensorless: no PUE, 0.3 USD
    factor = {
        "gpu": ("EUR", 1.25 * 0.25),
        "measured": ("USD", 1.5 * 0.2),
        "sensorless": ("USD", 0.3),
    }
    assert {k[0] for k in cost} == set(factor)  # broken and the eBPF node have no price
    for (node, namespace, pod, currency), value in cost.items():
        assert currency == factor[node][0]
        assert value == pytest.approx(kwh[(node, namespace, pod)] * factor[node][1], rel=1e-9)
    # a namespace is the sum of its pods, per currency
    spaces = by("namespace:wattprobe_energy_cost:increase1h", "namespace", "currency")
    want: dict[tuple[str, ...], float] = {}
    for (_node, namespace, _pod, currency), value in cost.items():
        want[(namespace, currency)] = want.get((namespace, currency), 0.0) + value
    assert spaces == pytest.approx(want, rel=1e-9)
    # a node is its pods plus its overhead
    nodes = by("node:wattprobe_energy_cost:increase1h", "node", "currency")
    overhead = by("node:wattprobe_node_overhead_energy_cost:increase1h", "node", "currency")
    for (node, currency), value in nodes.items():
        parts = sum(v for k, v in cost.items() if k[0] == node) + overhead[(node, currency)]
        assert value == pytest.approx(parts, rel=1e-9)
    # carbon only where an intensity is set, on facility energy
    carbon = by("node:wattprobe_carbon_grams:increase1h", "node")
    facility = by("node:wattprobe_node_facility_energy_kwh:increase1h", "node")
    assert set(carbon) == {("gpu",), ("measured",)}
    assert carbon[("gpu",)] == pytest.approx(facility[("gpu",)] * 350, rel=1e-9)
    # GPU allocation: the H100s by their model's price; the A100's MIG devices (sensorless, in
    # MIG mode) by their resource's price (1g.5gb), else at their share of the GPU's 1.0 USD
    # (mig-3g-0 holds a 3g.20gb: 3/7); idle waste only for the idle GPU's pod
    keys = ("node", "pod", "gpu", "mig_device")
    gpu_cost = by("namespace_pod:wattprobe_gpu_allocation_cost:increase1h", *keys)
    hours = by("namespace_pod:wattprobe_gpu_allocation_hours:increase1h", *keys)
    assert {k[0] for k in gpu_cost} == {"gpu", "sensorless"}
    mig_pods = {pod_name(p) for p in MIG_HOLDERS.values()}
    assert {k[1] for k in gpu_cost if k[0] == "sensorless"} == mig_pods
    for key, value in gpu_cost.items():
        node, pod = key[:2]
        if node == "gpu":
            price = 2.5
        elif pod.startswith("mig-1g"):
            price = MIG_1G_PRICE
        else:
            price = 1.0 * int(pod.split("-")[1].removesuffix("g")) / 7
        assert value == pytest.approx(hours[key] * price, rel=1e-9), key
    waste = by("namespace_pod:wattprobe_gpu_idle_waste_cost:increase1h", "node", "pod", "gpu")
    assert set(waste) == {("gpu", pod_name(POD_IDLE), str(IDLE_GPU))}
    assert (
        0
        < waste[("gpu", pod_name(POD_IDLE), str(IDLE_GPU))]
        <= gpu_cost[("gpu", pod_name(POD_IDLE), str(IDLE_GPU), "")]
    )
