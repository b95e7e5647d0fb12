"""The chart's values as a platform team uses them: every value in values.yaml changes the
rendered objects, the ones every exporter chart has land where they should, two releases
live side by side, and the schema refuses bad values by their path."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deploy.helm import readme
from tests.deploy.helmchart import CHART, INSTANCE, NAMESPACE, helm, parse, render
from tests.deploy.manifests import Obj, of_kind, one, operator_validator

# Every value switched on that others depend on, so that each value below can show.
BASE: dict[str, Any] = {
    "namespace": {"create": True},
    "criticalPriorityQuota": {"enabled": True},
    "podMonitor": {"enabled": True},
    "edge": {"enabled": True},
    "webConfig": {"enabled": True, "createSecret": True, "files": {"web-config.yml": "{}\n"}},
    "showback": {"configMap": {"enabled": True}},
}
PROBE = {"tcpSocket": {"port": "metrics"}, "periodSeconds": 7}
RELABEL = [{"action": "labeldrop", "regex": "le_.*"}]
# One changed value per value of values.yaml (dotted path -> new value); the first test keeps
# this list complete, the second checks each one changes what the chart renders.
CHANGES: dict[str, Any] = {
    "global.imageRegistry": "registry.example.com",
    "nameOverride": "power",
    "fullnameOverride": "power-agent",
    "namespaceOverride": "monitoring",
    "commonLabels": {"team": "platform"},
    "image.repository": "registry.example.com/wattprobe",
    "image.tag": "0.9.0",
    "image.digest": "sha256:" + "cd" * 32,
    "image.pullPolicy": "Always",
    "imagePullSecrets": [{"name": "ghcr"}],
    "serviceAccount.create": False,
    "serviceAccount.name": "power-sa",
    "serviceAccount.annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"},
    "podAnnotations": {"example.com/scrape": "no"},
    "podLabels": {"cost-center": "energy"},
    "updateStrategy": {"type": "OnDelete"},
    "revisionHistoryLimit": 3,
    "podSecurityContext": {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}},
    "containerSecurityContext": {"readOnlyRootFilesystem": False},
    "hostNetwork": True,
    "livenessProbe": PROBE,
    "readinessProbe": PROBE,
    "startupProbe": PROBE,
    "extraVolumes": [{"name": "extra", "emptyDir": {}}],
    "extraVolumeMounts": [{"name": "extra", "mountPath": "/extra"}],
    "extraContainers": [{"name": "sidecar", "image": "busybox:1.36"}],
    "initContainers": [{"name": "init", "image": "busybox:1.36"}],
    "namespace.create": False,
    "resources": {"requests": {"cpu": "50m", "memory": "80Mi"}},
    "priorityClassName": "system-cluster-critical",
    "criticalPriorityQuota.enabled": False,
    "tolerations": [{"operator": "Exists"}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]
            }
        }
    },
    "runtimeClassName": "nvidia",
    "privileged": True,
    "podSource": "apiserver",
    "activitySource": "procfs",
    "ebpf.gpuIoctls": "on",
    "collectors": {"process": True},
    "extraArgs": ["--interval=10s"],
    "extraEnv": [{"name": "WATTPROBE_LOG_LEVEL", "value": "debug"}],
    "rbac.kubeletFineGrainedAuthz": True,
    "rbac.readNodeLabels": True,
    "service.type": "NodePort",
    "service.headless": False,
    "service.port": 9100,
    "service.annotations": {"example.com/lb": "internal"},
    "serviceMonitor.enabled": False,
    "serviceMonitor.namespace": "monitoring",
    "serviceMonitor.labels": {"release": "kube-prometheus-stack"},
    "serviceMonitor.jobLabel": "app.kubernetes.io/name",
    "serviceMonitor.interval": "15s",
    "serviceMonitor.scrapeTimeout": "5s",
    "serviceMonitor.relabelings": RELABEL,
    "serviceMonitor.metricRelabelings": RELABEL,
    "serviceMonitor.tlsConfig": {"insecureSkipVerify": True},
    "podMonitor.enabled": False,
    "podMonitor.namespace": "monitoring",
    "podMonitor.labels": {"release": "kube-prometheus-stack"},
    "podMonitor.jobLabel": "app.kubernetes.io/name",
    "podMonitor.interval": "15s",
    "podMonitor.scrapeTimeout": "5s",
    "podMonitor.relabelings": RELABEL,
    "podMonitor.metricRelabelings": RELABEL,
    "podMonitor.tlsConfig": {"insecureSkipVerify": True},
    "prometheusRule.enabled": False,
    "prometheusRule.labels": {"release": "kube-prometheus-stack"},
    "dashboards.enabled": False,
    "dashboards.labels": {"team": "platform"},
    "dashboards.annotations": {"grafana_folder": "Energy"},
    "webConfig.enabled": False,
    "webConfig.secretName": "my-web-config",
    "webConfig.createSecret": False,
    "webConfig.files": {"web-config.yml": "tls_server_config: {}\n"},
    "webConfig.scrape.secretName": "my-scrape-tls",
    "webConfig.scrape.serverName": "agents.example.com",
    "showback.pue": "1.4",
    "showback.energyPrice": "0.21 EUR",
    "showback.currency": "EUR",
    "showback.carbonIntensity": 350,
    "showback.configMap.enabled": False,
    "showback.configMap.name": "my-showback",
    "showback.configMap.create": False,
    "showback.configMap.file": "pue: 1.2\n",
    "edge.enabled": False,
    "edge.apiserverUrl": "https://127.0.0.1:10550",
    "edge.listenAddress": "[::1]:28390",
    "edge.resources": {"requests": {"cpu": "20m", "memory": "64Mi"}},
    "edge.nodeSelector": {"kubernetes.io/arch": "arm64"},
    "edge.tolerations": [],
    "edge.forwarder.image.repository": "docker.io/prom/prometheus",
    "edge.forwarder.image.tag": "v2.53.0",
    "edge.forwarder.image.pullPolicy": "Always",
    "edge.forwarder.args": ["-promscrape.config=/etc/wattprobe/forwarder/scrape.yml"],
    "edge.forwarder.config": {"extra.yml": "x: 1\n"},
    "edge.forwarder.storage.volumeName": "queue",
    "edge.forwarder.storage.hostPath": "/var/lib/forwarder",
    "edge.forwarder.storage.mountPath": "/queue",
    "edge.forwarder.remoteWriteSecretName": "my-remote-write",
    "edge.forwarder.resources": {"requests": {"cpu": "30m", "memory": "64Mi"}},
    "edge.forwarder.livenessProbe": PROBE,
    "edge.forwarder.readinessProbe": PROBE,
    "edge.forwarder.startupProbe": PROBE,
}


def _paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in readme.WHOLE:
            yield from _paths(value, f"{path}.")
        else:
            yield path


def _with(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    *parents, leaf = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


def test_every_value_has_a_change() -> None:
    """CHANGES names every value of values.yaml, so a new value needs its check below."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert sorted(_paths(defaults)) == sorted(CHANGES)


