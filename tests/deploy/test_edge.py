"""overlays/kubeedge: which path each node kind's metrics take, and the edge forwarder's settings.

Cloud nodes: scraped by the cloud Prometheus through Service wattprobe and its ServiceMonitor.
Edge nodes: never selected by them; their forwarder (vmagent, or Prometheus in agent mode in
overlays/kubeedge-prometheus-agent) scrapes the agent on the node's loopback and remote-writes.
Built with the real kubectl (tests/deploy/manifests.py); the schema validation of the same output
is tests/deploy/test_build.py's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.model.config import Config, parse_duration
from tests.deploy.manifests import (
    DEPLOY,
    OVERLAYS,
    Obj,
    build,
    kustomize,
    of_kind,
    one,
    pod_specs,
)
from tests.support.edgeforwarder import (
    PROMETHEUS_AGENT_OVERLAY,
    VMAGENT_OVERLAY,
    flag_value,
    parse_size,
    shipped_forwarder,
)
from tests.support.realparts import require_binary

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alerts" / "wattprobe.rules.yml"
AGENT_PORT = 28390
CLOUD, EDGE = "wattprobe", "wattprobe-edge"
FORWARDER_OVERLAYS = (VMAGENT_OVERLAY, PROMETHEUS_AGENT_OVERLAY)


def _pod_labels(objs: list[Obj]) -> dict[str, dict[str, str]]:
    """DaemonSet name -> the labels of the pods it runs."""
    return {
        ds["metadata"]["name"]: ds["spec"]["template"]["metadata"]["labels"]
        for ds in of_kind(objs, "DaemonSet")
    }


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def _monitored_pods(objs: list[Obj]) -> set[str]:
    """The DaemonSets whose pods some ServiceMonitor reaches (through the Services it selects)
    or some Service selects at all."""
    pods = _pod_labels(objs)
    reached: set[str] = set()
    services = of_kind(objs, "Service")
    for service in services:
        selector = service["spec"].get("selector", {})
        reached |= {name for name, labels in pods.items() if _selects(selector, labels)}
    for monitor in of_kind(objs, "ServiceMonitor"):
        match = monitor["spec"]["selector"].get("matchLabels", {})
        assert set(monitor["spec"]["selector"]) == {"matchLabels"}, "only matchLabels is modelled"
        for service in services:
            if _selects(match, service["metadata"].get("labels", {})):
                selector = service["spec"]["selector"]
                assert any(_selects(selector, labels) for labels in pods.values())
    # PodMonitors would reach pods directly: none may exist
    assert not of_kind(objs, "PodMonitor")
    return reached


@pytest.mark.real
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_service_or_servicemonitor_selects_edge_pods(overlay: str) -> None:
    objs = build(overlay)
    reached = _monitored_pods(objs)
    assert CLOUD in reached, "the cloud agents are scraped"
    assert EDGE not in reached
    for name, labels in _pod_labels(objs).items():
        if name == EDGE:
            for monitor in of_kind(objs, "ServiceMonitor"):
                assert not _selects(monitor["spec"]["selector"]["matchLabels"], labels)


@pytest.mark.real
def test_edge_pods_would_be_selected_without_their_own_component_label() -> None:
    """The check above has teeth: with the cloud agent's component label the edge pods are
    selected again (the issue's original finding)."""
    objs = build("kubeedge")
    edge = one(objs, "DaemonSet", EDGE)
    edge["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "exporter"
    assert EDGE in _monitored_pods(objs)


@pytest.mark.real
def test_each_node_kind_says_which_path_its_metrics_take() -> None:
    objs = build("kubeedge")
    paths = {
        ds["metadata"]["name"]: ds["metadata"]["annotations"]["wattprobe.io/metrics-path"]
        for ds in of_kind(objs, "DaemonSet")
    }
    assert "scraped by the cloud" in paths[CLOUD]
    assert "remote-write" in paths[EDGE] and "not scraped" in paths[EDGE]
    assert (
        "scraped by the cloud"
        in one(objs, "Service")["metadata"]["annotations"]["wattprobe.io/metrics-path"]
    )


def _forwarder(objs: list[Obj]) -> tuple[Obj, Obj]:
    pod = one(objs, "DaemonSet", EDGE)["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "forwarder")


@pytest.mark.real
@pytest.mark.parametrize("overlay", FORWARDER_OVERLAYS)
def test_forwarder_scrapes_the_agent_on_loopback_and_labels_the_node(overlay: str) -> None:
    objs = build(overlay)
    pod, container = _forwarder(objs)
    agent = next(c for c in pod["containers"] if c["name"] == "wattprobe")
    assert {p["containerPort"] for p in agent["ports"]} == {AGENT_PORT}
    assert pod["hostNetwork"] is True, "127.0.0.1 is the node's loopback"
    shipped = shipped_forwarder(overlay)
    jobs = {job["job_name"]: job for job in shipped.config["scrape_configs"]}
    listen = flag_value(shipped.args, shipped.engine.listen_flag)
    assert listen.startswith("127.0.0.1:"), "the forwarder's web UI stays on the loopback"
    targets = {"wattprobe": f"127.0.0.1:{AGENT_PORT}", "wattprobe-forwarder": listen}
    for name, target in targets.items():
        (static,) = jobs[name]["static_configs"]
        assert static["targets"] == [target]
    assert jobs["wattprobe"]["honor_labels"] is True  # as the cloud's ServiceMonitor
    # the node name: the downward API, in every series' node and instance labels
    assert shipped.env == {"NODE_NAME": "spec.nodeName"}
    if shipped.is_vmagent:
        for job in jobs.values():
            labels = job["static_configs"][0]["labels"]
            assert labels == {"node": "%{NODE_NAME}", "instance": "%{NODE_NAME}"}
    else:
        assert shipped.config["global"]["external_labels"]["node"] == "${NODE_NAME}"
        features = flag_value(shipped.args, "--enable-feature").split(",")
        assert {"agent", "expand-external-labels"} <= set(features)
    # every probe reaches the loopback listener
    port = int(listen.rsplit(":", 1)[1])
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container[kind]["httpGet"]
        assert (probe["host"], probe["port"]) == ("127.0.0.1", port), kind
        assert probe["path"] in {"/-/healthy", "/-/ready"}


@pytest.mark.real
@pytest.mark.parametrize("overlay", FORWARDER_OVERLAYS)
def test_forwarder_reads_its_files_where_they_are_mounted(overlay: str) -> None:
    objs = build(overlay)
    pod, container = _forwarder(objs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    shipped = shipped_forwarder(overlay)
    config = Path(flag_value(shipped.args, shipped.engine.config_flag))
    assert "configMap" in mounts[str(config.parent)]
    if shipped.is_vmagent:
        credentials = Path(flag_value(shipped.args, "-remoteWrite.bearerTokenFile"))
    else:
        remote = shipped.config["remote_write"][0]
        credentials = Path(remote["authorization"]["credentials_file"])
    secret = mounts[str(credentials.parent)]["secret"]
    assert secret["secretName"] == "wattprobe-remote-write"
    # optional: the forwarder buffers until the Secret exists instead of the pod not starting
    assert secret["optional"] is True
    queue = mounts[flag_value(shipped.args, shipped.engine.queue_flag)]
    # the queue outlives the pod (an upgrade replaces it): not an emptyDir
    assert queue["hostPath"]["type"] == "DirectoryOrCreate"


def _edge_alert(name: str) -> dict[str, Any]:
    rules = yaml.safe_load(RULES.read_text())
    alert: dict[str, Any] = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == name
    )
    return alert


def _edge_agent_keeps_the_default_interval() -> float:
    edge = one(build("kubeedge"), "DaemonSet", EDGE)
    agent = next(
        c for c in edge["spec"]["template"]["spec"]["containers"] if c["name"] == "wattprobe"
    )
    assert not any("interval" in a for a in agent.get("args", []))
    assert not any(e["name"] == "WATTPROBE_INTERVAL" for e in agent["env"])
    return Config.interval_s  # serve's default


@pytest.mark.real
def test_vmagent_settings_keep_their_promises() -> None:
    shipped = shipped_forwarder()
    assert shipped.is_vmagent
    scrape_s = parse_duration(shipped.config["global"]["scrape_interval"])
    flush_s = parse_duration(flag_value(shipped.args, "-remoteWrite.flushInterval"))
    # latency (docs/benchmarks.md): a sample waits at most one scrape and one flush
    assert scrape_s + flush_s <= 2.0
    # every interval of the edge agent (serve's default --interval, which the edge DaemonSet
    # keeps) is scraped at least once, however the two clocks drift: at least twice as long
    assert 2 * scrape_s <= _edge_agent_keeps_the_default_interval()
    # one sender: blocks leave in order, a SIGKILL loses at most the one block it holds
    assert flag_value(shipped.args, "-remoteWrite.queues") == "1"
    # a dead link's hanging request is given up in seconds, not the default minute
    assert parse_duration(flag_value(shipped.args, "-remoteWrite.sendTimeout")) <= 30
    # the alert fires at 75 % of the queue's bound (docs/install.md, "Sizing the queue")
    bound = parse_size(flag_value(shipped.args, "-remoteWrite.maxDiskUsagePerURL"))
    alert = _edge_alert("WattprobeEdgeQueueNearBound")
    assert str(int(0.75 * bound)) in alert["expr"]


@pytest.mark.real
def test_prometheus_agent_settings_keep_their_promises() -> None:
    shipped = shipped_forwarder(PROMETHEUS_AGENT_OVERLAY)
    assert not shipped.is_vmagent
    scrape_s = parse_duration(shipped.config["global"]["scrape_interval"])
    queue = shipped.config["remote_write"][0]["queue_config"]
    assert scrape_s + parse_duration(queue["batch_send_deadline"]) <= 1.5
    assert 2 * scrape_s <= _edge_agent_keeps_the_default_interval()
    # the alert fires at 75 % of the WAL's bound: 3 truncation periods (docs/install.md,
    # tests/monitoring/test_edge_forwarding.py); the retention flags do not bound the remote-write
    # buffer
    assert not any(a.startswith("--storage.agent.retention.") for a in shipped.args)
    period_s = parse_duration(flag_value(shipped.args, "--storage.agent.wal-truncate-frequency"))
    alert = _edge_alert("WattprobeEdgeWalNearBound")
    assert set(re.findall(r"> (\d+)", alert["expr"])) == {str(int(0.75 * 3 * period_s))}
    assert f"keeps {int(3 * period_s // 3600)}h" in alert["annotations"]["summary"]


@pytest.mark.real
def test_vmagent_accepts_the_shipped_scrape_config(tmp_path: Path) -> None:
    """vmagent's own parser (-dryRun, strict: unknown fields are errors) on the shipped file."""
    vmagent = require_binary("vmagent")
    shipped = shipped_forwarder()
    path = tmp_path / shipped.config_key
    path.write_text(yaml.safe_dump(shipped.config))
    result = subprocess.run(
        [vmagent, f"-promscrape.config={path}", "-dryRun", "-loggerLevel=ERROR"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NODE_NAME": "edge-1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.real
def test_promtool_accepts_the_prometheus_agent_config(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    shipped = shipped_forwarder(PROMETHEUS_AGENT_OVERLAY)
    token = tmp_path / "token"
    token.write_text("x\n")
    config = dict(shipped.config)
    remote = dict(config["remote_write"][0])
    remote["authorization"] = {**remote["authorization"], "credentials_file": str(token)}
    config["remote_write"] = [remote]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool, "check", "config", "--agent", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.real
def test_users_replace_the_forwarder_config_in_their_own_kustomization(tmp_path: Path) -> None:
    """The documented knob (docs/install.md): a configMapGenerator with behavior: replace."""
    text = (DEPLOY / "overlays/kubeedge/edge/forwarder/scrape.yml").read_text()
    mine = text.replace("scrape_interval: 1s\n", "scrape_interval: 2s\n", 1)
    assert mine != text
    (tmp_path / "scrape.yml").write_text(mine)
    overlay = os.path.relpath((DEPLOY / "overlays/kubeedge").resolve(), tmp_path.resolve())
    kustomization: dict[str, Any] = {
        "resources": [overlay],
        "configMapGenerator": [
            {
                "name": "wattprobe-forwarder-edge",
                "namespace": "wattprobe",
                "behavior": "replace",
                "files": ["scrape.yml"],
            }
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objs = kustomize(tmp_path)
    pod, _container = _forwarder(objs)
    name = next(v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v)
    assert one(objs, "ConfigMap", name)["data"]["scrape.yml"] == mine
    assert len([n for n, _ in pod_specs(objs)]) == 2
