"""Waiting for a condition in tests: one bounded poll loop, so no test waits forever and every
timeout says what it waited for."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(
    check: Callable[[], object], what: str, timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Poll check() until it is truthy; an AssertionError naming what when timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def within(check: Callable[[], object], timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Whether check() turned truthy within timeout (for tests that assert the negative too)."""
    try:
        eventually(check, "", timeout, interval)
    except AssertionError:
        return False
    return True
