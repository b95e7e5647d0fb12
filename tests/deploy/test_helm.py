"""The Helm chart (deploy/helm/wattprobe), rendered by real Helm: lint, every values profile,
the schema, and the same objects as the kustomize overlays, so the two never drift."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.app.registry import REGISTRY
from exporter.kube.podsources import choices as pod_source_choices
from tests.deploy.helmchart import (
    CHART,
    HELM_LABELS,
    PROFILES,
    helm,
    keyed,
    parse,
    profile_values,
    render,
    render_profile,
)
from tests.deploy.manifests import (
    COMPONENTS,
    REPO,
    Obj,
    build,
    build_with_components,
    of_kind,
    one,
    operator_validator,
    version_tuple,
)

OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
KUBE_VERSIONS = [
    v for v in kubernetes_validate.utils.all_versions() if version_tuple(v)[:2] >= (1, 29)
]
# The chart's values for what the kustomize components do (deploy/components/*).
COMPONENT_VALUES: dict[str, Any] = {
    "runtimeClassName": "nvidia",  # nvidia-runtimeclass
    # kubelet-fine-grained-authz, node-labels
    "rbac": {"kubeletFineGrainedAuthz": True, "readNodeLabels": True},
    "webConfig": {"enabled": True},  # web-config
    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],  # tolerate-all-noschedule
    "criticalPriorityQuota": {"enabled": True},  # critical-priority-quota
    "showback": {"configMap": {"enabled": True}},  # showback
}
# Everything switched on at once, with the extra labels kube-prometheus-stack selects by.
EVERYTHING: dict[str, Any] = {
    **COMPONENT_VALUES,
    "namespace": {"create": True},
    "edge": {"enabled": True},
    "image": {"tag": "0.2.0", "digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": [{"name": "ghcr"}],
    "collectors": {"process": True, "nvml": False},
    "extraArgs": ["--interval=10s"],
    "extraEnv": [{"name": "WATTPROBE_LOG_LEVEL", "value": "debug"}],
    "serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
    "dashboards": {"labels": {"team": "platform"}},
    "webConfig": {
        "enabled": True,
        "createSecret": True,
        "files": {"web-config.yml": "tls_server_config: {}\n"},
    },
}


def _diff(expected: Obj, got: Obj) -> str:
    a = json.dumps(expected, indent=1, sort_keys=True).splitlines()
    b = json.dumps(got, indent=1, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "kustomize", "helm", lineterm="", n=2))


def _assert_same_objects(kustomized: list[Obj], helmed: list[Obj]) -> None:
    want, got = keyed(kustomized, helm_rendered=False), keyed(helmed, helm_rendered=True)
    assert sorted(got) == sorted(want), "the chart renders other objects than kustomize"
    for key in sorted(want):
        assert got[key] == want[key], f"{key} differs:\n{_diff(want[key], got[key])}"


def test_chart_lints_clean_with_every_profile() -> None:
    """`helm lint --strict` (warnings are errors) of the chart with each profile, for the oldest
    supported Kubernetes (Chart.yaml's kubeVersion must admit it)."""
    for profile in PROFILES:
        report = helm().lint(
            str(CHART),
            profile_values(profile),
            strict=True,
            namespace="wattprobe",
            kube_version="v1.29.0",
        )
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not report["errors"] and not problems, (profile, report)


@pytest.mark.parametrize("profile", PROFILES)
def test_profile_renders_the_overlays_objects(profile: str) -> None:
    """ci/<overlay>-values.yaml renders exactly deploy/overlays/<overlay> (namespace.create on:
    kustomize ships the Namespace; Helm users usually let Helm create it)."""
    _assert_same_objects(build(profile), render_profile(profile, namespace={"create": True}))


def test_values_for_every_component_render_kubeedge_with_every_component(tmp_path: Path) -> None:
    """kubeedge + every component (kustomize) equals the kubeedge profile with the values
    that stand for them (COMPONENT_VALUES)."""
    kustomized = build_with_components(tmp_path, "kubeedge", *COMPONENTS)
    values = {**profile_values("kubeedge"), **COMPONENT_VALUES, "namespace": {"create": True}}
    _assert_same_objects(kustomized, render(values))


def test_the_comparison_has_teeth() -> None:
    """A value that changes one field makes the comparison fail."""
    with pytest.raises(AssertionError, match="DaemonSet"):
        _assert_same_objects(
            build("default"), render_profile("default", privileged=True, namespace={"create": True})
        )


def _validate(obj: Obj) -> None:
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    if obj["kind"] in OPERATOR_KINDS:
        errors = [
            f"{list(e.absolute_path)}: {e.message}"
            for e in operator_validator(obj["kind"]).iter_errors(obj)
        ]
        assert not errors, f"{name}: {errors}"
        return
    for version in (KUBE_VERSIONS[0], KUBE_VERSIONS[-1]):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} on {version}: {'.'.join(map(str, exc.path))}: {exc}")


