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
# Labels Helm's conventions add and the kustomize overlays do not have (the only difference
# the comparison with the overlays normalizes away, with env order: see normalized()).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")


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
    return parse(
        _chart().render(copy.deepcopy(values or {}), name="wattprobe", namespace=NAMESPACE)
    )


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


def normalized(obj: Obj) -> Obj:
    """What must differ between the chart's object and kustomize's, taken out:
    - Helm's own labels (HELM_LABELS) in metadata.labels;
    - the order of a container's env list: kustomize's strategic merge puts a patched entry
      first, a template writes it in place. Order matters only to $(VAR) references, which
      no entry here uses (asserted)."""
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels", {})
    for key in HELM_LABELS:
        labels.pop(key, None)
    template = out.get("spec", {}).get("template", {}).get("spec")
    for container in (template or {}).get("containers", []):
        env = container.get("env", [])
        assert not any("$(" in str(e.get("value", "")) for e in env), container["name"]
        container["env"] = {e["name"]: e for e in env}
    return out


def keyed(objs: list[Obj]) -> dict[tuple[str, str], Obj]:
    found = {(o["kind"], o["metadata"]["name"]): normalized(o) for o in objs}
    assert len(found) == len(objs), "duplicate objects"
    return found


def chart_files(subdir: str) -> list[Path]:
    return sorted(p for p in (CHART / "files" / "generated" / subdir).iterdir() if p.is_file())
