"""Policy checks on what `kubectl kustomize` builds: what an SRE reviewing the manifests would
insist on, each overlay's own promises, and agreement with the exporter and alerts/dashboards."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from exporter import __version__
from exporter.app.cli import cli
from tests.deploy.manifests import (
    COMPONENTS,
    DEPLOY,
    IMAGE_REPOSITORY,
    OVERLAYS,
    REPO,
    Obj,
    build,
    build_with_components,
    containers,
    env_of,
    of_kind,
    one,
    pod_specs,
)

ALLOWED_CAPABILITIES = {"BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "DAC_READ_SEARCH"}
TELEMETRY_PATH = "/metrics"
PORT = 28390
METASERVER = "http://127.0.0.1:10550"
PODRESOURCES_DIR = "/var/lib/kubelet/pod-resources"
# Env vars the manifests set for flags that other issues are adding to `wattprobe serve`
# (DESIGN.md's CLI contract). Each must be removed from here once its flag exists.
PENDING_FLAGS: dict[str, str] = {}  # flags the manifests use before `serve` has them
# The edge forwarder (overlays/kubeedge: vmagent; overlays/kubeedge-prometheus-agent: Prometheus in
# agent mode), pinned to a release, whose queue or WAL is the one host path written to
# (tests/deploy/test_edge.py checks the rest of it).
FORWARDER = "forwarder"
FORWARDER_IMAGE = re.compile(
    r"(docker\.io/victoriametrics/vmagent|quay\.io/prometheus/prometheus):v\d+\.\d+\.\d+"
)
FORWARDER_WAL = "/var/lib/wattprobe/forwarder"


def _all_containers(objs: list[Obj]) -> list[tuple[str, Obj, Obj]]:
    return [(name, spec, c) for name, spec in pod_specs(objs) for c in containers(spec)]


def _agents(objs: list[Obj]) -> list[Obj]:
    return of_kind(objs, "DaemonSet")


def _pod(ds: Obj) -> Obj:
    spec: Obj = ds["spec"]["template"]["spec"]
    return spec


def _mounts(ds: Obj) -> dict[str, Obj]:
    return {m["mountPath"]: m for m in _pod(ds)["containers"][0].get("volumeMounts", [])}


def _volumes(ds: Obj) -> dict[str, Obj]:
    return {v["name"]: v for v in _pod(ds).get("volumes", [])}


def _rules(objs: list[Obj], name: str) -> list[tuple[str, str]]:
    role = one(objs, "ClusterRole", name)
    return sorted(
        (res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]
    )


# -- every overlay ------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned_to_this_version(overlay: str) -> None:
    for name, _spec, container in _all_containers(build(overlay)):
        image = container["image"]
        if container["name"] == FORWARDER:
            assert FORWARDER_IMAGE.fullmatch(image), (name, image)
            continue
        assert not image.endswith(":latest") and ":" in image.rsplit("/", 1)[-1], (name, image)
        assert image == f"{IMAGE_REPOSITORY}:{__version__}", (name, image)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_and_limits(overlay: str) -> None:
    for name, _spec, container in _all_containers(build(overlay)):
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind, {})), (name, kind, resources)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_host_path_is_mounted_read_only(overlay: str) -> None:
    for name, spec, container in _all_containers(build(overlay)):
        host_volumes = {v["name"] for v in spec.get("volumes", []) if "hostPath" in v}
        for mount in container.get("volumeMounts", []):
            if container["name"] == FORWARDER and mount["mountPath"] == FORWARDER_WAL:
                continue  # its WAL: written, and only by the forwarder
            if mount["name"] in host_volumes:
                assert mount.get("readOnly") is True, (name, mount)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_health_endpoints_not_metrics(overlay: str) -> None:
    for name, _spec, container in _all_containers(build(overlay)):
        probes = {k: container.get(k) for k in ("livenessProbe", "readinessProbe", "startupProbe")}
        assert probes["livenessProbe"] and probes["readinessProbe"], name
        if container["name"] == FORWARDER:  # Prometheus' own health endpoints
            assert probes["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
            assert probes["readinessProbe"]["httpGet"]["path"] == "/-/ready"
            continue
        for kind, probe in probes.items():
            if probe is not None:
                assert probe["httpGet"]["path"] != TELEMETRY_PATH, (name, kind)
        assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agent_basics(overlay: str) -> None:
    for ds in _agents(build(overlay)):
        pod = _pod(ds)
        assert pod["hostPID"] is True
        assert pod["priorityClassName"] == "system-node-critical"
        container = pod["containers"][0]
        node_name = next(e for e in container["env"] if e["name"] == "NODE_NAME")
        assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        env = env_of(container)
        assert env["WATTPROBE_PATH_PROCFS"] == "/host/proc"
        assert env["WATTPROBE_PATH_SYSFS"] == "/host/sys"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
        mounts = _mounts(ds)
        for path in ("/host/proc", "/host/sys", "/host/sys/fs/cgroup", "/sys/kernel/tracing"):
            assert path in mounts, path
        assert _volumes(ds)[mounts["/tmp"]["name"]].get("emptyDir") is not None
        tolerated = {(t["key"], t.get("effect")) for t in pod["tolerations"]}
        assert ("nvidia.com/gpu", "NoSchedule") in tolerated
        assert ("node-role.kubernetes.io/edge", "NoSchedule") in tolerated
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": PORT}


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "privileged"])
def test_least_privilege_security_context(overlay: str) -> None:
    for ds in _agents(build(overlay)):
        ctx = _pod(ds)["containers"][0]["securityContext"]
        assert ctx["privileged"] is False
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        added = set(ctx["capabilities"]["add"])
        assert added <= ALLOWED_CAPABILITIES, added - ALLOWED_CAPABILITIES
        assert {"BPF", "PERFMON"} <= added


def test_every_added_capability_says_why() -> None:
    """The reason for each capability is written beside it in the source manifest."""
    text = (DEPLOY / "base" / "agent" / "daemonset.yaml").read_text()
    block = re.search(r"\n(\s+)add:\n((?:\1  - .*\n)+)", text)
    assert block, "no capabilities.add list in daemonset.yaml"
    for line in block.group(2).splitlines():
        assert re.fullmatch(r"\s+- [A-Z_]+\s+# \S.{10,}", line), f"no reason given: {line!r}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_and_servicemonitor_reach_the_agents(overlay: str) -> None:
    objs = build(overlay)
    service = one(objs, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": PORT, "targetPort": "metrics", "protocol": "TCP"}
    ]
    for ds in _agents(objs):
        if ds["metadata"]["name"] == "wattprobe-edge":
            continue  # remote-writes instead (tests/deploy/test_edge.py)
        labels = ds["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items(), ds["metadata"]["name"]
    monitor = one(objs, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == TELEMETRY_PATH
    assert endpoint["honorLabels"] is True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespace_admits_the_agent(overlay: str) -> None:
    labels = one(build(overlay), "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_env_vars_name_real_flags() -> None:
    """A misspelt WATTPROBE_* variable is silently ignored by click: catch it here."""
    serve = cli.commands["serve"]
    known: set[str] = set()
    for param in serve.params:
        if isinstance(param, click.Option) and param.envvar:
            envvars = [param.envvar] if isinstance(param.envvar, str) else param.envvar
            known.update(envvars)
    landed = sorted(set(PENDING_FLAGS) & known)
    assert not landed, f"{landed} now exist in `wattprobe serve`: remove them from PENDING_FLAGS"
    for overlay in OVERLAYS:
        for name, _spec, container in _all_containers(build(overlay)):
            for var in env_of(container):
                if var.startswith("WATTPROBE_"):
                    assert var in known or var in PENDING_FLAGS, (overlay, name, var)


def test_env_var_values_are_valid_for_their_flags() -> None:
    """A bad value (a misspelt choice, a bad duration) would stop every agent at start-up."""
    serve = cli.commands["serve"]
    ctx = click.Context(serve)
    options = {
        envvar: param
        for param in serve.params
        if isinstance(param, click.Option) and param.envvar
        for envvar in ([param.envvar] if isinstance(param.envvar, str) else param.envvar)
    }
    checked = 0
    for overlay in OVERLAYS:
        for name, _spec, container in _all_containers(build(overlay)):
            for var, value in env_of(container).items():
                if var in options and value is not None:
                    try:
                        options[var].process_value(ctx, value)
                    except click.BadParameter as exc:
                        pytest.fail(f"{overlay}/{name}: {var}={value!r}: {exc.format_message()}")
                    checked += 1
    assert checked >= 8 * len(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ebpf_settings(overlay: str) -> None:
    """The agent's eBPF needs (docs/ebpf.md, "Deployment needs"): the host's cgroup tree from its
    root, tracefs, the host's kernel-header paths, the image's generic headers, and the ioctl
    probe only where GPUs are (every node of gpu-only; elsewhere when the pod's /dev has GPU
    device nodes, i.e. the NVIDIA runtime gave it the node's GPUs)."""
    for ds in _agents(build(overlay)):
        env = env_of(_pod(ds)["containers"][0])
        assert env["WATTPROBE_ACTIVITY_SOURCE"] == "auto"
        assert env["WATTPROBE_EBPF_KERNEL_HEADERS"] == "/opt/wattprobe/kernel-headers"
        assert env["WATTPROBE_EBPF_GPU_IOCTLS"] == ("on" if overlay == "gpu-only" else "auto")
        mounts, volumes = _mounts(ds), _volumes(ds)
        host_paths = {
            path: volumes[m["name"]]["hostPath"]["path"]
            for path, m in mounts.items()
            if "hostPath" in volumes[m["name"]]
        }
        assert env["WATTPROBE_PATH_CGROUPFS"] == "/host/sys/fs/cgroup"
        assert host_paths["/host/sys/fs/cgroup"] == "/sys/fs/cgroup"  # the root, not a subtree
        assert host_paths["/sys/kernel/tracing"] == "/sys/kernel/tracing"
        assert host_paths["/lib/modules"] == "/lib/modules"  # /lib/modules/$(uname -r)/build
        assert host_paths["/usr/src"] == "/usr/src"  # ... and where its links point
        assert all(m.get("mountPropagation") in (None, "None") for m in mounts.values())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cdi_specs_are_read_where_the_agent_looks(overlay: str) -> None:
    """DRA claims name GPUs through the host's CDI specs (docs/kubernetes.md): both CDI
    directories are mounted read-only where --kube.cdi-spec-dirs points."""
    for ds in _agents(build(overlay)):
        dirs = env_of(_pod(ds)["containers"][0]).get("WATTPROBE_KUBE_CDI_SPEC_DIRS") or ""
        mounts, volumes = _mounts(ds), _volumes(ds)
        for path, host in (("/host/etc/cdi", "/etc/cdi"), ("/host/var/run/cdi", "/var/run/cdi")):
            assert path in dirs.split(",")
            assert volumes[mounts[path]["name"]]["hostPath"]["path"] == host
            assert mounts[path].get("readOnly") is True


# -- one source of truth: alerts/ and dashboards/ ----------------------------------------------


def _rule_groups_from_alerts() -> list[Any]:
    groups: list[Any] = []
    for path in sorted((REPO / "alerts").glob("*.rules.yml")):
        doc = yaml.safe_load(path.read_text())
        groups.extend(doc["groups"] if doc else [])
    return groups


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheusrule_equals_alerts(overlay: str) -> None:
    rule = one(build(overlay), "PrometheusRule")
    assert rule["spec"] == {"groups": _rule_groups_from_alerts()}
    wrapper = REPO / "alerts" / "prometheusrule.yaml"
    if wrapper.exists():  # alerts/ keeps its own PrometheusRule too: it must say the same
        assert yaml.safe_load(wrapper.read_text())["spec"] == rule["spec"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_dashboard_configmaps_equal_dashboards(overlay: str) -> None:
    maps = [
        cm
        for cm in of_kind(build(overlay), "ConfigMap")
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    shipped = {name: text for cm in maps for name, text in cm["data"].items()}
    expected = {p.name: p.read_text() for p in sorted((REPO / "dashboards").glob("*.json"))}
    assert shipped == expected
    assert len(maps) == len(expected), "one ConfigMap per dashboard"


# -- overlay specifics ----------------------------------------------------------------------


def test_default_reads_the_kubelet_and_skips_edge_nodes() -> None:
    objs = build("default")
    (ds,) = _agents(objs)
    assert env_of(_pod(ds)["containers"][0])["WATTPROBE_KUBE_POD_SOURCE"] == "kubelet"
    assert PODRESOURCES_DIR in _mounts(ds)
    terms = _pod(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"} in terms[
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert _rules(objs, "wattprobe") == [("nodes/pods", "get"), ("nodes/proxy", "get")]


def test_kubeedge_adds_an_edge_agent_on_the_metaserver() -> None:
    objs = build("kubeedge")
    agents = {ds["metadata"]["name"]: ds for ds in _agents(objs)}
    assert set(agents) == {"wattprobe", "wattprobe-edge"}
    edge = agents["wattprobe-edge"]
    pod = _pod(edge)
    env = env_of(pod["containers"][0])
    assert env["WATTPROBE_KUBE_POD_SOURCE"] == "apiserver"
    assert env["WATTPROBE_KUBE_APISERVER_URL"] == METASERVER
    assert pod["hostNetwork"] is True, "the MetaServer listens on the node's loopback"
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert PODRESOURCES_DIR not in _mounts(edge)
    assert env["WATTPROBE_KUBE_PODRESOURCES_SOCKET"] == "none"  # not mounted: not polled
    assert not any(
        v.get("hostPath", {}).get("path") == PODRESOURCES_DIR for v in _volumes(edge).values()
    )
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "node-role.kubernetes.io/edge", "operator": "Exists"}]}
    ]
    assert pod["serviceAccountName"] == "wattprobe-edge"
    assert _rules(objs, "wattprobe-edge") == [("pods", "get"), ("pods", "list"), ("pods", "watch")]
    binding = one(objs, "ClusterRoleBinding", "wattprobe-edge")
    assert binding["roleRef"]["name"] == "wattprobe-edge"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "wattprobe-edge", "namespace": "wattprobe"}
    ]
    # the two DaemonSets never claim each other's pods
    selectors = [ds["spec"]["selector"]["matchLabels"] for ds in agents.values()]
    assert selectors[0] != selectors[1]
    # the cloud agent is the default overlay's, unchanged
    assert agents["wattprobe"] == one(build("default"), "DaemonSet")