@pytest.mark.slow  # one render per value: ~100 renders
def test_every_value_reaches_the_objects() -> None:
    """Changing one value (from BASE, where the values it depends on are on) changes what the
    chart renders."""
    base = render(BASE)
    unchanged = [
        path for path, value in CHANGES.items() if render(_with(BASE, path, value)) == base
    ]
    assert not unchanged, f"these values render what the defaults render: {unchanged}"


def _pods(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o["spec"]["template"] for o in of_kind(objs, "DaemonSet")}


def test_exporter_chart_values_land_where_expected() -> None:
    keys = [
        "commonLabels",
        "podAnnotations",
        "podLabels",
        "revisionHistoryLimit",
        "updateStrategy",
        "hostNetwork",
        "extraVolumes",
        "extraVolumeMounts",
        "extraContainers",
        "initContainers",
        "containerSecurityContext",
        "livenessProbe",
        "global.imageRegistry",
        "serviceAccount.annotations",
    ]
    values = BASE
    for key in keys:
        values = _with(values, key, CHANGES[key])
    objs = render(values)
    for obj in objs:
        assert obj["metadata"]["labels"]["team"] == "platform", obj["metadata"]["name"]
    pods = _pods(objs)
    assert set(pods) == {"wattprobe", "wattprobe-edge"}
    for name, template in pods.items():
        spec = template["spec"]
        agent = spec["containers"][0]
        assert template["metadata"]["annotations"]["example.com/scrape"] == "no", name
        assert template["metadata"]["labels"]["cost-center"] == "energy", name
        assert {"name": "extra", "emptyDir": {}} in spec["volumes"], name
        assert {"name": "extra", "mountPath": "/extra"} in agent["volumeMounts"], name
        assert spec["containers"][-1]["name"] == "sidecar", name
        assert [c["name"] for c in spec["initContainers"]] == ["init"], name
        assert agent["securityContext"]["readOnlyRootFilesystem"] is False, name
        assert agent["securityContext"]["capabilities"]["add"] == ["BPF", "PERFMON", "SYS_RESOURCE"]
        assert agent["livenessProbe"] == PROBE, name
        assert agent["image"].startswith("registry.example.com/wattprobe/wattprobe:"), name
        assert spec["hostNetwork"] is True, name
    forwarder = pods["wattprobe-edge"]["spec"]["containers"][1]
    assert forwarder["image"].startswith("registry.example.com/victoriametrics/vmagent:")
    for ds in of_kind(objs, "DaemonSet"):
        assert ds["spec"]["revisionHistoryLimit"] == 3
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    # 0 (keep none) is a value, not "unset"
    kept_none = of_kind(render({"revisionHistoryLimit": 0}), "DaemonSet")
    assert [ds["spec"]["revisionHistoryLimit"] for ds in kept_none] == [0]
    assert "revisionHistoryLimit" not in one(render(), "DaemonSet")["spec"]
    for account in of_kind(objs, "ServiceAccount"):
        assert account["metadata"]["annotations"] == CHANGES["serviceAccount.annotations"]


