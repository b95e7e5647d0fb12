"""deploy/generate.py: alerts/ and dashboards/ -> deploy/base/generated, checked for drift."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import DEPLOY, REPO, kustomize, of_kind, one

GENERATE = DEPLOY / "generate.py"

RULES_A = """\
groups:
  - name: wattprobe-agent
    rules:
      - alert: WattprobeDown
        expr: up{job="wattprobe"} == 0
        for: 5m
        labels:
          severity: critical
        annotations:
          summary: "wattprobe on {{ $labels.node }} is down"
          description: |
            No scrape for 5 minutes.
            Energy counters of this node stop.
"""
RULES_B = """\
groups:
  - name: wattprobe-gpu
    interval: 1m
    rules:
      - record: node:wattprobe_gpu_power_watts:sum
        expr: sum by (node) (rate(wattprobe_gpu_energy_joules_total[5m]))
"""
# Trailing spaces, tabs, unicode and a final newline must all survive into the ConfigMap.
DASHBOARD = '{\n  "title": "Énergie · pods",  \n\t"panels": [],\n  "uid": "wp-pods"\n}\n'
DASHBOARD_2 = json.dumps({"title": "GPUs", "uid": "wp-gpus"})


def _generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository root with deploy/ (as committed) and small alerts/ and dashboards/."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("generated"))
    (tmp_path / "alerts").mkdir()
    (tmp_path / "alerts" / "a.rules.yml").write_text(RULES_A)
    (tmp_path / "alerts" / "b.rules.yml").write_text(RULES_B)
    (tmp_path / "alerts" / "notes.yml").write_text("not: a rule file\n")  # ignored: wrong suffix
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "Pods_Energy.json").write_text(DASHBOARD)
    (tmp_path / "dashboards" / "gpus.json").write_text(DASHBOARD_2)
    return tmp_path


def test_committed_output_matches_the_sources() -> None:
    """The one-source-of-truth check: fails when alerts/ or dashboards/ changed without
    `make manifests`."""
    proc = _generate(REPO, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_objects_reach_the_built_overlay(tree: Path) -> None:
    proc = _generate(tree)
    assert proc.returncode == 0, proc.stderr
    objs = kustomize(tree / "deploy" / "overlays" / "default")

    rule = one(objs, "PrometheusRule")
    expected = yaml.safe_load(RULES_A)["groups"] + yaml.safe_load(RULES_B)["groups"]
    assert rule["spec"] == {"groups": expected}
    assert rule["metadata"]["namespace"] == "wattprobe"

    maps = {cm["metadata"]["name"]: cm for cm in of_kind(objs, "ConfigMap")}
    assert set(maps) == {"wattprobe-dashboard-pods-energy", "wattprobe-dashboard-gpus"}
    assert maps["wattprobe-dashboard-pods-energy"]["data"] == {"Pods_Energy.json": DASHBOARD}
    assert maps["wattprobe-dashboard-gpus"]["data"] == {"gpus.json": DASHBOARD_2}
    for cm in maps.values():
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "wattprobe"


def test_check_reports_drift(tree: Path) -> None:
    assert _generate(tree).returncode == 0
    assert _generate(tree, "--check").returncode == 0
    (tree / "dashboards" / "gpus.json").write_text(json.dumps({"title": "GPUs v2"}))
    proc = _generate(tree, "--check")
    assert proc.returncode == 1
    assert "GPUs v2" in proc.stdout and "make manifests" in proc.stderr


def test_no_sources_gives_an_empty_rule_and_no_dashboards(tmp_path: Path) -> None:
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("generated"))
    assert _generate(tmp_path).returncode == 0
    objs = kustomize(tmp_path / "deploy" / "overlays" / "default")
    assert one(objs, "PrometheusRule")["spec"] == {"groups": []}
    assert of_kind(objs, "ConfigMap") == []


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        ("alerts/c.rules.yml", RULES_A, "'wattprobe-agent' is in both"),
        ("alerts/c.rules.yml", "rules: []\n", "not a Prometheus rule file"),
        ("dashboards/broken.json", "{", "not JSON"),
        ("dashboards/gpus!.json", "{}", "both map to wattprobe-dashboard-gpus"),
        ("dashboards/huge.json", json.dumps({"x": "y" * 300_000}), "too big"),
    ],
)
def test_bad_sources_are_refused(tree: Path, path: str, text: str, message: str) -> None:
    (tree / path).write_text(text)
    proc = _generate(tree)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tree / "deploy" / "base" / "generated").exists(), "nothing half-written"


def test_chart_gets_the_same_objects_and_loses_stale_files(tree: Path) -> None:
    """The Helm chart's files/generated: the same PrometheusRule text, the same ConfigMaps as a
    List, the forwarder's config files byte for byte; a file no source makes any more is
    reported by --check and removed by a run."""
    assert _generate(tree).returncode == 0
    chart = tree / "deploy/helm/wattprobe/files/generated"
    base = tree / "deploy/base/generated"
    assert (chart / "prometheusrule.yaml").read_text() == (base / "prometheusrule.yaml").read_text()
    listed = yaml.safe_load((chart / "dashboards.yaml").read_text())
    assert listed["kind"] == "List"
    assert listed["items"] == [
        d for d in yaml.safe_load_all((base / "dashboards.yaml").read_text())
    ]
    forwarder = tree / "deploy/overlays/kubeedge/edge/forwarder"
    for path in forwarder.iterdir():
        assert (chart / "forwarder" / path.name).read_bytes() == path.read_bytes()
    (chart / "forwarder" / "old.yml").write_text("x: 1\n")
    proc = _generate(tree, "--check")
    assert proc.returncode == 1
    assert "forwarder/old.yml: not generated any more" in proc.stdout
    assert _generate(tree).returncode == 0
    assert not (chart / "forwarder" / "old.yml").exists()
