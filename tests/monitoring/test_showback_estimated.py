"""The showback table's "of kWh estimated" column, evaluated by promtool on known counters: the
part of a namespace's kWh from zones modelled on their node (the estimate's dram beside a RAPL
package without a DRAM domain), 0 where there is none, never the measured zones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dashboards.generate import DASHBOARDS_DIR
from tests.support.promql import substitute
from tests.support.promtool import run_rule_tests
from tests.support.realparts import require_binary

AMD = 'job="wattprobe",instance="10.0.0.1:28390",node="amd-1"'  # RAPL package, estimated dram
INTEL = 'job="wattprobe",instance="10.0.0.2:28390",node="intel-2"'  # RAPL package and dram
# (node, namespace, pod, zone, mode): J per minute
POD_INPUT = {
    (AMD, "ml", "train", "package", "active"): 7200,
    (AMD, "ml", "train", "dram", "active"): 600,
    (AMD, "batch", "job", "package", "active"): 3600,
    (INTEL, "ml", "api", "dram", "active"): 1200,  # measured: not in the column
    (INTEL, "web", "front", "package", "active"): 1800,
}
IDLE_BASELINES = [  # what each node exports: only amd-1's dram has a model baseline
    f'wattprobe_idle_power_watts{{{AMD},source="estimated",zone="dram",device="",origin="model"}}',
    f'wattprobe_idle_power_watts{{{AMD},source="rapl",zone="package",device="intel-rapl:0",'
    'origin="learned"}',
    f'wattprobe_idle_power_watts{{{INTEL},source="rapl",zone="dram",device="intel-rapl:0:1",'
    'origin="learned"}',
]


def column_expr(title: str, ref: str) -> str:
    board: dict[str, Any] = json.loads((DASHBOARDS_DIR / "showback.json").read_text())
    panels = [q for p in board["panels"] for q in (p, *p.get("panels", []))]
    panel = next(p for p in panels if p["title"] == title)
    rename = next(t for t in panel["transformations"] if t["id"] == "organize")
    assert rename["options"]["renameByName"][f"Value #{ref}"] == "of kWh estimated"
    (target,) = [t for t in panel["targets"] if t["refId"] == ref]
    return substitute(target["expr"], {"cluster": "", "node": ".*", "__range": "10m"})


@pytest.mark.real
def test_estimated_column_is_the_modelled_zones_only(tmp_path: Path) -> None:
    require_binary("promtool")  # fails before the work when missing
    series = [
        {
            "series": f'wattprobe_pod_energy_joules_total{{{node},namespace="{ns}",pod="{pod}",'
            f'pod_uid="uid-{pod}",zone="{zone}",mode="{mode}"}}',
            "values": f"0+{per_minute}x20",
        }
        for (node, ns, pod, zone, mode), per_minute in POD_INPUT.items()
    ]
    series += [{"series": s, "values": "6.664x20"} for s in IDLE_BASELINES]
    expected = [  # kWh over 10 minutes
        {"labels": '{namespace="ml"}', "value": 600 * 10 / 3.6e6},
        {"labels": '{namespace="batch"}', "value": 0},
        {"labels": '{namespace="web"}', "value": 0},
    ]
    case = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": column_expr("Namespace energy and carbon", "F"),
                        "eval_time": "20m",
                        "exp_samples": expected,
                    }
                ],
            }
        ],
    }
    run_rule_tests(case, tmp_path / "estimated.yml")
