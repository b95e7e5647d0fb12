"""The edge agent's requests and limits (deploy/overlays/kubeedge/edge/resources-edge.yaml) are
the ones the edge DaemonSet renders with, the cloud DaemonSet keeps base/agent's, and the figures
they were set from (docs/benchmarks.md, "Edge pod footprint on a small node") fit inside them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy.manifests import DEPLOY, REPO, build, containers, one

EDGE_PATCH = DEPLOY / "overlays" / "kubeedge" / "edge" / "resources-edge.yaml"
BASE_PATCH = DEPLOY / "base" / "agent" / "resources.yaml"
SECTION = "## Edge pod footprint on a small node"


def _mib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * (1024.0 if unit == "Gi" else 1.0)


def _resources(path: Path) -> dict[str, dict[str, str]]:
    doc = yaml.safe_load(path.read_text())
    resources: dict[str, dict[str, str]] = doc["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    return resources


def _agent(name: str) -> dict[str, dict[str, str]]:
    ds = one(build("kubeedge"), "DaemonSet", name)
    (agent,) = [c for c in containers(ds["spec"]["template"]["spec"]) if c["name"] == "wattprobe"]
    resources: dict[str, dict[str, str]] = agent["resources"]
    return resources


def test_edge_agent_renders_with_the_edge_resources_and_cloud_keeps_base() -> None:
    assert _agent("wattprobe-edge") == _resources(EDGE_PATCH)
    assert _agent("wattprobe") == _resources(BASE_PATCH)


def test_edge_resources_cover_the_measured_footprint() -> None:
    """The request covers the measured steady RSS on the small node; the limit covers the
    steady RSS with eBPF plus the compile child's start-up peak, which runs in the same
    container."""
    text = (REPO / "docs" / "benchmarks.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    agent = re.search(r"wattprobe agent on a 200-process node.*?\| ([\d.]+) / ([\d.]+) /", section)
    child = re.search(r"compile child's peak.*?\| ([\d.]+) MiB .*?agent peak ([\d.]+) MiB", section)
    assert agent and child, section
    resources = _resources(EDGE_PATCH)
    assert _mib(resources["requests"]["memory"]) >= float(agent.group(2))
    assert _mib(resources["limits"]["memory"]) >= float(child.group(1)) + float(child.group(2))
    assert _mib(resources["limits"]["memory"]) <= _mib(_resources(BASE_PATCH)["limits"]["memory"])