@pytest.mark.slow  # kubernetes-validate of ~25 distinct objects twice: seconds
def test_rendered_objects_validate() -> None:
    """Every object any profile (or EVERYTHING) renders: built-in kinds by kubernetes-validate
    --strict for 1.29 and the newest it ships, the Operator's kinds by the vendored CRD schemas
    (tests/deploy/crds). An object rendered the same by several profiles is checked once."""
    distinct: dict[str, Obj] = {}
    for objs in [*(render_profile(p) for p in PROFILES), render(EVERYTHING)]:
        assert len(objs) >= 10
        for obj in objs:
            distinct.setdefault(json.dumps(obj, sort_keys=True), obj)
    kinds = {o["kind"] for o in distinct.values()}
    assert {"DaemonSet", "ConfigMap", "Secret", "ResourceQuota", "Namespace"} <= kinds
    for obj in distinct.values():
        _validate(obj)


def test_defaults_leave_the_namespace_to_helm() -> None:
    objs = render()
    assert not of_kind(objs, "Namespace")
    assert all(o["metadata"].get("namespace") in (None, "wattprobe") for o in objs)
    for obj in objs:
        assert set(HELM_LABELS) <= set(obj["metadata"]["labels"]), obj["metadata"]["name"]


def test_extra_labels_reach_servicemonitor_rule_and_dashboards() -> None:
    objs = render(EVERYTHING)
    release = {"release": "kube-prometheus-stack"}
    assert release.items() <= one(objs, "ServiceMonitor")["metadata"]["labels"].items()
    assert release.items() <= one(objs, "PrometheusRule")["metadata"]["labels"].items()
    dashboards = [
        o for o in of_kind(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]
    ]
    for cm in dashboards:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["labels"]["team"] == "platform"
    # the same dashboards, byte for byte, as dashboards/*.json
    shipped = {p.name: p.read_text(encoding="utf-8") for p in (REPO / "dashboards").glob("*.json")}
    assert {k: v for cm in dashboards for k, v in cm["data"].items()} == shipped
    # and the same rule groups as alerts/*.rules.yml
    groups = [
        g
        for p in sorted((REPO / "alerts").glob("*.rules.yml"))
        for g in yaml.safe_load(p.read_text())["groups"]
    ]
    assert one(objs, "PrometheusRule")["spec"]["groups"] == groups


def test_monitoring_objects_can_be_switched_off() -> None:
    off = {"enabled": False}
    objs = render({"serviceMonitor": off, "prometheusRule": off, "dashboards": off})
    assert {o["kind"] for o in objs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "DaemonSet",
    }


def test_agent_settings_from_values() -> None:
    objs = render(EVERYTHING)
    cloud = one(objs, "DaemonSet", "wattprobe")["spec"]["template"]["spec"]
    agent = cloud["containers"][0]
    assert agent["image"] == "ghcr.io/wattprobe/wattprobe:0.2.0@sha256:" + "ab" * 32
    assert agent["args"] == [
        "serve",
        "--no-collector.nvml",
        "--collector.process",
        "--interval=10s",
    ]
    assert {"name": "WATTPROBE_LOG_LEVEL", "value": "debug"} in agent["env"]
    assert cloud["imagePullSecrets"] == [{"name": "ghcr"}]
    secret = one(objs, "Secret", "wattprobe-web-config")
    assert secret["stringData"] == {"web-config.yml": "tls_server_config: {}\n"}
    # the default image follows the chart's appVersion
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = one(render(), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/wattprobe/wattprobe:{chart['appVersion']}"


def _edge(objs: list[Obj]) -> tuple[Obj, Obj]:
    pod = one(objs, "DaemonSet", "wattprobe-edge")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "forwarder")


