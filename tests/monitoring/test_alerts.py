"""The rule file: promtool checks and unit tests, conventions, runbooks, the PrometheusRule."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import (
    DEFAULT_JOB,
    DEFAULT_RUNBOOK_BASE,
    PROMETHEUS_RULE_FILE,
    RULES_FILE,
    SHOWBACK_GROUP,
    job_selector,
    prometheus_rule,
    render_rules,
)
from dashboards.wattprobe import CRITICAL_XIDS
from tests.support.realparts import require_binary

REPO = Path(__file__).resolve().parents[2]
UNIT_TESTS = sorted((REPO / "tests" / "alerts").glob("*.yml"))
# Showback (docs/showback.md): recording rules no alert reads, tested by tests/alerts/showback.yml
SHOWBACK_TESTS = REPO / "tests" / "alerts" / "showback.yml"
RUNBOOKS = REPO / "docs" / "runbooks.md"

SEVERITIES = {"critical", "warning", "info"}
# The alerts issues 6 and 15 ask for, by name.
REQUIRED_ALERTS = {
    "WattprobeGpuHighUtilization",
    "WattprobeGpuMemoryNearlyFull",
    "WattprobeGpuTemperatureHigh",
    "WattprobeGpuPowerNearLimit",
    "WattprobeGpuXidError",
    "WattprobeGpuLost",
    "WattprobeGpuIdleWhileAllocated",
    "WattprobeTargetDown",
    "WattprobeTargetAbsent",
    "WattprobeSourceDown",
    "WattprobeNodePowerEstimated",
    # issue 15: per-device health
    "WattprobeDeviceDown",
    "WattprobeDeviceReadingsRejected",
    # issue 20: what a GPU team pages on, and the agent's own health
    "WattprobeGpuXidWarning",
    "WattprobeGpuEccUncorrected",
    "WattprobeGpuClocksThrottled",
    "WattprobeIntervalStale",
    "WattprobeEbpfMapFull",
    "WattprobeConfigReloadFailed",
    "WattprobeNodePowerAnomaly",
    "WattprobePodPowerAnomaly",
    # issue 16: edge nodes that remote-write through their forwarder
    "WattprobeEdgeNodeSilent",
    "WattprobeEdgeForwardingStalled",
    "WattprobeEdgeWalNearBound",
    # issue 30: the vmagent forwarder's queue
    "WattprobeEdgeQueueNearBound",
    "WattprobeEdgeQueueDropped",
    # issue 27: energy given up for want of an activity reading or a GPU process list
    "WattprobeEnergyUnattributed",
}
# issue 20 adds 119/120 (GSP timeout/error: the GPU needs a reset); 31 and 92 do not page
ISSUE_CRITICAL_XIDS = {48, 63, 64, 74, 79, 94, 95, 119, 120}
RUNBOOK_SUBSECTIONS = ("**Meaning.**", "**Likely causes", "**What to check", "**How to fix.**")


def groups() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in groups() for r in g["rules"] if "alert" in r]


def recording_rules() -> list[dict[str, Any]]:
    return [r for g in groups() for r in g["rules"] if "record" in r]


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool")
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """anchor -> section text, for every level-2 heading of docs/runbooks.md."""
    parts = re.split(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.M)
    return {github_anchor(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


# -- promtool ---------------------------------------------------------------------------------


@pytest.mark.real
def test_promtool_check_rules_accepts_the_rule_file() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules()) + len(recording_rules())} rules found" in result.stdout


@pytest.mark.real
def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS, "no promtool unit tests in tests/alerts"
    result = promtool("test", "rules", *map(str, UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(UNIT_TESTS), result.stdout


def _unit_tests_about(alert: str) -> list[Path]:
    """The unit test files that can notice a change to one alert: those that name it in an
    alert_rule_test, and any that query ALERTS. promtool evaluates an alert only for the
    alertnames a file asks about, so the others pass whatever the alert does; running only
    these keeps the mutation check to ~2 minutes instead of ~10 (anomaly.yml alone is 7 s)."""
    named = re.compile(rf"^\s*alertname:\s*{re.escape(alert)}\s*$", re.MULTILINE)
    return [t for t in UNIT_TESTS if named.search(t.read_text()) or "ALERTS" in t.read_text()]


def _run_unit_tests_against(
    rules: list[dict[str, Any]], workdir: Path, tests: list[Path] = UNIT_TESTS
) -> bool:
    """Run unit tests against modified rules laid out like the repository. The showback group
    is left out: no alert reads it, and evaluating its rules made each file about a third
    slower (anomaly.yml 9 s -> 15 s)."""
    (workdir / "alerts").mkdir(parents=True, exist_ok=True)
    kept = [g for g in rules if g["name"] != SHOWBACK_GROUP]
    (workdir / "alerts" / RULES_FILE.name).write_text(yaml.safe_dump({"groups": kept}))
    tests_dir = workdir / "tests" / "alerts"
    tests_dir.mkdir(parents=True, exist_ok=True)
    for test in UNIT_TESTS:
        shutil.copy(test, tests_dir / test.name)
    result = promtool("test", "rules", *(str(tests_dir / t.name) for t in tests))
    return result.returncode == 0


def test_mutation_runs_leave_out_only_what_no_alert_can_notice() -> None:
    """The mutation check runs without the showback group and never runs showback.yml (which
    needs that group): sound while no alert reads a showback series and showback.yml tests
    no alert."""
    showback = next(g for g in groups() if g["name"] == SHOWBACK_GROUP)
    assert all("record" in r for r in showback["rules"])
    for alert in alert_rules():
        for rule in showback["rules"]:
            assert rule["record"] not in alert["expr"], alert["alert"]
    assert "alert_rule_test" not in SHOWBACK_TESTS.read_text()
    for alert in {r["alert"] for r in alert_rules()}:
        assert SHOWBACK_TESTS not in _unit_tests_about(alert), alert


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize(
    "index", range(len(alert_rules())), ids=[r["alert"] for r in alert_rules()]
)
def test_every_alert_rule_has_a_firing_case_and_a_pending_case(index: int, tmp_path: Path) -> None:
    """Mutation check: the unit tests must notice an alert that never fires, and one whose
    `for` is dropped (it would fire during what the tests assert is the pending phase)."""
    never = groups()
    rule = [r for g in never for r in g["rules"] if "alert" in r][index]
    about = _unit_tests_about(rule["alert"])
    assert about, f"no unit test file names {rule['alert']}"
    rule["expr"] = "vector(1) > 2"
    assert not _run_unit_tests_against(never, tmp_path / "never", about), (
        f"no unit test expects {rule['alert']} ({rule['labels']['severity']}) to fire"
    )
    eager = groups()
    rule = [r for g in eager for r in g["rules"] if "alert" in r][index]
    assert rule.get("for"), f"{rule['alert']} has no `for`: nothing to be pending on"
    rule["for"] = "0s"
    assert not _run_unit_tests_against(eager, tmp_path / "eager", about), (
        f"no unit test checks {rule['alert']} ({rule['labels']['severity']}) stays quiet "
        "before its `for`"
    )


# -- conventions ------------------------------------------------------------------------------


def test_the_issue_alerts_are_all_there() -> None:
    assert {r["alert"] for r in alert_rules()} == REQUIRED_ALERTS


def test_temperature_has_a_warning_and_a_critical_tier() -> None:
    tiers = {
        r["labels"]["severity"]: r
        for r in alert_rules()
        if r["alert"] == "WattprobeGpuTemperatureHigh"
    }
    assert set(tiers) == {"warning", "critical"}
    assert "> 85" in tiers["warning"]["expr"]


@pytest.mark.parametrize(
    "rule", alert_rules(), ids=lambda r: f"{r['alert']}-{r['labels']['severity']}"
)
def test_alert_follows_the_conventions(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert re.fullmatch(r"Wattprobe(?:[A-Z][a-z0-9]+)+", name), f"{name}: CamelCase, Wattprobe..."
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert "{{" in annotations["description"], f"{name}: the description shows no value or label"
    assert annotations["runbook_url"] == f"{DEFAULT_RUNBOOK_BASE}#{name.lower()}"


def test_every_runbook_url_points_at_a_complete_section() -> None:
    sections = runbook_sections()
    for rule in alert_rules():
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in sections, f"docs/runbooks.md has no section #{anchor}"
        for part in RUNBOOK_SUBSECTIONS:
            assert part in sections[anchor], f"runbook #{anchor} lacks {part}"


def test_monitoring_doc_lists_every_alert_with_its_severities() -> None:
    rows = re.findall(
        r"^\| (Wattprobe\w+) \| ([a-z /]+) \|", (REPO / "docs" / "monitoring.md").read_text(), re.M
    )
    documented = {name: set(sev.split(" / ")) for name, sev in rows}
    actual: dict[str, set[str]] = {}
    for rule in alert_rules():
        actual.setdefault(rule["alert"], set()).add(rule["labels"]["severity"])
    assert documented == actual


def test_every_runbook_section_belongs_to_an_alert() -> None:
    alerts = {r["alert"].lower() for r in alert_rules()}
    assert set(runbook_sections()) == alerts


def test_xid_alert_uses_the_critical_xids_of_the_issue() -> None:
    xid = next(r for r in alert_rules() if r["alert"] == "WattprobeGpuXidError")
    lists = set(re.findall(r'xid=~"([0-9|]+)"', xid["expr"]))
    assert lists == {CRITICAL_XIDS}, "every branch of the expression uses the same list"
    assert {int(x) for x in CRITICAL_XIDS.split("|")} == ISSUE_CRITICAL_XIDS


def test_xids_31_and_92_do_not_page() -> None:
    """31 is an application's illegal memory access; 92 a high corrected-ECC rate (a ticket)."""
    for rule in alert_rules():
        for xids in re.findall(r'xid=~?"([0-9|]+)"', rule["expr"]):
            listed = set(xids.split("|"))
            assert "31" not in listed, rule["alert"]
            if "92" in listed:
                assert rule["labels"]["severity"] == "warning", rule["alert"]


