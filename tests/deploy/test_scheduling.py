"""Where the agent may run: the tolerations knob and the quota that lets its priority class in.

The taints and the admission rule are judged the way Kubernetes judges them (ToleratesTaint in
k8s.io/api/core/v1/toleration.go; the ResourceQuota admission's scope match for limited
resources), so the tests say whether a pod would schedule, not only what the YAML holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, OVERLAYS, build, build_with_components, of_kind

Obj = dict[str, Any]
Taint = tuple[str, str, str]  # key, value, effect

REPO = DEPLOY.parent
INSTALL = REPO / "docs" / "install.md"

CUSTOM_GPU_POOL: Taint = ("dedicated", "ml-training", "NoSchedule")
GKE_GPU: Taint = ("nvidia.com/gpu", "present", "NoSchedule")
DRAINING: Taint = ("example.com/maintenance", "true", "NoExecute")


def tolerates(toleration: Obj, taint: Taint) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    key, value, effect = taint
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("key") and toleration["key"] != key:
        return False
    operator = toleration.get("operator", "Equal")
    if operator == "Exists":
        return True  # an empty key with Exists matches every key
    return operator == "Equal" and bool(toleration.get("value", "") == value)


def schedulable(pod: Obj, taints: list[Taint]) -> bool:
    """NoSchedule and NoExecute taints keep a pod off unless a toleration matches each."""
    return all(
        any(tolerates(t, taint) for t in pod.get("tolerations", []))
        for taint in taints
        if taint[2] in {"NoSchedule", "NoExecute"}
    )


def agent_pods(objs: list[Obj]) -> dict[str, Obj]:
    return {
        ds["metadata"]["name"]: ds["spec"]["template"]["spec"] for ds in of_kind(objs, "DaemonSet")
    }


def test_the_toleration_model_matches_kubernetes() -> None:
    """The judge itself, on cases Kubernetes' own tests settle."""
    assert tolerates({"operator": "Exists"}, DRAINING)  # no key, no effect: everything
    assert tolerates({"operator": "Exists", "effect": "NoSchedule"}, CUSTOM_GPU_POOL)
    assert not tolerates({"operator": "Exists", "effect": "NoSchedule"}, DRAINING)
    assert tolerates({"key": "dedicated", "value": "ml-training"}, CUSTOM_GPU_POOL)  # Equal
    assert not tolerates({"key": "dedicated", "value": "web"}, CUSTOM_GPU_POOL)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists"}, CUSTOM_GPU_POOL)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_by_default_only_the_well_known_taints_are_tolerated(overlay: str) -> None:
    for name, pod in agent_pods(build(overlay)).items():
        assert schedulable(pod, [GKE_GPU]), name
        assert not schedulable(pod, [CUSTOM_GPU_POOL]), f"{name}: no blanket toleration by default"


@pytest.mark.parametrize("overlay", ["default", "gpu-only", "kubeedge"])
def test_tolerate_all_component_reaches_custom_gpu_pools(tmp_path: Path, overlay: str) -> None:
    pods = agent_pods(build_with_components(tmp_path, overlay, "tolerate-all-noschedule"))
    assert pods, "no DaemonSet"
    if overlay == "kubeedge":
        assert set(pods) == {"wattprobe", "wattprobe-edge"}  # both agents
    for name, pod in pods.items():
        assert schedulable(pod, [CUSTOM_GPU_POOL, GKE_GPU]), name
        assert schedulable(pod, [("node-role.kubernetes.io/control-plane", "", "NoSchedule")])
        # a node being drained with a NoExecute taint still gets rid of the agent
        assert not schedulable(pod, [DRAINING]), name


def _quantity(text: str) -> float:
    suffixes = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * suffixes[text[-1]] if text[-1] in suffixes else float(text)


def _admitted(quotas: list[Obj], namespace: str, pod: Obj, pods_already: int) -> bool:
    """Whether ResourceQuota admission lets one more pod in, on a cluster that (like GKE)
    limits the system-*-critical classes: such a pod needs a quota in its namespace whose
    scope covers its class and that has room for it."""
    critical = {"system-node-critical", "system-cluster-critical"}
    priority = pod.get("priorityClassName")
    if priority not in critical:
        return True
    for quota in quotas:
        if quota["metadata"].get("namespace") != namespace:
            continue
        expressions = quota["spec"].get("scopeSelector", {}).get("matchExpressions", [])
        covers = any(
            e["scopeName"] == "PriorityClass" and e["operator"] == "In" and priority in e["values"]
            for e in expressions
        )
        if covers and pods_already + 1 <= _quantity(str(quota["spec"]["hard"]["pods"])):
            return True
    return False


@pytest.mark.parametrize("overlay", ["default", "kubeedge"])
def test_critical_priority_needs_the_quota_component(tmp_path: Path, overlay: str) -> None:
    bare = build(overlay)
    with_quota = build_with_components(tmp_path, overlay, "critical-priority-quota")
    namespace = "wattprobe"
    for name, pod in agent_pods(bare).items():
        assert pod["priorityClassName"] == "system-node-critical"
        assert not _admitted(of_kind(bare, "ResourceQuota"), namespace, pod, 0), name
    quotas = of_kind(with_quota, "ResourceQuota")
    assert [q["metadata"]["namespace"] for q in quotas] == [namespace]
    for name, pod in agent_pods(with_quota).items():
        # a 5,000-node cluster mid rolling update, both agents of a KubeEdge cluster
        assert _admitted(quotas, namespace, pod, 2 * 2 * 5000 - 1), name
    # only the agents' class counts: an ordinary pod is no business of this quota
    assert _admitted(quotas, namespace, {"priorityClassName": "high"}, 10**9)


def test_install_doc_describes_both_knobs() -> None:
    text = INSTALL.read_text()
    for component in ("tolerate-all-noschedule", "critical-priority-quota"):
        assert f"deploy/components/{component}" in text, component
        assert (DEPLOY / "components" / component / "kustomization.yaml").is_file()
    assert "ResourceQuota" in text and "system-node-critical" in text
