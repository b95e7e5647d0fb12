"""One wall-clock budget for the whole validation run: every wait asks it how long it may last."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return max(0.0, self.started + self.seconds - time.monotonic())

    def cap(self, wanted: float, reserve: float = 0.0) -> float:
        """wanted, cut so that `reserve` seconds stay for what must follow (stop, write)."""
        return max(0.0, min(wanted, self.left() - reserve))

    def elapsed(self) -> float:
        return time.monotonic() - self.started
