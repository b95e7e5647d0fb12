"""Cumulative counters per key, with a retention window for keys that stopped appearing."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Hashable)


class CounterTable(Generic[K, S]):
    """Monotonic totals per (key, series). Only adds non-negative amounts, so never decreases.

    A key that is not seen for `retention` seconds is dropped by expire(), which returns its final
    totals so callers can account for them (the invariants compare live + retired energy).
    """

    def __init__(self) -> None:
        self._totals: dict[K, dict[S, float]] = {}
        self._seen: dict[K, float] = {}

    def __len__(self) -> int:
        return len(self._totals)

    def __contains__(self, key: object) -> bool:
        return key in self._totals

    def touch(self, key: K, now: float) -> None:
        """Mark key as alive (it keeps its series even in an interval with nothing to add)."""
        self._seen[key] = now
        self._totals.setdefault(key, {})

    def add(self, key: K, series: S, amount: float, now: float) -> None:
        if amount < 0:
            raise ValueError(f"negative increment {amount} for {key!r}")
        totals = self._totals.setdefault(key, {})
        totals[series] = totals.get(series, 0.0) + amount
        self._seen[key] = now

    def add_all(self, key: K, amounts: Mapping[S, float], now: float) -> None:
        for series, amount in amounts.items():
            self.add(key, series, amount, now)

    def totals(self, key: K) -> Mapping[S, float]:
        return self._totals.get(key, {})

    def items(self) -> Iterator[tuple[K, Mapping[S, float]]]:
        return iter(self._totals.items())

    def expire(self, now: float, retention_s: float) -> list[tuple[K, dict[S, float]]]:
        gone = [k for k, seen in self._seen.items() if now - seen > retention_s]
        return [(k, self.drop(k)) for k in gone]

    def drop(self, key: K) -> dict[S, float]:
        """Remove key now; returns its final totals."""
        self._seen.pop(key, None)
        return self._totals.pop(key, {})


def add_into(target: dict[S, float], amounts: Mapping[S, float]) -> None:
    for series, amount in amounts.items():
        target[series] = target.get(series, 0.0) + amount
