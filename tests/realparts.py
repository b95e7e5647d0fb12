"""Gate tests on real parts of the system (bcc, prometheus, promtool, root, cgroup v2...).

Outside CI a missing part skips the test with the reason. With WATTPROBE_REQUIRE_REAL=1 (CI)
it fails instead: a test that needs a real part must never pass by not running.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE_REAL = os.environ.get("WATTPROBE_REQUIRE_REAL") == "1"


def missing(what: str) -> NoReturn:
    if REQUIRE_REAL:
        pytest.fail(f"required real part missing: {what} (WATTPROBE_REQUIRE_REAL=1)")
    pytest.skip(f"needs {what}")


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"the {name} binary")
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        missing("root")