def test_memory_nearly_full_does_not_page() -> None:
    """Frameworks that pre-allocate GPU memory sit at 95% by design."""
    rule = next(r for r in alert_rules() if r["alert"] == "WattprobeGpuMemoryNearlyFull")
    assert rule["labels"]["severity"] == "warning"


def test_source_down_excludes_absent_hardware() -> None:
    rule = next(r for r in alert_rules() if r["alert"] == "WattprobeSourceDown")
    assert 'reason!="absent"' in rule["expr"]


def test_target_alerts_use_up_of_the_configured_job() -> None:
    down = next(r for r in alert_rules() if r["alert"] == "WattprobeTargetDown")
    absent = next(r for r in alert_rules() if r["alert"] == "WattprobeTargetAbsent")
    selector = job_selector(DEFAULT_JOB)
    assert f"up{{{selector}}}" in down["expr"]
    # quiet while edge forwarders (their own job, set in their scrape.yml) reported in the past
    # day: their nodes' silence is the edge alerts' to report
    assert absent["expr"].strip() == (
        f"absent(up{{{selector}}})\nunless on ()\n"
        'count(max_over_time(up{job="wattprobe-forwarder"}[1d:5m]))'
    )
    # the job name appears nowhere else, so rendering for another job is complete
    text = RULES_FILE.read_text()
    assert text.count("job=") - text.count('job="wattprobe-forwarder"') == 2


