"""Render deploy/helm/wattprobe with real Helm (helm-python-sdk embeds Helm v4's engine)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.deploy.manifests import DEPLOY, Obj
from tests.support.realparts import missing

CHART = DEPLOY / "helm" / "wattprobe"
# one values file per kustomize overlay: ci/<overlay>-values.yaml
PROFILES = ("default", "gpu-only", "kubeedge", "kubeedge-prometheus-agent", "privileged")
NAMESPACE = "wattprobe"
RELEASE = "wattprobe"
# Labels Helm's conventions add and the kustomize overlays do not have (the only difference
# the comparison with the overlays normalizes away, with env order: see normalized()).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# The release, on every object and in every selector of the chart; the overlays have none on
# the cloud objects and `edge` on the edge ones (the chart tells those apart by component).
INSTANCE = "app.kubernetes.io/instance"


def helm() -> ModuleType:
    """helm_python, or a skip (a failure with WATTPROBE_REQUIRE_REAL=1)."""
    try:
        import helm_python  # noqa: PLC0415 (a real part: imported where a test needs it)
    except ImportError:
        missing("helm-python-sdk (pip; scripts/setup-debian.sh test installs the test extra)")
    return helm_python


def profile_values(profile: str) -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "ci" / f"{profile}-values.yaml").read_text())
    return dict(loaded or {})


@functools.cache
def _chart() -> Any:
    return helm().Chart.load(str(CHART))


def render(values: dict[str, Any] | None = None) -> list[Obj]:
    """`helm template` of the chart with these values, release in namespace wattprobe."""
    return parse(_chart().render(copy.deepcopy(values or {}), name=RELEASE, namespace=NAMESPACE))


def parse(manifests: dict[str, str]) -> list[Obj]:
    """The objects of a render's output (template path -> text), in template order."""
    return [
        doc
        for path, text in sorted(manifests.items())
        if not path.endswith("NOTES.txt")  # printed after an install, not applied
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def render_profile(profile: str, **extra: Any) -> list[Obj]:
    return render({**profile_values(profile), **extra})


def _label_maps(obj: Obj) -> list[dict[str, str]]:
    """Every label map of an object that holds the instance label: its metadata's, its
    selector's (a Service's or a matchLabels) and its pod template's."""
    spec = obj.get("spec", {})
    selector = spec.get("selector", {}) if isinstance(spec, dict) else {}
    maps = [
        obj["metadata"].get("labels"),
        selector.get("matchLabels") if obj["kind"] != "Service" else selector,
        spec.get("template", {}).get("metadata", {}).get("labels")
        if isinstance(spec, dict)
        else None,
    ]
    return [m for m in maps if isinstance(m, dict)]


def normalized(obj: Obj, *, helm_rendered: bool) -> Obj:
    """What must differ between the chart's object and kustomize's, taken out:
    - Helm's own labels (HELM_LABELS) in metadata.labels;
    - app.kubernetes.io/instance (INSTANCE): the chart's must be the release's, on every
      object's metadata (selectors and pod templates: where it has them), kustomize's absent
      or `edge`;
    - the order of a container's env list: kustomize's strategic merge puts a patched entry
      first, a template writes it in place. Order matters only to $(VAR) references, which
      no entry here uses (asserted)."""
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels", {})
    for key in HELM_LABELS:
        labels.pop(key, None)
    if helm_rendered:
        assert labels.get(INSTANCE) == RELEASE, out["metadata"]["name"]
    for found in _label_maps(out):
        instance = found.pop(INSTANCE, None)
        allowed = {RELEASE} if helm_rendered else {None, "edge"}
        assert instance in allowed, (out["metadata"]["name"], instance)
    template = out.get("spec", {}).get("template", {}).get("spec")
    for container in (template or {}).get("containers", []):
        env = container.get("env", [])
        assert not any("$(" in str(e.get("value", "")) for e in env), container["name"]
        container["env"] = {e["name"]: e for e in env}
    return out


def keyed(objs: list[Obj], *, helm_rendered: bool) -> dict[tuple[str, str], Obj]:
    found = {
        (o["kind"], o["metadata"]["name"]): normalized(o, helm_rendered=helm_rendered) for o in objs
    }
    assert len(found) == len(objs), "duplicate objects"
    return found


def chart_files(subdir: str) -> list[Path]:
    return sorted(p for p in (CHART / "files" / "generated" / subdir).iterdir() if p.is_file())
