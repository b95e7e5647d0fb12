"""The fleet benchmark's short form (tests/support/fleet.py; the long one is `make bench`, fleet):
a small
synthetic fleet remote-written into a real Prometheus that evaluates the shipped recording rules.
Every dashboard panel query must run without error and return data, and the rules must give the
sums the generator's known rates say: the fleet's power per zone is the sum of its nodes', a
namespace's the sum of its pods'."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from alerts.generate import RULES_FILE
from tests.support.fleet import (
    Fleet,
    Loaded,
    grafana_builtins,
    load,
    load_sharded,
    panel_queries,
    recorded,
    shard_of,
    time_query,
)
from tests.support.monitoringstack import PrometheusAPI
from tests.support.realparts import require_binary

pytestmark = [pytest.mark.real, pytest.mark.slow]

NODES = 8  # two GPU nodes (every fourth)
WINDOW_S = 900.0
STEP_S = 30.0

# Panels whose series the synthetic fleet cannot have, and why (exact both ways: a panel listed
# here that returns data fails the test too). The templates are a scrape without eBPF, of H100s
# without MIG, with no XID event.
NO_DATA = {
    "wattprobe-exporter-health/eBPF map fill/A": "the templates ran without eBPF",
    "wattprobe-exporter-health/eBPF map evictions and insert failures/A": "no eBPF",
    "wattprobe-exporter-health/eBPF map evictions and insert failures/B": "no eBPF",
    "wattprobe-pod-power/Container GPU driver calls/A": "GPU ioctls are counted by eBPF",
    "wattprobe-gpu-fleet/MIG instances/A": "the 8 x H100 scenario has MIG off",
    "wattprobe-gpu-fleet/MIG instances/B": "the 8 x H100 scenario has MIG off",
    "wattprobe-gpu-fleet/XID errors/A": "no XID event in the template",
}


@pytest.fixture(scope="module", params=["one-receiver", "two-shards"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    """The fleet in one receiver, and spread by node over two receivers with a query layer in
    front of them (docs/fleet.md, "Receivers that scale out"): every check below must hold for
    both, the rules' sums across the shards included."""
    binary = require_binary("prometheus")
    loader = load if request.param == "one-receiver" else load_sharded
    loaded = loader(Fleet(NODES), binary, tmp_path_factory.mktemp("fleet"), WINDOW_S, step_s=STEP_S)
    try:
        yield loaded
    finally:
        loaded.stop()


def test_shards_hold_disjoint_whole_nodes(fleet: Loaded) -> None:
    """Sharded: each receiver holds every series of its nodes and nothing of the others'."""
    if not fleet.shards:
        assert fleet.api.query("count(count by (node) (up))")[0]["value"][1] == str(NODES)
        return
    held = []
    for i, shard in enumerate(fleet.shards):
        api = PrometheusAPI(shard.url)
        nodes = {r["metric"]["node"] for r in api.query('count by (node) ({__name__=~".+"})')}
        assert nodes == {n for n in fleet.fleet.names if shard_of(n, len(fleet.shards)) == i}
        assert api.query('count({__name__=~".+:.+"})') == [], "recorded series on a shard"
        held.append(nodes)
    assert set().union(*held) == set(fleet.fleet.names)
    assert sum(map(len, held)) == NODES


def test_the_fleet_has_the_exposition_shape_it_claims() -> None:
    fleet = Fleet(4)
    per_node: dict[str, set[str]] = {}
    pods: dict[str, set[str]] = {}
    for s in fleet.series:
        labels = dict(s.labels)
        per_node.setdefault(labels["node"], set()).add(s.name)
        if s.name == "wattprobe_pod_energy_joules_total":
            pods.setdefault(labels["node"], set()).add(labels["pod"])
    assert sorted(per_node) == fleet.names
    assert all(len(p) == 110 for p in pods.values())
    gpu_nodes = [n for n, names in per_node.items() if "wattprobe_gpu_info" in names]
    assert gpu_nodes == ["edge-00003"]
    assert all({"up", "wattprobe_node_energy_joules_total"} <= names for names in per_node.values())
    keys = [s.labels for s in fleet.series]
    assert len(keys) == len(set(keys)), "a series twice"


def test_history_of_the_recorded_series_follows_every_rule() -> None:
    """Every recording rule of the shipped file is one the generator can give history for."""
    fleet = Fleet(1, gpu_every=0, pods_per_node=3)
    names = {s.name for s in recorded(fleet.series, RULES_FILE.read_text())}
    assert names == set(_record_names())


def _record_names() -> list[str]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [r["record"] for g in groups for r in g["rules"] if "record" in r]


def _by(fleet: Loaded, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1])
        for r in fleet.api.query(expr, at=fleet.evaluated_s)
    }


def test_fleet_power_is_the_sum_of_its_nodes(fleet: Loaded) -> None:
    cluster = _by(
        fleet, "sum by (zone) (cluster_zone_source:wattprobe_node_energy_joules:sum_rate5m)", "zone"
    )
    nodes = _by(
        fleet, "sum by (zone) (node_zone_source:wattprobe_node_energy_joules:sum_rate5m)", "zone"
    )
    assert {k[0] for k in cluster} == set(fleet.fleet.node_power)
    for (zone,), watts in cluster.items():
        assert math.isclose(watts, fleet.fleet.node_power[zone], rel_tol=1e-4), zone
        assert math.isclose(watts, nodes[(zone,)], rel_tol=1e-9), zone
    per_node = _by(
        fleet,
        'sum by (node) (node_zone_source:wattprobe_node_energy_joules:sum_rate5m{zone="package"})',
        "node",
    )
    assert sorted(k[0] for k in per_node) == fleet.fleet.names


def test_namespace_power_is_the_sum_of_its_pods(fleet: Loaded) -> None:
    namespaces = _by(
        fleet, "namespace_zone:wattprobe_pod_energy_joules:sum_rate5m", "namespace", "zone"
    )
    pods = _by(
        fleet,
        "sum by (namespace, zone) (namespace_pod_zone:wattprobe_pod_energy_joules:sum_rate5m)",
        "namespace",
        "zone",
    )
    assert set(namespaces) == set(fleet.fleet.namespace_power)
    for key, watts in fleet.fleet.namespace_power.items():
        assert math.isclose(namespaces[key], watts, rel_tol=1e-4), key
        assert math.isclose(namespaces[key], pods[key], rel_tol=1e-9), key


def test_every_panel_query_runs_and_returns_data(fleet: Loaded) -> None:
    window = (fleet.start_s, fleet.evaluated_s, STEP_S)
    queries = panel_queries(fleet.api, grafana_builtins(window[1] - window[0], STEP_S))
    assert len(queries) > 60
    failures = []
    for q in queries:
        key = f"{q.dashboard}/{q.panel}/{q.ref}"
        timed = time_query(fleet.api, q, window, runs=1)
        if timed.error:
            failures.append(f"{key}: {timed.error}")
        elif (timed.series == 0) != (key in NO_DATA):
            failures.append(f"{key}: {timed.series} series, listed as empty: {key in NO_DATA}")
    unknown = set(NO_DATA) - {f"{q.dashboard}/{q.panel}/{q.ref}" for q in queries}
    failures += [f"{k}: listed but no such query" for k in sorted(unknown)]
    assert not failures, "\n".join(failures) + "\n" + Path(fleet.daemon.log_path).read_text()