def test_recording_rules_follow_level_metric_operations() -> None:
    for rule in recording_rules():
        level, metric, operations = rule["record"].split(":")
        assert re.fullmatch(r"[a-z]+(?:_[a-z]+)*", level), rule["record"]
        assert metric.startswith("wattprobe_") and not metric.endswith("_total"), rule["record"]
        assert re.fullmatch(r"[a-z0-9_]+", operations), rule["record"]
        # the level names the labels it keeps: the expression names them, or keeps them from
        # a recorded series of that level (a showback cost is its kWh times a factor)
        inherited = {
            label
            for read in re.findall(r"\b([a-z_]+):wattprobe_", rule["expr"])
            for label in read.split("_")
        }
        for label in level.split("_"):
            assert label in inherited or re.search(rf"\b{label}\b", rule["expr"]), (
                f"{rule['record']}: {label}"
            )


def test_recorded_power_never_sums_across_node_zones() -> None:
    """Power rules keep zones apart. Showback adds a pod's zone kinds, which do not overlap
    (package, dram, gpu: docs/attribution.md), and sums node zones only after `and` with the
    zone kinds split among workloads (test_showback_node_energy_counts_attributed_zones)."""
    power = [r for g in groups() if g["name"] != SHOWBACK_GROUP for r in g["rules"]]
    for rule in (r for r in power if "record" in r):
        for clause in re.findall(r"sum by \(([^)]*)\)", rule["expr"]):
            assert "zone" in [x.strip() for x in clause.split(",")], rule["record"]


