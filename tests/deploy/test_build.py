"""Every overlay builds with kubectl kustomize and every object validates.

Built-in kinds: kubernetes-validate --strict (unknown fields are errors) for every Kubernetes
version from 1.29 to the newest the installed package ships. ServiceMonitor and PrometheusRule:
the Prometheus Operator v0.80.1 schemas vendored in tests/deploy/crds (see vendor.py there).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from kubernetes_validate import utils as kv_utils

from tests.deploy.manifests import (
    COMPONENTS,
    OVERLAYS,
    Obj,
    build,
    build_with_components,
    of_kind,
    one,
    operator_validator,
    version_tuple,
)

OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
OLDEST_SUPPORTED = (1, 29)
KUBE_VERSIONS = [v for v in kv_utils.all_versions() if version_tuple(v)[:2] >= OLDEST_SUPPORTED]


def test_validator_ships_the_versions_we_claim() -> None:
    assert KUBE_VERSIONS, "kubernetes-validate ships no schema for 1.29 or later"
    assert version_tuple(KUBE_VERSIONS[0])[:2] == OLDEST_SUPPORTED


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds(overlay: str) -> None:
    objs = build(overlay)
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds
    assert {"DaemonSet", "Service", "ServiceMonitor", "PrometheusRule"} <= kinds
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), "duplicate objects"
    for obj in objs:
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"].get("namespace") == "wattprobe", obj["metadata"]["name"]


def test_components_build(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, "gpu-only", *COMPONENTS)
    assert one(objs, "DaemonSet")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"


# showback adds one ConfigMap and patches the DaemonSets: tests/deploy/test_showback.py validates
# just those objects for every version, instead of the whole overlay again (15 s of CI budget).
@pytest.mark.parametrize("component", [c for c in COMPONENTS if c != "showback"])
@pytest.mark.parametrize("overlay", ["default", "kubeedge"])
def test_component_output_validates(tmp_path: Path, overlay: str, component: str) -> None:
    """Each component on an overlay: built-in kinds strictly for every supported Kubernetes
    version, the Operator's kinds against their CRD schemas."""
    for obj in build_with_components(tmp_path, overlay, component):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in OPERATOR_KINDS:
            validator = _operator_validator(obj["kind"])
            errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
            assert not errors, f"{name}: {errors}"
            continue
        for version in KUBE_VERSIONS:
            try:
                _validate_builtin(obj, version)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name} on {version}: {'.'.join(map(str, exc.path))}: {exc}")


def _validate_builtin(obj: Obj, version: str) -> str:
    return str(kubernetes_validate.validate(obj, version, strict=True))


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_objects_validate_strictly(overlay: str, version: str) -> None:
    checked = 0
    for obj in build(overlay):
        if obj["kind"] in OPERATOR_KINDS:
            continue
        try:
            validated = _validate_builtin(obj, version)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {path}: {exc}")
        # never let the validator fall back to an older schema without saying so
        assert version_tuple(validated)[:2] == version_tuple(version)[:2]
        checked += 1
    assert checked >= 6


def test_strict_validation_has_teeth() -> None:
    daemonset = copy.deepcopy(one(build("default"), "DaemonSet"))
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFilesytem"] = True  # misspelt on purpose
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_builtin(daemonset, KUBE_VERSIONS[-1])


def _operator_validator(kind: str) -> jsonschema.Draft202012Validator:
    return operator_validator(kind)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_operator_objects_validate_against_crd_schemas(overlay: str) -> None:
    objs = build(overlay)
    for kind in sorted(OPERATOR_KINDS):
        validator = _operator_validator(kind)
        found = of_kind(objs, kind)
        assert found, f"no {kind} in {overlay}"
        for obj in found:
            errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
            assert not errors, f"{kind}/{obj['metadata']['name']}: {errors}"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("honorLables", True),  # unknown field (typo)
        ("honorLabels", "yes"),  # wrong type
        ("scheme", "ftp"),  # not in the enum
        ("interval", "30 seconds"),  # not a Prometheus duration
    ],
)
def test_servicemonitor_schema_has_teeth(field: str, value: object) -> None:
    monitor = copy.deepcopy(one(build("default"), "ServiceMonitor"))
    monitor["spec"]["endpoints"][0][field] = value
    assert list(_operator_validator("ServiceMonitor").iter_errors(monitor))


def test_prometheusrule_schema_has_teeth() -> None:
    rule: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "x", "namespace": "wattprobe"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0"}]}]},
    }
    validator = _operator_validator("PrometheusRule")
    assert not list(validator.iter_errors(rule))
    rule["spec"]["groups"][0]["rules"][0]["fore"] = "5m"
    assert list(validator.iter_errors(rule))
