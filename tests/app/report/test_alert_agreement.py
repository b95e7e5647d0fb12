"""The report recomputes WattprobeGpuIdleWhileAllocated's condition (so it works on a Prometheus
without the rules): its threshold and its default --idle-for must stay the alert's own."""

from __future__ import annotations

import re

import yaml

from alerts.generate import RULES_FILE
from exporter.app.cli import report_command
from exporter.app.report.promql import IDLE_UTILIZATION


def _alert() -> dict[str, str]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    rules = [
        r for g in groups for r in g["rules"] if r.get("alert") == "WattprobeGpuIdleWhileAllocated"
    ]
    (rule,) = rules
    return {str(k): str(v) for k, v in rule.items() if isinstance(v, str)}


def test_the_idle_threshold_is_the_alerts() -> None:
    (threshold,) = re.findall(
        r"wattprobe_gpu_utilization_ratio\[5m\]\)\)\s*<\s*([0-9.]+)", _alert()["expr"]
    )
    assert threshold == IDLE_UTILIZATION


def test_the_default_idle_for_is_the_alerts_for() -> None:
    (option,) = [p for p in report_command.params if p.name == "idle_for_s"]
    assert option.default == _alert()["for"]