# -- PrometheusRule ---------------------------------------------------------------------------


def test_prometheusrule_is_generated_from_the_rule_file() -> None:
    assert PROMETHEUS_RULE_FILE.read_text() == prometheus_rule(RULES_FILE.read_text()), (
        "alerts/prometheusrule.yaml drifted: run `python -m alerts.generate`"
    )


def test_prometheusrule_wraps_exactly_the_same_groups() -> None:
    wrapped = yaml.safe_load(PROMETHEUS_RULE_FILE.read_text())
    assert wrapped["apiVersion"] == "monitoring.coreos.com/v1"
    assert wrapped["kind"] == "PrometheusRule"
    assert wrapped["metadata"]["name"]
    assert wrapped["spec"]["groups"] == groups()


@pytest.mark.real
def test_rules_render_for_another_job_and_runbook_location(tmp_path: Path) -> None:
    source = RULES_FILE.read_text()
    rendered = render_rules(source, job='kube-system/wattprobe "x"', runbook_base="https://x/rb.md")
    assert job_selector(DEFAULT_JOB) not in rendered
    assert rendered.count(r'job="kube-system/wattprobe \"x\""') == 2
    assert DEFAULT_RUNBOOK_BASE not in rendered
    assert rendered.count("runbook_url: https://x/rb.md#") == len(alert_rules())
    path = tmp_path / "rules.yml"
    path.write_text(rendered)
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    wrapped = yaml.safe_load(prometheus_rule(rendered))
    assert wrapped["spec"]["groups"] == yaml.safe_load(rendered)["groups"]


# -- showback ---------------------------------------------------------------------------------


def showback_rules() -> dict[str, str]:
    group = next(g for g in groups() if g["name"] == SHOWBACK_GROUP)
    return {r["record"]: r["expr"] for r in group["rules"]}


def test_every_showback_rule_is_checked_by_its_unit_tests() -> None:
    cases = yaml.safe_load(SHOWBACK_TESTS.read_text())["tests"]
    tested = {t["expr"].strip() for c in cases for t in c.get("promql_expr_test", [])}
    assert set(showback_rules()) <= tested


def test_showback_node_energy_counts_attributed_zones() -> None:
    """Node zones overlap (package contains core): the node's IT energy counts the zone kinds
    split among workloads (those of its system_processes pseudo-container) and its GPUs."""
    expr = showback_rules()["node:wattprobe_node_energy_kwh:increase1h"]
    assert re.search(
        r"increase\(wattprobe_node_energy_joules_total\[1h\]\)\s+and on \([^)]*\bzone\)\s+"
        r'wattprobe_container_energy_joules_total\{container="system_processes"\}',
        expr,
    )


def test_idle_gpu_waste_reads_the_idle_alert_by_its_for() -> None:
    """Idle waste counts the minutes WattprobeGpuIdleWhileAllocated fired: its expression and
    `for` stay its only definition."""
    alert = next(r for r in alert_rules() if r["alert"] == "WattprobeGpuIdleWhileAllocated")
    assert alert["for"] == "1h"
    expr = showback_rules()["namespace_pod:wattprobe_gpu_idle_hours:increase1h"]
    assert 'ALERTS{alertname="WattprobeGpuIdleWhileAllocated", alertstate="firing"}' in expr
    cases = yaml.safe_load(SHOWBACK_TESTS.read_text())
    assert cases["group_eval_order"].index("wattprobe.gpu.alerts") < cases[
        "group_eval_order"
    ].index(SHOWBACK_GROUP)


def test_costs_keep_their_currency() -> None:
    """Never a sum across currencies: every cost rule that aggregates keeps currency."""
    for record, expr in showback_rules().items():
        if "cost" in record or "price" in record:
            for clause in re.findall(r"sum by \(([^)]*)\)", expr):
                assert "currency" in [x.strip() for x in clause.split(",")], record