def test_edge_forwarder_comes_from_values() -> None:
    """Engine-neutral: image, args and probes of the forwarder are values; a config file given
    in values replaces the shipped one and renames the ConfigMap (pods roll)."""
    shipped_pod, _ = _edge(render_profile("kubeedge"))
    values = profile_values("kubeedge")
    values["edge"] = {
        "enabled": True,
        "forwarder": {
            "image": {"repository": "docker.io/victoriametrics/vmagent", "tag": "v1.0.0"},
            "args": ["-promscrape.config=/etc/wattprobe/forwarder/scrape.yml"],
            "config": {"scrape.yml": "scrape_configs: []\n"},
            "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/health", "port": 28391}},
        },
    }
    objs = render(values)
    pod, forwarder = _edge(objs)
    assert forwarder["image"] == "docker.io/victoriametrics/vmagent:v1.0.0"
    assert forwarder["args"] == ["-promscrape.config=/etc/wattprobe/forwarder/scrape.yml"]
    assert forwarder["livenessProbe"]["httpGet"]["path"] == "/health"
    name = next(v for v in pod["volumes"] if v["name"] == "forwarder-config")["configMap"]["name"]
    assert (
        name
        != next(v for v in shipped_pod["volumes"] if v["name"] == "forwarder-config")["configMap"][
            "name"
        ]
    )
    config = one(objs, "ConfigMap", name)
    assert config["data"]["scrape.yml"] == "scrape_configs: []\n"
    for path in sorted((CHART / "files" / "generated" / "forwarder").iterdir()):
        if path.name != "scrape.yml":  # the file the values replaced
            assert config["data"][path.name] == path.read_text(encoding="utf-8")


def test_edge_agent_listens_on_the_loopback() -> None:
    pod, _ = _edge(render_profile("kubeedge"))
    agent = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["WATTPROBE_WEB_LISTEN_ADDRESS"] == "127.0.0.1:28390"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert agent[probe]["httpGet"]["host"] == "127.0.0.1", probe


BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"imagee": {"tag": "x"}}, "additional properties 'imagee' not allowed"),
    ({"image": {"tag": "v1 beta"}}, "/image/tag"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"podSource": "kubelett"}, "/podSource': value must be one of"),
    ({"ebpf": {"gpuIoctls": True}}, "/ebpf/gpuIoctls"),  # unquoted `on` in YAML 1.1
    ({"collectors": {"ebpff": True}}, "value must be one of"),
    ({"collectors": {"nvml": "no"}}, "/collectors/nvml': got string, want boolean"),
    ({"serviceMonitor": {"interval": "30 seconds"}}, "/serviceMonitor/interval"),
    ({"serviceMonitor": {"labels": {"release": True}}}, "/serviceMonitor/labels/release"),
    ({"resources": {"limits": {"memory": "256MB"}}}, "/resources/limits/memory"),
    ({"tolerations": [{"effect": "NoSchedul"}]}, "/tolerations/0/effect"),
    ({"edge": {"listenAddress": "127.0.0.1:9000"}}, "/edge/listenAddress"),
    ({"edge": {"forwarder": {"image": {"tag": ""}}}}, "/edge/forwarder/image/tag"),
    ({"edge": {"apiserverUrl": "127.0.0.1:10550"}}, "/edge/apiserverUrl"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES)
def test_schema_rejects_bad_values(values: dict[str, Any], message: str) -> None:
    """Each bad value is refused by rendering (what install/upgrade/template do) with a message
    naming the value's path and the rule it breaks."""
    with pytest.raises(helm().HelmValuesError) as refused:
        render(values)
    assert message in str(refused.value)


def test_schema_knows_every_collector_and_pod_source() -> None:
    """The schema's collector names are the registry's (the --collector.NAME flags), its pod
    sources --kube.pod-source's choices."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["podSource"]["enum"] == pod_source_choices()
    names = set(REGISTRY.collector_defaults)
    names |= {alias for aliases in REGISTRY.collector_aliases.values() for alias in aliases}
    assert set(schema["properties"]["collectors"]["propertyNames"]["enum"]) == names


def test_packaged_chart_renders_the_same(tmp_path: Path) -> None:
    """`helm package` keeps files/generated (rules, dashboards, forwarder config) and the ci/
    profiles: the archive renders what the directory renders."""
    archive = helm().package(str(CHART), destination=str(tmp_path))
    with helm().Chart.load(archive) as packaged:
        rendered = packaged.render(
            profile_values("kubeedge"), name="wattprobe", namespace="wattprobe"
        )
    from_archive = parse(rendered)
    assert from_archive == render_profile("kubeedge")
    assert any(o["kind"] == "PrometheusRule" for o in from_archive)


def test_every_overlay_has_a_profile() -> None:
    """One values file per kustomize overlay (ci/<overlay>-values.yaml), so that every overlay
    is compared with the chart above; a new overlay needs its profile."""
    overlays = {p.name for p in (REPO / "deploy" / "overlays").iterdir() if p.is_dir()}
    profiles = {p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml")}
    assert profiles == overlays == set(PROFILES)


def test_schema_is_valid_json_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(defaults))