def test_monitors_and_service_from_values() -> None:
    values = BASE
    for key in [k for k in CHANGES if k.split(".")[0] in ("serviceMonitor", "podMonitor")]:
        if not key.endswith(".enabled"):
            values = _with(values, key, CHANGES[key])
    values = _with(values, "service", {"port": 9100, "annotations": {"a.example.com/b": "c"}})
    values["webConfig"] = {"enabled": False}
    objs = render(values)
    service = one(objs, "Service")
    assert service["spec"]["ports"][0]["port"] == 9100
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["annotations"]["a.example.com/b"] == "c"
    pods = _pods(objs)["wattprobe"]["metadata"]["labels"]
    for kind, endpoints in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        monitor = one(objs, kind)
        assert monitor["metadata"]["namespace"] == "monitoring"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pods.items()
        endpoint = monitor["spec"][endpoints][0]
        assert endpoint["relabelings"][-1] == RELABEL[0]  # after the shipped ones
        assert endpoint["relabelings"][0]["action"] == "labeldrop"
        assert endpoint["metricRelabelings"] == RELABEL
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
        assert endpoint["scheme"] == "https"
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "5s")
    assert service["spec"]["selector"].items() <= pods.items()
    node_port = render({"service": {"type": "NodePort"}})
    assert "clusterIP" not in one(node_port, "Service")["spec"]
    assert one(node_port, "Service")["spec"]["type"] == "NodePort"


def test_edge_tolerations_apart_from_the_cloud_ones() -> None:
    edge_only = [{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}]
    pods = _pods(render({"edge": {"enabled": True, "tolerations": edge_only}}))
    assert pods["wattprobe-edge"]["spec"]["tolerations"] == edge_only
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert pods["wattprobe"]["spec"]["tolerations"] == defaults["tolerations"]
    # null (the default): the edge DaemonSet has the cloud one's
    inherited = _pods(render({"edge": {"enabled": True}}))
    assert inherited["wattprobe-edge"]["spec"]["tolerations"] == defaults["tolerations"]


def _release(name: str, namespace: str) -> list[Obj]:
    chart = helm().Chart.load(str(CHART))
    return parse(
        chart.render({**BASE, "podMonitor": {"enabled": False}}, name=name, namespace=namespace)
    )


def _clashes(a: list[Obj], b: list[Obj]) -> set[tuple[str, str, str]]:
    def ids(objs: list[Obj]) -> set[tuple[str, str, str]]:
        return {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs
        }

    return ids(a) & ids(b)


