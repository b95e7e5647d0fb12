"""Interpreter settings for the long-running `wattprobe serve` process."""

from __future__ import annotations

import gc

# Every interval allocates and drops tens of thousands of short-lived objects (a sample per
# process, per-task maps) that reference counting frees; with CPython's default first-generation
# threshold (700) the cyclic collector still ran about 7 times per interval on a 5,000-process
# node only to find nothing, about a tenth of the interval's CPU (docs/performance.md).
GC_GEN0_THRESHOLD = 10_000


def tune_for_serving() -> None:
    """Collect cycles less often, and leave the objects of start-up (modules, classes, the
    configuration) out of every later full collection."""
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)
    gc.freeze()
