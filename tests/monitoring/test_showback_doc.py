"""docs/showback.md's worked example, run: its Inputs fed to the showback recording rules in
promtool, every number of its Results table checked (0 = no series)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_FILE, SHOWBACK_GROUP
from tests.support.promtool import run_rule_tests
from tests.support.realparts import require_binary

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "showback.md"

NODE = 'job="wattprobe",instance="10.0.0.1:28390",node="gpu-1"'
MODEL = "NVIDIA H100 80GB HBM3"
# the example's factors and node energy, as its text states them
FACTS = {
    "PUE": "1.25",
    "EUR per kWh": "0.25",
    "gCO2e/kWh": "400",
    "EUR per GPU-hour": "2",
    "node kWh": "4.5",
}
J_PER_MIN_PER_KWH_PER_HOUR = 60_000  # 1 kWh per hour is 60,000 J per minute

# Results column -> (pod rule, namespace rule, node overhead rule, node rule); None: no such row
COLUMNS: dict[str, tuple[str, str, str | None, str | None]] = {
    "kWh": (
        "namespace_pod:wattprobe_pod_energy_kwh:increase1h",
        "namespace:wattprobe_pod_energy_kwh:increase1h",
        "node:wattprobe_node_overhead_energy_kwh:increase1h",
        "node:wattprobe_node_energy_kwh:increase1h",
    ),
    "facility kWh": (
        "namespace_pod:wattprobe_pod_facility_energy_kwh:increase1h",
        "namespace:wattprobe_pod_facility_energy_kwh:increase1h",
        "node:wattprobe_node_overhead_facility_energy_kwh:increase1h",
        "node:wattprobe_node_facility_energy_kwh:increase1h",
    ),
    "cost EUR": (
        "namespace_pod:wattprobe_energy_cost:increase1h",
        "namespace:wattprobe_energy_cost:increase1h",
        "node:wattprobe_node_overhead_energy_cost:increase1h",
        "node:wattprobe_energy_cost:increase1h",
    ),
    "carbon g": (
        "namespace_pod:wattprobe_carbon_grams:increase1h",
        "namespace:wattprobe_carbon_grams:increase1h",
        "node:wattprobe_node_overhead_carbon_grams:increase1h",
        "node:wattprobe_carbon_grams:increase1h",
    ),
    "GPU-hours": (
        "namespace_pod:wattprobe_gpu_allocation_hours:increase1h",
        "namespace:wattprobe_gpu_allocation_hours:increase1h",
        None,
        None,
    ),
    "GPU cost EUR": (
        "namespace_pod:wattprobe_gpu_allocation_cost:increase1h",
        "namespace:wattprobe_gpu_allocation_cost:increase1h",
        None,
        None,
    ),
    "idle GPU-hours": (
        "namespace_pod:wattprobe_gpu_idle_hours:increase1h",
        "namespace:wattprobe_gpu_idle_hours:increase1h",
        None,
        None,
    ),
    "idle waste EUR": (
        "namespace_pod:wattprobe_gpu_idle_waste_cost:increase1h",
        "namespace:wattprobe_gpu_idle_waste_cost:increase1h",
        None,
        None,
    ),
}


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n#", start + 4)
    return text[start : end if end > 0 else len(text)]


def table(title: str) -> list[dict[str, str]]:
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section(title).splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]
    header, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]


def test_the_example_states_the_factors_the_test_uses() -> None:
    example = DOC.read_text().split("## Worked example", 1)[1].split("### Inputs", 1)[0]
    for phrase in (
        f"PUE **{FACTS['PUE']}**",
        f"**{FACTS['EUR per kWh']} EUR** per kWh",
        f"**{FACTS['gCO2e/kWh']}** gCO2e/kWh",
        f"**{FACTS['EUR per GPU-hour']} EUR** per GPU-hour for model `{MODEL}`",
        f"**{FACTS['node kWh']} kWh**",
    ):
        assert phrase in " ".join(example.split()), phrase


def _inputs() -> list[dict[str, Any]]:
    """The example's pods: (namespace, pod), kWh per hour, the GPU held and whether idle."""
    pods = []
    for row in table("Inputs"):
        namespace, pod = row["pod"].split("/")
        held = re.match(r"holds GPU (\d+), (busy|idle)", row["GPU"])
        pods.append(
            {
                "namespace": namespace,
                "pod": pod,
                "kwh": float(row["kWh"]),
                "gpu": held.group(1) if held else None,
                "idle": bool(held and held.group(2) == "idle"),
            }
        )
    return pods