def test_two_releases_live_in_one_cluster() -> None:
    """Two releases, in one namespace or two, share no object and select only their own pods
    (the Namespace object aside: namespace.create is for one release)."""
    first = [o for o in _release("wattprobe", "power") if o["kind"] != "Namespace"]
    for second_ns in ("power", "power-b"):
        second = [o for o in _release("lab", second_ns) if o["kind"] != "Namespace"]
        assert not _clashes(first, second), second_ns
        names = {o["metadata"]["name"] for o in second}
        assert "lab-wattprobe" in names and "lab-wattprobe-edge" in names
        for a, b in zip(of_kind(first, "DaemonSet"), of_kind(second, "DaemonSet"), strict=True):
            sel_a, sel_b = (
                a["spec"]["selector"]["matchLabels"],
                b["spec"]["selector"]["matchLabels"],
            )
            assert (sel_a[INSTANCE], sel_b[INSTANCE]) == ("wattprobe", "lab")
            assert not sel_a.items() <= b["spec"]["template"]["metadata"]["labels"].items()
        binding = one(second, "ClusterRoleBinding", "lab-wattprobe")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "lab-wattprobe", "namespace": second_ns}
        ]
        monitor = one(second, "ServiceMonitor")
        assert monitor["spec"]["selector"]["matchLabels"][INSTANCE] == "lab"
        tls = monitor["spec"]["endpoints"][0]["tlsConfig"]
        assert tls["serverName"] == f"lab-wattprobe.{second_ns}.svc"


def test_name_and_namespace_overrides() -> None:
    objs = render(
        {
            **BASE,
            "fullnameOverride": "power-agent",
            "nameOverride": "power",
            "namespaceOverride": "monitoring",
            "serviceAccount": {"name": "power-sa"},
        }
    )
    for obj in objs:
        meta = obj["metadata"]
        own_name = obj["kind"] in ("Namespace", "ServiceAccount")
        assert meta["name"].startswith("power-agent") or own_name, meta
        assert meta.get("namespace", "monitoring") == "monitoring", meta["name"]
    assert one(objs, "Namespace")["metadata"]["name"] == "monitoring"
    for name, template in _pods(objs).items():
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "power", name
    accounts = {o["metadata"]["name"] for o in of_kind(objs, "ServiceAccount")}
    assert accounts == {"power-sa", "power-sa-edge"}
    pods = _pods(objs)
    assert pods["power-agent"]["spec"]["serviceAccountName"] == "power-sa"
    assert pods["power-agent-edge"]["spec"]["serviceAccountName"] == "power-sa-edge"
    no_accounts = render({"serviceAccount": {"create": False, "name": "mine"}})
    assert not of_kind(no_accounts, "ServiceAccount")
    assert one(no_accounts, "ClusterRoleBinding")["subjects"][0]["name"] == "mine"


# (values, the path the refusal names): each refused by rendering, which is what
# install/upgrade/template do; tests/deploy/test_helm.py has the older keys' bad values.
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"resources": {"requests": {"cpu": -1}}}, "/resources/requests/cpu"),
    ({"resources": {"limits": {"cpu": "-500m"}}}, "/resources/limits/cpu"),
    ({"resources": {"requests": {"memory": -64}}}, "/resources/requests/memory"),
    ({"edge": {"resources": {"limits": {"memory": "-1Gi"}}}}, "/edge/resources/limits/memory"),
    (
        {"edge": {"forwarder": {"resources": {"requests": {"cpu": -0.5}}}}},
        "/edge/forwarder/resources/requests/cpu",
    ),
    ({"showback": {"pue": "-1"}}, "/showback/pue"),
    ({"showback": {"pue": 0.9}}, "/showback/pue"),
    ({"showback": {"pue": 11}}, "/showback/pue"),
    ({"showback": {"energyPrice": -0.2}}, "/showback/energyPrice"),
    ({"showback": {"energyPrice": "-0.21 EUR"}}, "/showback/energyPrice"),
    ({"showback": {"carbonIntensity": "-5"}}, "/showback/carbonIntensity"),
    ({"revisionHistoryLimit": -1}, "/revisionHistoryLimit"),
    ({"updateStrategy": {"type": "Recreate"}}, "/updateStrategy/type"),
    ({"updateStrategy": {"rollingUpdate": {"maxUnavailable": -1}}}, "maxUnavailable"),
    ({"service": {"port": 70000}}, "/service/port"),
    ({"service": {"type": "ExternalName"}}, "/service/type"),
    ({"fullnameOverride": "Power_Agent"}, "/fullnameOverride"),
    ({"namespaceOverride": "Monitoring"}, "/namespaceOverride"),
    ({"serviceAccount": {"create": "yes"}}, "/serviceAccount/create"),
    ({"podAnnotations": {"a": 1}}, "/podAnnotations/a"),
    ({"podLabels": {"tier": 1}}, "/podLabels/tier"),
    ({"hostNetwork": "true"}, "/hostNetwork"),
    ({"livenessProbe": {"periodSeconds": 0}}, "/livenessProbe/periodSeconds"),
    ({"extraVolumes": [{"name": "x"}, "y"]}, "/extraVolumes/1"),
    ({"serviceMonitor": {"relabelings": [{"action": "rename"}]}}, "/serviceMonitor/relabelings/0"),
    ({"podMonitor": {"interval": "1 minute"}}, "/podMonitor/interval"),
    ({"global": {"imageRegistry": "https://registry.example.com"}}, "/global/imageRegistry"),
    ({"edge": {"tolerations": [{"effect": "Never"}]}}, "/edge/tolerations/0/effect"),
    ({"podSecurityContext": {"runAsUser": -1}}, "/podSecurityContext/runAsUser"),
]


