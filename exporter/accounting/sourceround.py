"""The first stage of an interval: read every source once, each under its deadline
(exporter/accounting/deadline.py), and turn each outcome into a value and a status.

A source that raises gives nothing and a status saying why; one that misses its deadline gives
the late reading when one came, else nothing. No source can take the interval down. Fallback
power sources (the estimate) count only while no measured power source has read: once one has,
their readings and statuses are dropped for good, as if they had not been read, except the zone
kinds a fallback fills (ZoneFill: the estimate's dram): those count, with the source's status,
until a measured source gives that kind (exporter/accounting/zones.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter.accounting.deadline import (
    TIMEOUT,
    Call,
    DeadlineReads,
    InlineReads,
    Outcome,
    SourceReads,
)
from exporter.accounting.zones import ZoneFill, fill_readings, filled_kinds
from exporter.model.gpu_readings import GpuReadings
from exporter.model.ports import ActivitySource, CpuTimesSource, GpuBackend, PowerSource
from exporter.model.readings import CpuTimes, EnergyReading, SourceError, SourceStatus, TaskSample

log = logging.getLogger(__name__)

T = TypeVar("T")

PROCFS = "procfs"  # /proc/stat is read by the procfs source whichever source measures tasks


@dataclass(frozen=True)
class Round:
    """What one round of reads gave: None where a read gave nothing."""

    cpu: CpuTimes | None
    tasks: Sequence[TaskSample] | None
    readings: tuple[tuple[EnergyReading, float], ...]  # (reading, the clock when it was read)
    gpus: tuple[tuple[GpuReadings | None, float], ...]  # per GPU backend, in order
    statuses: tuple[SourceStatus, ...]
    # (source, reason) for each power source or GPU backend that gave nothing (failed, timed
    # out, still busy): the meters mark each of its devices down with that reason
    unread: tuple[tuple[str, str], ...] = ()


class SourceRound:
    """Reads the node's sources every interval; owns their reader threads."""

    def __init__(
        self,
        *,
        cpu: CpuTimesSource,
        activity: ActivitySource,
        power: Sequence[PowerSource],
        gpus: Sequence[GpuBackend],
        fallback: frozenset[str] = frozenset(),
        fills: Sequence[ZoneFill] = (),
        read_timeout_s: float | None = None,
        startup_statuses: Sequence[SourceStatus] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # sources that failed at start-up (eBPF in auto mode): reported every interval
        self._startup_statuses = tuple(startup_statuses)
        self._cpu = cpu
        self._activity = activity
        self._power = tuple(power)
        self._gpus = tuple(gpus)
        self._fallback = fallback  # names of power sources used only until a measured one reads
        self._measured_seen = False
        # fallback source -> the zone kinds it fills beside measured sources
        self._fills = {f.source: f.zones for f in fills if f.source in fallback}
        self._measured_kinds: set[str] = set()  # zone kinds measured sources have given
        self._clock = clock
        self._reads: SourceReads = (
            DeadlineReads(read_timeout_s, clock) if read_timeout_s else InlineReads(clock)
        )

    def read(self) -> Round:
        got = self._reads.run(self._calls())
        statuses: list[SourceStatus] = []
        cpu = self._take(PROCFS, got["cpu"], statuses)
        tasks = self._take(self._activity.name, got["tasks"], statuses)
        if self._activity.name == PROCFS and len(statuses) == 2:
            statuses = _merge_statuses(statuses[0], statuses[1])
        statuses.extend(self._startup_statuses)
        measured: list[tuple[EnergyReading, float, str]] = []
        fallback: list[tuple[EnergyReading, float, str]] = []
        fallback_statuses: list[SourceStatus] = []
        unread: list[tuple[str, str]] = []
        fallback_unread: list[tuple[str, str]] = []
        for i, source in enumerate(self._power):
            key = f"power.{i}"
            if key not in got:
                continue
            outcome = got[key]
            is_fallback = source.name in self._fallback
            into = fallback_statuses if is_fallback else statuses
            value = self._take(source.name, outcome, into)
            if value is None:
                value = _faulted(outcome)
                if not value:
                    (fallback_unread if is_fallback else unread).append(
                        (source.name, into[-1].reason)
                    )
            (fallback if is_fallback else measured).extend(
                (r, outcome.stamp, source.name) for r in value
            )
        self._measured_kinds.update(r.zone for r, _, _ in measured if not r.fault)
        if self._measured_kinds:
            self._measured_seen = True
        if not self._measured_seen:
            measured += fallback
            statuses += fallback_statuses
            unread += fallback_unread
        else:
            measured += self._filling(fallback, fallback_statuses, statuses)
            unread += [u for u in fallback_unread if self._still_fills(u[0])]
        gpus: list[tuple[GpuReadings | None, float]] = []
        for i, b in enumerate(self._gpus):
            gpus.append((self._take(b.name, got[f"gpu.{i}"], statuses), got[f"gpu.{i}"].stamp))
            if gpus[-1][0] is None:
                unread.append((b.name, statuses[-1].reason))
        readings = tuple((r, stamp) for r, stamp, _ in measured)
        return Round(cpu, tasks, readings, tuple(gpus), tuple(statuses), tuple(unread))

    def _still_fills(self, source: str) -> bool:
        """Whether a fallback source has zone kinds left to fill beside the measured sources."""
        return bool(filled_kinds(self._fills.get(source, ()), self._measured_kinds))

    def _filling(
        self,
        fallback: Sequence[tuple[EnergyReading, float, str]],
        fallback_statuses: Sequence[SourceStatus],
        statuses: list[SourceStatus],
    ) -> list[tuple[EnergyReading, float, str]]:
        """The fallback readings that fill zone kinds no measured source has given; a source
        still filling keeps its status (it is counted), one done filling is dropped."""
        kept: list[tuple[EnergyReading, float, str]] = []
        for source, fill in self._fills.items():
            ours = [item for item in fallback if item[2] == source]
            kept += fill_readings(ours, fill, self._measured_kinds, lambda item: item[0].zone)
        statuses += [s for s in fallback_statuses if self._still_fills(s.source)]
        return kept

    def _calls(self) -> list[Call]:
        """This interval's source reads; each source's calls share its worker thread."""
        calls = [
            Call("cpu", PROCFS, self._cpu.cpu_times),
            Call("tasks", self._activity.name, self._activity.tasks),
        ]
        calls += [
            Call(f"power.{i}", s.name, s.read)
            for i, s in enumerate(self._power)
            if not (
                self._measured_seen and s.name in self._fallback and not self._still_fills(s.name)
            )
        ]
        calls += [Call(f"gpu.{i}", b.name, b.read) for i, b in enumerate(self._gpus)]
        return calls

    def _take(self, name: str, outcome: Outcome[T], statuses: list[SourceStatus]) -> T | None:
        """A read's value (None if it gave none), its status appended to statuses."""
        took = outcome.duration_s
        if outcome.missed:
            detail = (
                f"no answer within {self._reads.timeout_s:g}s"
                if outcome.missed == TIMEOUT
                else f"the read started earlier has run {took:.3g}s and not returned"
            )
            if outcome.value is not None:
                detail += f"; used the reading that came {outcome.late_by_s:.3g}s late"
            statuses.append(SourceStatus(name, False, outcome.missed, detail, took))
            return outcome.value
        exc = outcome.error
        if isinstance(exc, SourceError):
            statuses.append(SourceStatus(name, False, exc.reason, exc.detail, took))
            return None
        if exc is not None:  # a source must never take the loop down
            log.error("source %s failed unexpectedly", name, exc_info=exc)
            statuses.append(SourceStatus(name, False, "internal error", repr(exc), took))
            return None
        statuses.append(SourceStatus(name, True, duration_s=took))
        return outcome.value

    def close(self) -> None:
        """Close the GPU backends (NVML and its event thread), each on its own worker: a
        backend is used by one thread at a time, and a hung read holds it. Then the workers."""
        for backend in self._gpus:
            self._reads.call_on(backend.name, backend.close, timeout_s=5.0)
        self._reads.close()


def _faulted(outcome: Outcome[Sequence[EnergyReading]]) -> Sequence[EnergyReading]:
    """A SourceError's per-device readings (every zone failed, each with its own fault), so
    each shows on its device; () when the error carries none."""
    return outcome.error.readings if isinstance(outcome.error, SourceError) else ()


def _merge_statuses(cpu: SourceStatus, tasks: SourceStatus) -> list[SourceStatus]:
    """procfs serves both /proc/stat and the process list: report it once."""
    if not cpu.up:
        return [
            SourceStatus(
                cpu.source, False, cpu.reason, cpu.detail, cpu.duration_s + tasks.duration_s
            )
        ]
    return [
        SourceStatus(
            PROCFS, tasks.up, tasks.reason, tasks.detail, cpu.duration_s + tasks.duration_s
        )
    ]


def provided(fn: Callable[[], Sequence[T]]) -> Sequence[T]:
    """What a background source's accessor returns; its failure must not fail the interval."""
    try:
        return fn()
    except Exception:
        log.exception("background source accessor %r failed", fn)
        return ()
