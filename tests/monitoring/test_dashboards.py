"""The Grafana dashboards: generated JSON in sync, Grafana's schema, and structural rules."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_FILE, job_selector
from dashboards.generate import DASHBOARDS_DIR, drifted, rendered
from dashboards.grafana import DATASOURCE, GRID_WIDTH, SCHEMA_VERSION
from dashboards.wattprobe import Settings, build_all
from tests.support.grafanaschema import NODE_MODULES, grafana_schema_version, typecheck
from tests.support.promql import GRAFANA_BUILTINS, refs, substitute, template_variables
from tests.support.promtool import run_rule_tests
from tests.support.realparts import missing, require_binary

Dashboard = dict[str, Any]

COMMITTED: dict[str, Dashboard] = {
    p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS_DIR.glob("*.json"))
}
NODE_ENERGY_METRICS = ("wattprobe_node_energy_joules_total", "wattprobe_node_energy_joules:")


def panels(dashboard: Dashboard) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels inside collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: Dashboard) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel, target


def requires_schema_tools() -> None:
    require_binary("node")
    if not (NODE_MODULES / "@grafana" / "schema").is_dir():
        missing("tests/dashboards/node_modules (run `npm ci` in tests/dashboards)")


# -- generated and in sync --------------------------------------------------------------------


def test_the_five_dashboards_exist() -> None:
    assert set(COMMITTED) == {
        "cluster-power.json",
        "pod-power.json",
        "gpu-fleet.json",
        "exporter-health.json",
        "showback.json",
    }


def test_committed_json_is_what_the_generator_writes() -> None:
    assert drifted() == [], "dashboards drifted: run `python -m dashboards.generate`"


def test_drift_is_detected(tmp_path: Path) -> None:
    for name, text in rendered(Settings()).items():
        (tmp_path / name).write_text(text)
    assert drifted(tmp_path) == []
    first = sorted(COMMITTED)[0]
    edited = json.loads((tmp_path / first).read_text())
    edited["panels"][1]["title"] += " (edited by hand)"
    (tmp_path / first).write_text(json.dumps(edited, indent=2, sort_keys=True) + "\n")
    assert drifted(tmp_path) == [first]


# -- Grafana's schema -------------------------------------------------------------------------


@pytest.mark.real
def test_schema_version_is_the_one_of_grafanas_published_schema() -> None:
    requires_schema_tools()
    assert grafana_schema_version() == SCHEMA_VERSION
    for dashboard in COMMITTED.values():
        assert dashboard["schemaVersion"] == SCHEMA_VERSION


@pytest.mark.real
@pytest.mark.slow
def test_dashboards_typecheck_against_grafanas_schema(tmp_path: Path) -> None:
    requires_schema_tools()
    result = typecheck(COMMITTED, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.real
@pytest.mark.slow
def test_schema_check_rejects_what_grafana_would_not_load(tmp_path: Path) -> None:
    """One mistake per module: TypeScript reports excess keys only in otherwise valid literals."""
    requires_schema_tools()

    def broken(mistake: str) -> Dashboard:
        d = copy.deepcopy(COMMITTED["gpu-fleet.json"])
        timeseries = next(p for p in d["panels"] if p["type"] == "timeseries")
        stat = next(p for p in d["panels"] if p["type"] == "stat")
        if mistake == "enum":
            timeseries["options"]["legend"]["displayMode"] = "tabel"
        elif mistake == "type":
            stat["options"]["graphMode"] = 3
        elif mistake == "variable":
            d["templating"]["list"][1]["hide"] = 7
        elif mistake == "unknown key":
            d["refrsh"] = "1m"
        elif mistake == "unknown panel option":
            timeseries["options"]["legendd"] = {}
        return d

    mistakes = {
        "enum": "'\"tabel\"' is not assignable",
        "type": '\'number\' is not assignable to type \'"none" | "area" | "line"\'',
        "variable": "'7' is not assignable to type 'VariableHide",
        "unknown key": "'\"refrsh\"' does not exist",
        "unknown panel option": "'\"legendd\"' does not exist",
    }
    result = typecheck({f"broken-{i}.json": broken(m) for i, m in enumerate(mistakes)}, tmp_path)
    assert result.returncode != 0
    for i, (mistake, message) in enumerate(mistakes.items()):
        errors = [line for line in result.stdout.splitlines() if line.startswith(f"broken_{i}.ts")]
        assert len(errors) == 1 and message in errors[0], (mistake, result.stdout)


# -- structure --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_dashboard_metadata(name: str) -> None:
    dashboard = COMMITTED[name]
    assert re.fullmatch(r"wattprobe-[a-z-]+", dashboard["uid"]) and len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith("wattprobe / ")
    assert "wattprobe" in dashboard["tags"]
    assert dashboard["schemaVersion"] == SCHEMA_VERSION
    uids = [d["uid"] for d in COMMITTED.values()]
    assert uids.count(dashboard["uid"]) == 1


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_panel_ids_and_titles_are_unique(name: str) -> None:
    ids = [p["id"] for p in panels(COMMITTED[name])]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in panels(COMMITTED[name]) if p["type"] != "row"]
    assert len(titles) == len(set(titles)), "titles key the liveness test's pending lists"


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_panel_and_target_uses_the_datasource_variable(name: str) -> None:
    for panel in panels(COMMITTED[name]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    variables = {v["name"]: v for v in COMMITTED[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_grid_positions_fit_and_never_overlap(name: str) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(COMMITTED[name]):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= GRID_WIDTH
        if panel["type"] == "row":
            assert (g["x"], g["w"], g["h"]) == (0, GRID_WIDTH, 1)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_variable_used_exists_and_chains_in_order(name: str) -> None:
    dashboard = COMMITTED[name]
    order = [v["name"] for v in dashboard["templating"]["list"]]
    assert order[:3] == ["datasource", "cluster", "node"]
    for i, var in enumerate(dashboard["templating"]["list"]):
        used = template_variables(json.dumps(var.get("query", "")))
        assert used <= set(order[:i]), f"variable {var['name']} uses {used - set(order[:i])}"
    defined = set(order) | GRAFANA_BUILTINS
    for panel in panels(dashboard):
        texts = [panel["title"], *(json.dumps(t) for t in panel.get("targets", []))]
        for text in texts:
            assert template_variables(text) <= defined, (panel["title"], text)


def test_cluster_variable_is_hidden_unless_multi_cluster() -> None:
    for multi, hide in ((False, 2), (True, 0)):
        for dashboard in build_all(Settings(multi_cluster=multi)).values():
            cluster = next(v for v in dashboard["templating"]["list"] if v["name"] == "cluster")
            assert cluster["hide"] == hide


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_selector_filters_by_cluster(name: str) -> None:
    """cluster="$cluster" everywhere: on one cluster it matches the series without the label."""
    for panel, target in queries(COMMITTED[name]):
        for selector in refs(target["expr"]).selectors:
            assert any(
                m.label == "cluster" and m.op == "=" and m.value == "$cluster"
                for m in selector.matchers
            ), (panel["title"], selector.metric)


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_node_power_is_never_summed_across_zones(name: str) -> None:
    for panel, target in queries(COMMITTED[name]):
        expr = target["expr"]
        if not any(m in expr for m in NODE_ENERGY_METRICS) or "count" in expr.split("(")[0]:
            continue
        assert not re.search(r"\b(sum|avg)\s*\(", expr), (panel["title"], "aggregates without by")
        for clause in re.findall(r"\b(?:sum|avg) by \(([^)]*)\)", expr):
            assert "zone" in [x.strip() for x in clause.split(",")], (panel["title"], expr)


def test_recording_rules_used_by_dashboards_exist() -> None:
    recorded = {
        r["record"]
        for g in yaml.safe_load(RULES_FILE.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    used = {
        metric
        for dashboard in COMMITTED.values()
        for _, target in queries(dashboard)
        for metric in refs(target["expr"]).metrics
        if ":" in metric
    }
    assert used, "the dashboards should read the recording rules"
    assert used <= recorded


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_panel_explains_itself_and_has_a_unit(name: str) -> None:
    for panel in panels(COMMITTED[name]):
        if panel["type"] == "row":
            continue
        assert len(panel["description"]) > 20, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_the_job_name_is_set_in_one_place() -> None:
    other = build_all(Settings(job="monitoring/wattprobe"))
    text = json.dumps(other)
    assert json.dumps(job_selector("wattprobe"))[1:-1] not in text
    assert json.dumps(job_selector("monitoring/wattprobe"))[1:-1] in text


def test_temperature_panel_turns_red_at_85_celsius() -> None:
    fleet = COMMITTED["gpu-fleet.json"]
    panel = next(p for p in panels(fleet) if p["title"] == "GPU temperature")
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "red", "value": 85} in steps
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"


def test_memory_panel_has_a_predict_linear_forecast() -> None:
    fleet = COMMITTED["gpu-fleet.json"]
    panel = next(p for p in panels(fleet) if p["title"].startswith("GPU memory used"))
    assert any(
        "predict_linear(wattprobe_gpu_memory_used_bytes" in t["expr"] for t in panel["targets"]
    )


def test_estimated_power_is_marked() -> None:
    cluster = COMMITTED["cluster-power.json"]
    marked = [
        p
        for p in panels(cluster)
        if any(
            "byRegexp" in json.dumps(o["matcher"]) and "estimated" in json.dumps(o)
            for o in p.get("fieldConfig", {}).get("overrides", [])
        )
    ]
    assert marked, "no panel marks estimated series"
    for panel in marked:
        assert all("{{source}}" in t.get("legendFormat", "") for t in panel["targets"])


def test_refs_takes_no_grafana_variable_for_a_metric() -> None:
    expr = (
        'clamp_min(x_total{cluster="$cluster"} - (x_total{cluster="$cluster"} offset $__range '
        'or x_total{cluster="$cluster"} * 0), 0) or y offset 10m'
    )
    found = refs(expr)
    assert found.metrics == {"x_total", "y"}
    assert [s.metric for s in found.selectors] == ["x_total"] * 3 + ["y"]


# -- billing: what pods are billed is active + billed idle --------------------------------------

# per-minute joules of known pod series; over 10 minutes 360,000 J is 0.1 kWh
BILLED_INPUT = {
    # (namespace, pod, zone, gpu, mode): J per minute
    ("ml", "train", "gpu", "0", "active"): 36000,
    ("ml", "train", "gpu", "0", "idle"): 3600,  # idle of the GPU it holds, billed to it
    ("ml", "train", "package", "", "active"): 7200,
    ("ml", "web", "package", "", "active"): 3600,
    ("ml", "web", "package", "", "idle"): 1800,  # CPU idle handed out (--attribution.idle)
    ("batch", "job", "package", "", "active"): 18000,
    # holds GPU 1 and never uses it: only idle, billed to it
    ("notebooks", "lab", "gpu", "1", "idle"): 36000,
}
# the node's showback factors (docs/showback.md): cost = Energy x PUE x price, in EUR
BILLED_PUE, BILLED_PRICE_EUR = 1.25, 0.2
# a second node priced in USD, its pod in namespace ml too: never added to the EUR cost
USD_POD = ("ml", "api", "package", "", "active", 36000)  # 0.1 kWh over 10 minutes
USD_ROW = (USD_POD[:5], USD_POD[5])
BILLED_PRICE_USD = 0.5
# kWh over 10 minutes: (namespace, zone) -> (Energy, Active, Idle)
BILLED_NAMESPACES = {
    ("ml", "gpu"): (0.11, 0.1, 0.01),
    ("ml", "package"): (0.135, 0.13, 0.005),  # 0.1 of it on the USD node
    ("batch", "package"): (0.05, 0.05, 0.0),
    ("notebooks", "gpu"): (0.1, 0.0, 0.1),
}


def _billed_panel(dashboard: str, title: str) -> dict[str, Any]:
    panel = next(p for p in panels(COMMITTED[dashboard]) if p["title"] == title)
    assert panel["type"] == "table"
    organize = next(t for t in panel["transformations"] if t["id"] == "organize")
    columns = organize["options"]["renameByName"]
    assert columns == {
        "Value #A": "Energy",
        "Value #B": "Active",
        "Value #C": "Idle",
        "Value #D": "Cost",
    }
    assert [t["refId"] for t in panel["targets"]] == ["A", "B", "C", "D"]
    return panel


def _promtool_case(
    exprs: dict[str, str], expected: dict[str, list[tuple[str, float]]]
) -> Dashboard:
    series = []
    for (namespace, pod, zone, gpu, mode), per_minute in BILLED_INPUT.items():
        labels = (
            f'job="wattprobe",instance="10.0.0.1:28390",node="gpu-1",namespace="{namespace}",'
            f'pod="{pod}",pod_uid="uid-{pod}",zone="{zone}",mode="{mode}"'
        )
        labels += f',gpu="{gpu}"' if gpu else ""
        series.append(
            {
                "series": f"wattprobe_pod_energy_joules_total{{{labels}}}",
                "values": f"0+{per_minute}x20",
            }
        )
    namespace, pod, zone, _gpu, mode, per_minute = USD_POD
    node_b = 'job="wattprobe",instance="10.0.0.2:28390",node="cpu-2"'
    node_a = 'job="wattprobe",instance="10.0.0.1:28390",node="gpu-1"'
    series += [
        {
            "series": f'wattprobe_pod_energy_joules_total{{{node_b},namespace="{namespace}",'
            f'pod="{pod}",pod_uid="uid-{pod}",zone="{zone}",mode="{mode}"}}',
            "values": f"0+{per_minute}x20",
        },
        {"series": f"wattprobe_node_pue{{{node_a}}}", "values": f"{BILLED_PUE}x20"},
        {
            "series": f'wattprobe_energy_price_per_kwh{{{node_a},currency="EUR"}}',
            "values": f"{BILLED_PRICE_EUR}x20",
        },
        {
            "series": f'wattprobe_energy_price_per_kwh{{{node_b},currency="USD"}}',
            "values": f"{BILLED_PRICE_USD}x20",
        },
    ]
    return {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": exprs[ref],
                        "eval_time": "20m",
                        "exp_samples": [
                            {"labels": labels, "value": value} for labels, value in expected[ref]
                        ],
                    }
                    for ref in exprs
                ],
            }
        ],
    }


@pytest.mark.real
@pytest.mark.parametrize(
    ("dashboard", "title", "variables", "by"),
    [
        ("cluster-power.json", "Namespace energy over the selected range", {}, ("namespace",)),
        ("pod-power.json", "Pod energy, active and idle", {"namespace": "ml"}, ("pod",)),
    ],
)
def test_billed_energy_is_active_plus_billed_idle(
    dashboard: str, title: str, variables: dict[str, str], by: tuple[str, ...], tmp_path: Path
) -> None:
    """The billing tables' queries, evaluated by promtool on known pod counters: Energy is all
    that pods are billed (active + idle), Active and Idle its parts, each 0 rather than missing
    where a pod has none (a GPU held and never used is billed idle only)."""
    require_binary("promtool")  # fails before the work when missing
    values = {"cluster": "", "node": ".*", "pod": ".*", "__range": "10m", **variables}
    exprs = {
        t["refId"]: substitute(t["expr"], values)
        for t in _billed_panel(dashboard, title)["targets"]
    }
    usd_key = USD_POD[:5]
    want: dict[tuple[str, ...], list[float]] = {}
    priced: dict[tuple[str, ...], float] = {}  # (by, zone, currency) -> joules x PUE x price
    for (namespace, pod, zone, gpu, mode), per_minute in [*BILLED_INPUT.items(), USD_ROW]:
        if variables.get("namespace", namespace) != namespace:
            continue
        key = (namespace if by == ("namespace",) else pod, zone)
        joules = per_minute * 10.0  # whole joules: sums are exact, as in Prometheus
        acc = want.setdefault(key, [0.0, 0.0, 0.0])
        acc[0] += joules
        acc[1 if mode == "active" else 2] += joules
        # the USD node has no PUE: its IT energy is priced
        currency = "USD" if (namespace, pod, zone, gpu, mode) == usd_key else "EUR"
        priced[(*key, currency)] = priced.get((*key, currency), 0.0) + joules
    # in Prometheus's order of operations: joules (summed per node) x PUE x price / 3.6e6
    cost = {
        key: (j * BILLED_PUE * BILLED_PRICE_EUR if key[2] == "EUR" else j * BILLED_PRICE_USD)
        / 3.6e6
        for key, j in priced.items()
    }
    want = {key: [j / 3.6e6 for j in acc] for key, acc in want.items()}
    if by == ("namespace",):
        assert set(want) == set(BILLED_NAMESPACES)
        for key, kwh in BILLED_NAMESPACES.items():
            assert want[key] == pytest.approx(list(kwh)), key
        # never added across currencies
        assert cost[("ml", "package", "EUR")] == pytest.approx(0.035 * 1.25 * 0.2)
        assert cost[("ml", "package", "USD")] == pytest.approx(0.05)
    expected = {
        ref: [(f'{{{by[0]}="{key[0]}",zone="{key[1]}"}}', acc[i]) for key, acc in want.items()]
        for i, ref in enumerate("ABC")
    }
    expected["D"] = [
        (f'{{{by[0]}="{key[0]}",zone="{key[1]}",currency="{key[2]}"}}', value)
        for key, value in cost.items()
    ]
    run_rule_tests(_promtool_case(exprs, expected), tmp_path / "billing.yml")