def _series(pods: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Two hours of counters rising at the example's rates, its factors, and its GPUs."""

    def rising(kwh: float) -> str:
        return f"0+{kwh * J_PER_MIN_PER_KWH_PER_HOUR:g}x120"

    node_kwh = float(FACTS["node kWh"])
    pods_kwh = sum(p["kwh"] for p in pods)
    out = [
        {"series": f"wattprobe_node_pue{{{NODE}}}", "values": f"{FACTS['PUE']}x120"},
        {
            "series": f'wattprobe_energy_price_per_kwh{{{NODE},currency="EUR"}}',
            "values": f"{FACTS['EUR per kWh']}x120",
        },
        {
            "series": f"wattprobe_carbon_intensity_grams_per_kwh{{{NODE}}}",
            "values": f"{FACTS['gCO2e/kWh']}x120",
        },
        {
            "series": f'wattprobe_gpu_hour_price{{{NODE},currency="EUR",model="{MODEL}"}}',
            "values": f"{FACTS['EUR per GPU-hour']}x120",
        },
        # the node: its pods' energy and what stays on it (here host processes)
        {
            "series": f'wattprobe_node_energy_joules_total{{{NODE},zone="package",'
            'device="intel-rapl:0",source="rapl",mode="active"}',
            "values": rising(node_kwh),
        },
        {
            "series": f"wattprobe_container_energy_joules_total{{{NODE},"
            'container="system_processes",zone="package",mode="active"}',
            "values": rising(node_kwh - pods_kwh),
        },
    ]
    for p in pods:
        who = f'{NODE},namespace="{p["namespace"]}",pod="{p["pod"]}"'
        out.append(
            {
                "series": "wattprobe_pod_energy_joules_total"
                f'{{{who},zone="package",mode="active"}}',
                "values": rising(p["kwh"]),
            }
        )
        if p["gpu"] is not None:
            gpu = f'gpu="{p["gpu"]}",uuid="GPU-{p["gpu"]}"'
            out += [
                {
                    "series": f'wattprobe_gpu_info{{{NODE},{gpu},model="{MODEL}"}}',
                    "values": "1x120",
                },
                {
                    "series": f'wattprobe_gpu_allocation_info{{{who},{gpu},container="c"}}',
                    "values": "1x120",
                },
                {
                    "series": f"wattprobe_gpu_utilization_ratio{{{NODE},{gpu}}}",
                    "values": "0x120" if p["idle"] else "0.8x120",
                },
            ]
    return out


def _expected(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One promql_expr_test per rule: the Results table's non-zero numbers with their labels."""
    by_pod = {f"{p['namespace']}/{p['pod']}": p for p in pods}
    cases: dict[str, list[dict[str, Any]]] = {}
    for row in table("Results"):
        name = row["row"]
        for column, rules in COLUMNS.items():
            value = row[column]
            if name in by_pod:
                p = by_pod[name]
                rule, labels = rules[0], f'{NODE},namespace="{p["namespace"]}",pod="{p["pod"]}"'
                if rule.split(":")[1].startswith("wattprobe_gpu_"):
                    labels += f',gpu="{p["gpu"]}",uuid="GPU-{p["gpu"]}"'
                    if "cost" in rule:
                        labels += f',model="{MODEL}"'
            elif name.startswith("namespace "):
                rule, labels = rules[1], f'namespace="{name.split()[1]}"'
            else:
                assert name in ("node overhead", "node gpu-1"), name
                picked = rules[2] if name == "node overhead" else rules[3]
                if picked is None:
                    assert value == "", (name, column)
                    continue
                rule, labels = picked, NODE
            if "EUR" in column:
                labels += ',currency="EUR"'
            cases.setdefault(rule, [])
            if float(value) != 0:
                cases[rule].append({"labels": f"{rule}{{{labels}}}", "value": float(value)})
    return [
        {"expr": rule, "eval_time": "120m", "exp_samples": samples}
        for rule, samples in cases.items()
    ]


@pytest.mark.real
def test_the_worked_example_is_what_the_rules_compute(tmp_path: Path) -> None:
    require_binary("promtool")  # fails before the work when missing
    pods = _inputs()
    assert {p["namespace"] + "/" + p["pod"] for p in pods} == {
        "ml/train",
        "ml/notebook",
        "shop/web",
    }
    expected = _expected(pods)
    # every showback rule but the price joins' own is checked through the table (the example
    # has no MIG device: tests/alerts/showback.yml checks their prices)
    group = next(
        g for g in yaml.safe_load(RULES_FILE.read_text())["groups"] if g["name"] == SHOWBACK_GROUP
    )
    checked = {case["expr"] for case in expected}
    assert {r["record"] for r in group["rules"]} - checked == {
        "node_uuid:wattprobe_gpu_hour_price:max",
        "node_uuid:wattprobe_mig_device_hour_price:max",
    }
    test = {
        "rule_files": [str(RULES_FILE)],
        "evaluation_interval": "1m",
        "group_eval_order": ["wattprobe.gpu.alerts", SHOWBACK_GROUP],
        "tests": [
            {
                "name": "docs/showback.md worked example",
                "interval": "1m",
                "input_series": _series(pods),
                "promql_expr_test": expected,
            }
        ],
    }
    run_rule_tests(test, tmp_path / "example.yml", sort_keys=False)