@pytest.mark.parametrize(("values", "path"), BAD_VALUES)
def test_schema_refuses_bad_values_by_path(values: dict[str, Any], path: str) -> None:
    with pytest.raises(helm().HelmValuesError) as refused:
        render(values)
    assert path in str(refused.value)


def test_objects_with_every_value_changed_validate() -> None:
    """The DaemonSets, Service, ServiceAccounts and bindings with every value changed (but the
    switches) are valid Kubernetes objects (kubernetes-validate --strict, the newest version it
    ships), and the ServiceMonitor and PodMonitor valid against the vendored Prometheus
    Operator schemas (tests/deploy/crds)."""
    values = BASE
    for key, value in CHANGES.items():
        if not key.endswith((".enabled", ".create")) and key != "namespaceOverride":
            values = _with(values, key, value)
    version = kubernetes_validate.utils.latest_version()
    checked = set()
    # BASE: the monitors' tlsConfig made from webConfig.scrape, as a PodMonitor's too
    for obj in [*render(values), *render(BASE)]:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in ("ServiceMonitor", "PodMonitor"):
            errors = [
                f"{list(e.absolute_path)}: {e.message}"
                for e in operator_validator(obj["kind"]).iter_errors(obj)
            ]
            assert not errors, f"{name}: {errors}"
        elif obj["kind"] in ("DaemonSet", "Service", "ServiceAccount", "ClusterRoleBinding"):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {exc.path}: {exc}")
        else:
            continue
        checked.add(obj["kind"])
    assert checked == {
        "DaemonSet",
        "Service",
        "ServiceAccount",
        "ClusterRoleBinding",
        "ServiceMonitor",
        "PodMonitor",
    }


def test_chart_readme_is_generated_from_values() -> None:
    """README.md's values table is what deploy/helm/readme.py makes of values.yaml (run it
    after changing a value or its comment)."""
    current = (CHART / "README.md").read_text(encoding="utf-8")
    values = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert readme.readme(current, values) == current, "stale: python deploy/helm/readme.py"
    assert readme.main(["--check"]) == 0


def test_every_value_is_described_in_the_readme() -> None:
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    described = readme.comments(values_text)
    rows = readme.table(values_text)
    for path in CHANGES:
        assert readme.describe(described, path), f"{path}: no comment in values.yaml"
        assert f"| `{path}` |" in rows, path


def test_readme_check_reports_drift(tmp_path: Path) -> None:
    for name in ("README.md", "values.yaml"):
        (tmp_path / name).write_text((CHART / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert readme.main(["--check", "--chart", str(tmp_path)]) == 0
    values = tmp_path / "values.yaml"
    values.write_text(values.read_text().replace("# How often", "# How rarely"), encoding="utf-8")
    assert readme.main(["--check", "--chart", str(tmp_path)]) == 1
    assert readme.main(["--chart", str(tmp_path)]) == 0
    assert "How rarely" in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_chart_lints_clean_with_every_value_changed() -> None:
    """`helm lint --strict` with every value of CHANGES set at once (the switches aside)."""
    values = BASE
    for key, value in CHANGES.items():
        if not key.endswith((".enabled", ".create")):
            values = _with(values, key, value)
    report = helm().lint(
        str(CHART), values, strict=True, namespace=NAMESPACE, kube_version="v1.29.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report
