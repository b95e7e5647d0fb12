"""Build the kustomize overlays with the real kubectl and look inside the result."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.realparts import require_binary

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRDS = Path(__file__).parent / "crds"
OVERLAYS = ("default", "kubeedge", "kubeedge-prometheus-agent", "gpu-only", "privileged")
COMPONENTS = (
    "nvidia-runtimeclass",
    "kubelet-fine-grained-authz",
    "web-config",
    "tolerate-all-noschedule",
    "critical-priority-quota",
    "node-labels",
    "showback",
)
IMAGE_REPOSITORY = "ghcr.io/wattprobe/wattprobe"

Obj = dict[str, Any]


def kustomize(directory: Path) -> list[Obj]:
    """`kubectl kustomize DIR`, parsed; fails the test with kubectl's message on an error."""
    kubectl = require_binary("kubectl")
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@functools.cache
def _built(overlay: str) -> tuple[Obj, ...]:
    return tuple(kustomize(DEPLOY / "overlays" / overlay))


def build(overlay: str) -> list[Obj]:
    """The overlay's objects (built once per test session; callers get their own deep copy,
    which they may change)."""
    return copy.deepcopy(list(_built(overlay)))


def build_with_components(tmp: Path, overlay: str, *components: str) -> list[Obj]:
    """An overlay plus components, the way a user would compose them in their own kustomization."""
    base = Path(os.path.relpath(DEPLOY.resolve(), tmp.resolve()))  # kustomize wants relative
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(base / "overlays" / overlay)],
        "components": [str(base / "components" / c) for c in components],
    }
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(tmp)


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in of_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(objs: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """(workload name, pod spec) for every object that runs pods."""
    for obj in objs:
        template = obj.get("spec", {}).get("template")
        if obj["kind"] in {"DaemonSet", "Deployment", "StatefulSet", "Job"} and template:
            yield obj["metadata"]["name"], template["spec"]


def containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def env_of(container: Obj) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def operator_validator(kind: str) -> jsonschema.Draft202012Validator:
    """The vendored Prometheus Operator schema of ServiceMonitor, PodMonitor or PrometheusRule."""
    schema: dict[str, Any] = json.loads((CRDS / f"{kind.lower()}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)