def test_gpu_only_selects_gpu_nodes() -> None:
    (ds,) = _agents(build("gpu-only"))
    assert _pod(ds)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_privileged_overlay_is_privileged_and_otherwise_default() -> None:
    (ds,) = _agents(build("privileged"))
    ctx = _pod(ds)["containers"][0]["securityContext"]
    assert ctx["privileged"] is True and ctx["allowPrivilegeEscalation"] is True
    assert "capabilities" not in ctx
    (default,) = _agents(build("default"))
    _pod(default)["containers"][0].pop("securityContext")
    _pod(ds)["containers"][0].pop("securityContext")
    assert ds == default


def test_components(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, "default", *COMPONENTS)
    assert _rules(objs, "wattprobe") == [("nodes/pods", "get")]
    assert _pod(one(objs, "DaemonSet"))["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in _pod(one(build("default"), "DaemonSet"))


def test_runtimeclass_component_leaves_the_edge_agent_alone(tmp_path: Path) -> None:
    """kustomize knows wattprobe-edge by its original name too: a patch by name alone would hit
    both DaemonSets (or fail as ambiguous)."""
    objs = build_with_components(tmp_path, "kubeedge", "nvidia-runtimeclass")
    agents = {ds["metadata"]["name"]: _pod(ds) for ds in _agents(objs)}
    assert agents["wattprobe"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in agents["wattprobe-edge"]


# -- requests and limits come from the benchmarks ------------------------------------------


def _memory_mib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Mi|Gi|M|G)?", quantity).groups()  # type: ignore[union-attr]
    scale = {"Mi": 1.0, "Gi": 1024.0, "M": 1e6 / 2**20, "G": 1e9 / 2**20, None: 1 / 2**20}
    return float(number) * scale[unit]


def test_resources_follow_docs_benchmarks() -> None:
    """While docs/benchmarks.md is missing the values are marked PROVISIONAL; once it exists they
    must be replaced, and the memory limit must cover every RSS figure it reports."""
    patch = (DEPLOY / "base" / "agent" / "resources.yaml").read_text()
    benchmarks = REPO / "docs" / "benchmarks.md"
    if not benchmarks.exists():
        assert "PROVISIONAL" in patch, "no docs/benchmarks.md: say the values are provisional"
        return
    assert "PROVISIONAL" not in patch, "docs/benchmarks.md exists: set resources.yaml from it"
    rss = [
        float(m.group(1))
        for line in benchmarks.read_text().splitlines()
        if "rss" in line.lower()
        for m in re.finditer(r"(\d+(?:\.\d+)?)\s*MiB", line)
    ]
    limit = yaml.safe_load(patch)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert rss, "docs/benchmarks.md reports no RSS in MiB"
    assert _memory_mib(limit["limits"]["memory"]) >= max(rss)
