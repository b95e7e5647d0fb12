"""The kubeedge overlay with every component at once: each component changes what it says and
leaves the edge agent's identity and rights alone."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.manifests import COMPONENTS, Obj, build, build_with_components, env_of, one

EDGE_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _agent(objs: list[Obj], name: str) -> Obj:
    pod = one(objs, "DaemonSet", name)["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "wattprobe")


def test_every_component_leaves_the_edge_agent_its_rights(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, "kubeedge", *COMPONENTS)
    # kubelet-fine-grained-authz: the cloud role loses nodes/proxy ...
    cloud = one(objs, "ClusterRole", "wattprobe")["rules"]
    assert cloud == [{"apiGroups": [""], "resources": ["nodes/pods"], "verbs": ["get"]}]
    # ... and the edge role keeps what edgecore's MetaServer checks
    assert one(objs, "ClusterRole", "wattprobe-edge")["rules"] == EDGE_RULES
    for suffix in ("", "-edge"):
        binding = one(objs, "ClusterRoleBinding", f"wattprobe{suffix}")
        assert binding["roleRef"]["name"] == f"wattprobe{suffix}"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"wattprobe{suffix}", "namespace": "wattprobe"}
        ]
        pod = one(objs, "DaemonSet", f"wattprobe{suffix}")["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"wattprobe{suffix}"
    # critical-priority-quota lands in the agents' namespace
    assert one(objs, "ResourceQuota")["metadata"]["namespace"] == "wattprobe"
    # nvidia-runtimeclass: the cloud agent only
    assert one(objs, "DaemonSet", "wattprobe")["spec"]["template"]["spec"]["runtimeClassName"]
    assert (
        "runtimeClassName"
        not in one(objs, "DaemonSet", "wattprobe-edge")["spec"]["template"]["spec"]
    )


def test_edge_agent_listens_on_the_loopback_with_its_probes() -> None:
    """Only the forwarder scrapes the edge agent (over the loopback, hostNetwork): it does not
    listen on the node's network, and the kubelet probes it on the loopback."""
    objs = build("kubeedge")
    edge = _agent(objs, "wattprobe-edge")
    assert env_of(edge)["WATTPROBE_WEB_LISTEN_ADDRESS"] == "127.0.0.1:28390"
    for probe in PROBES:
        assert edge[probe]["httpGet"]["host"] == "127.0.0.1", probe
        assert edge[probe]["httpGet"]["port"] == "metrics", probe
    # the cloud agent is scraped by Prometheus over the pod network: every address
    cloud = _agent(objs, "wattprobe")
    assert "WATTPROBE_WEB_LISTEN_ADDRESS" not in env_of(cloud)
    assert all("host" not in cloud[p]["httpGet"] for p in PROBES)


def test_web_config_keeps_the_edge_probes_on_the_loopback(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, "kubeedge", "web-config")
    for name, host in (("wattprobe-edge", {"host": "127.0.0.1"}), ("wattprobe", {})):
        agent = _agent(objs, name)
        for probe in PROBES:
            assert agent[probe]["tcpSocket"] == {"port": "metrics", **host}, (name, probe)
            assert "httpGet" not in agent[probe]


def test_node_labels_grants_get_on_nodes_to_the_cloud_agent_alone(tmp_path: Path) -> None:
    """components/node-labels: its own role and binding (the agent reads its Node's
    instance-type label, exporter/kube/nodelabels.py); the agents' roles stay as they were."""
    plain = build("default")
    objs = build_with_components(tmp_path, "default", "node-labels")
    role = one(objs, "ClusterRole", "wattprobe-node-labels")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = one(objs, "ClusterRoleBinding", "wattprobe-node-labels")
    assert binding["roleRef"]["name"] == "wattprobe-node-labels"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "wattprobe", "namespace": "wattprobe"}
    ]
    assert one(objs, "ClusterRole", "wattprobe") == one(plain, "ClusterRole", "wattprobe")
