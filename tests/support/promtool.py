"""promtool, run the way every test runs it: `check metrics` on an exposition, `test rules` on
a unit-test file; each asserts it passed and shows promtool's own output when not."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.realparts import require_binary


def check_metrics(body: str) -> None:
    """promtool check metrics on an exposition text (lint: names, help, types)."""
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def run_rule_tests(case: dict[str, Any], path: Path, *, sort_keys: bool = True) -> None:
    """Writes a promtool unit-test file to path and runs promtool test rules on it."""
    path.write_text(yaml.safe_dump(case, sort_keys=sort_keys))
    result = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
