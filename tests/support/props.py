"""Shared settings for the property tests (tests/test_props_*.py).

WATTPROBE_FUZZ_EXAMPLES raises the example count of every property for a fuzz run at scale
(docs/benchmarks-fuzz.md); the default keeps `make test` quick.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("WATTPROBE_FUZZ_EXAMPLES", "300"))

# deadline=None: a shared 2-core machine must not turn a slow example into a failure
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
