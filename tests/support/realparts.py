"""Gate tests on real parts of the system (bcc, prometheus, promtool, root, cgroup v2...).

Outside CI a missing part skips the test with the reason. With WATTPROBE_REQUIRE_REAL=1 (CI)
it fails instead: a test that needs a real part must never pass by not running.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from typing import NoReturn

import pytest

REQUIRE_REAL = os.environ.get("WATTPROBE_REQUIRE_REAL") == "1"


def missing(what: str) -> NoReturn:
    if REQUIRE_REAL:
        pytest.fail(f"required real part missing: {what} (WATTPROBE_REQUIRE_REAL=1)")
    pytest.skip(f"needs {what}")


def venv_bin() -> str:
    """The bin/ of the Python running the tests: `make pytest` runs `.venv/bin/python -m pytest`
    without activating the venv, so what the test extra installs there (kubectl) is not on PATH."""
    return sysconfig.get_path("scripts")


def find_binary(name: str) -> str | None:
    """`name` from the venv's bin/ first (the version pyproject.toml pins), then from PATH."""
    return shutil.which(name, path=venv_bin()) or shutil.which(name)


def require_binary(name: str) -> str:
    path = find_binary(name)
    if path is None:
        hint = " (scripts/setup-debian.sh test installs it)"
        missing(f"the {name} binary, not in {venv_bin()} nor on PATH{hint}")
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        missing("root")
