"""One log line when the server starts shedding connections, one when it has stopped.

A flood sheds thousands of connections a second; a line per connection would flood the log
too (and cost the loop), while the counters alone leave nothing in the log to say an attack
happened. So an episode opens with one warning naming the reason, counts quietly while shedding
goes on, and closes with one line of totals once QUIET_S has passed without any.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("exporter.web.server")

QUIET_S = 30.0  # no shedding this long closes an episode


class ShedEpisodes:
    """Used from the event loop only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._last = 0.0

    def event(self, reason: str) -> None:
        now = self._clock()
        self.tick(now)
        if not self._counts:
            log.warning(
                "shedding connections to keep serving (%s); one line when it stops "
                "(wattprobe_web_connections_shed_total counts each)",
                reason,
            )
        self._counts[reason] += 1
        self._last = now

    def tick(self, now: float | None = None) -> None:
        """Close the episode when it has been quiet long enough (called now and then)."""
        now = self._clock() if now is None else now
        if self._counts and now - self._last >= QUIET_S:
            shown = ", ".join(f"{n} {reason}" for reason, n in sorted(self._counts.items()))
            log.info("stopped shedding connections: %s", shown)
            self._counts.clear()

    @property
    def open(self) -> bool:
        return bool(self._counts)
