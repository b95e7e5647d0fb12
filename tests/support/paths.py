"""Where the checkout and its checked-in fixture trees are, for tests at any depth."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
