"""docs/report.md's worked example is the CSV the real-Prometheus test asserts, byte for byte."""

from __future__ import annotations

import re

from tests.app.report.test_report_prometheus import EXPECTED_CSV
from tests.support.paths import REPO


def test_the_worked_example_is_the_tested_csv() -> None:
    doc = (REPO / "docs" / "report.md").read_text()
    block = re.search(r"^```\n(namespace,.*?)^```", doc, re.MULTILINE | re.DOTALL)
    assert block is not None, "docs/report.md has no CSV block"
    assert block.group(1) == EXPECTED_CSV
