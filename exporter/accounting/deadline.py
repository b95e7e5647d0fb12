"""Source reads under a deadline, so that one stuck source cannot stall the interval.

A hung NVML call, a sysfs file that blocks, a /proc read stuck behind a frozen process: read on
the monitor's own thread, any of them would stop every source, the snapshot and /healthz with it.
So each source's calls run on a worker thread of its own, and every interval the monitor hands
all calls to their workers at once and waits for them until one shared deadline. A slow source
therefore delays the others by at most the deadline, however long it takes itself.

What happens to a call that misses the deadline, and why nothing is lost or counted twice:

- It is reported as "timeout" for that interval. Its worker finishes it in the background; the
  source is not called again while it runs ("still busy"), so calls to one source never overlap
  and never pile up, and a source that never returns costs one thread, not one per interval.
- Its result, when it finally comes, is kept. At the next interval the source is called again:
  if that call returns in time, its fresher result is used and the late one dropped; if not,
  the late one is used (and the interval still reports the miss). Readings are cumulative
  (energy counters, CPU seconds) or instantaneous power with its own time stamp, and the monitor
  takes every delta against the last reading it actually used, so a dropped reading loses
  nothing and a used one is counted once.
- Every result carries the clock value of the moment its call returned, so deltas are taken over
  the time between the readings, not between intervals.
- "Still busy" is not for good: a worker whose call has run past ABANDON_AFTER_S (a minute, or
  twenty deadlines if longer) is abandoned. Its thread is left to finish that one call and then
  ends (it runs no further call of its job), its result is never used, and a fresh worker calls
  the source again at this interval. Host files are read non-blocking and bounded
  (host/hostfile.py), so no FIFO, device or huge file can hold a call; what still can is the
  kernel (a read in uninterruptible sleep, a wedged driver), and a thread stuck there cannot be
  killed, only left. So at most ABANDON_LIMIT threads per source are left behind; past that the
  source stays "still busy" and an error says so once. The abandoned call may still touch the
  source's state if it ever returns; sources read cumulative kernel counters, and the monitor
  takes deltas only against readings it used, so that costs at most a skewed interval.

InlineReads runs the same calls on the caller's thread without a deadline (unit tests and tools
that step a monitor by hand).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

TIMEOUT = "timeout"
BUSY = "still busy"
ABANDON_AFTER_S = 60.0  # a call running this long (or 20 deadlines) has its worker abandoned
ABANDON_LIMIT = 3  # threads left behind per source, at most (each is stuck in the kernel)


@dataclass(frozen=True, slots=True)
class Call:
    """One call of one interval. key names it across intervals (a late result is matched to the
    next call with the same key); calls with the same worker run one after another."""

    key: str
    worker: str
    fn: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """What became of one call this interval.

    missed is "" when the call returned in time (value, or error if it raised). Otherwise it
    is TIMEOUT or BUSY, and value is a late result of an earlier call (late_by_s > 0) or None.
    """

    value: T | None = None
    error: Exception | None = None
    stamp: float = 0.0  # the clock when the call that produced value returned
    duration_s: float = 0.0  # how long the call ran (so far, when it missed)
    missed: str = ""
    late_by_s: float = 0.0  # how long after its own deadline the used late result came


class SourceReads(Protocol):
    timeout_s: float | None

    def run(self, calls: Sequence[Call]) -> dict[str, Outcome[Any]]: ...

    def call_on(self, worker: str, fn: Callable[[], None], timeout_s: float) -> bool: ...

    def close(self) -> None: ...


class InlineReads:
    """Every call on the caller's thread, in order, without a deadline."""

    timeout_s: float | None = None

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock

    def run(self, calls: Sequence[Call]) -> dict[str, Outcome[Any]]:
        out: dict[str, Outcome[Any]] = {}
        for call in calls:
            result = _invoke(call.fn, self._clock)
            out[call.key] = Outcome(result.value, result.error, result.stamp, result.duration_s)
        return out

    def call_on(self, worker: str, fn: Callable[[], None], timeout_s: float) -> bool:
        fn()
        return True

    def close(self) -> None:
        pass


@dataclass(slots=True)
class _Result:
    value: Any
    error: Exception | None
    stamp: float  # injected clock at return
    duration_s: float
    ended: float  # time.monotonic() at return (deadlines are on this clock)


@dataclass(eq=False)
class _Job:
    """One worker's calls of one interval."""

    calls: Sequence[Call]
    deadline: float
    results: list[_Result | None] = field(init=False)
    finished: list[threading.Event] = field(init=False)
    started: list[float] = field(init=False)  # monotonic start of each call, 0 until it starts
    done: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # set by the monitor's thread: run no further call of this job

    def __post_init__(self) -> None:
        self.results = [None] * len(self.calls)
        self.finished = [threading.Event() for _ in self.calls]
        self.started = [0.0] * len(self.calls)


def _invoke(fn: Callable[[], Any], clock: Callable[[], float]) -> _Result:
    start = time.monotonic()
    try:
        value, error = fn(), None
    except Exception as exc:  # reported by the caller; a source must never take a thread down
        value, error = None, exc
    ended = time.monotonic()
    return _Result(value, error, clock(), ended - start, ended)


class _Worker:
    """A daemon thread running one source's jobs, one at a time, in order."""

    def __init__(self, name: str, clock: Callable[[], float]) -> None:
        self.name = name
        self._clock = clock
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.current: _Job | None = None
        self._thread = threading.Thread(target=self._loop, name=f"source-{name}", daemon=True)
        self._thread.start()

    def busy(self) -> bool:
        job = self.current
        return job is not None and not job.done.is_set()

    def submit(self, job: _Job) -> None:
        self.current = job
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def running_s(self) -> float:
        """How long the current job has run (0 when idle)."""
        job = self.current
        return time.monotonic() - job.submitted if job is not None and self.busy() else 0.0

    def abandon(self) -> None:
        """Leave this worker: its current call finishes on its own, nothing after it runs."""
        if self.current is not None:
            self.current.abandoned = True
        self.stop()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            for i, call in enumerate(job.calls):
                if job.abandoned:
                    break
                job.started[i] = time.monotonic()
                job.results[i] = _invoke(call.fn, self._clock)
                job.finished[i].set()
            job.done.set()


class DeadlineReads:
    """Calls on per-source worker threads, collected until one deadline per interval.

    run() and close() are called from one thread (the monitor loop's).
    """

    def __init__(
        self,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        abandon_after_s: float | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout {timeout_s!r} must be positive")
        self.timeout_s: float | None = timeout_s
        self._timeout_s = timeout_s
        self._abandon_after_s = (
            abandon_after_s if abandon_after_s is not None else max(ABANDON_AFTER_S, 20 * timeout_s)
        )
        self.abandoned: dict[str, int] = {}  # worker -> threads left behind (tests, logs)
        self._clock = clock
        self._workers: dict[str, _Worker] = {}
        # calls that missed their deadline and have not returned yet: key -> (job, index)
        self._missed: dict[str, tuple[_Job, int]] = {}
        # late results waiting for the next interval: key -> (result, its call's deadline)
        self._late: dict[str, tuple[_Result, float]] = {}
        # when the result last handed out for a key returned: an older one is never used after it
        self._used_at: dict[str, float] = {}
        self._behind: set[str] = set()  # workers whose last interval missed (for log lines)

    def run(self, calls: Sequence[Call]) -> dict[str, Outcome[Any]]:
        deadline = time.monotonic() + self._timeout_s
        self._collect_late()
        groups: dict[str, list[Call]] = {}
        for call in calls:
            groups.setdefault(call.worker, []).append(call)
        jobs: dict[str, _Job | None] = {}
        for name, group in groups.items():
            worker = self._worker(name)
            if worker.busy() and worker.running_s() > self._abandon_after_s:
                worker = self._abandon(name, worker)
            if worker.busy():
                jobs[name] = None
            else:
                submitted = jobs[name] = _Job(group, deadline)
                worker.submit(submitted)
        out: dict[str, Outcome[Any]] = {}
        for name, group in groups.items():
            job: _Job | None = jobs[name]
            missed = False
            for i, call in enumerate(group):
                out[call.key] = outcome = self._outcome(call, job, i, deadline)
                missed = missed or bool(outcome.missed)
            self._log_transition(name, missed, job)
        return out

    def call_on(self, worker: str, fn: Callable[[], None], timeout_s: float) -> bool:
        """Run fn on a source's worker (so its calls never overlap), waiting up to timeout_s.
        False when the worker is still busy with an earlier call or fn did not finish in time."""
        w = self._worker(worker)
        if w.busy():
            log.warning("%s: not called (%s): a read has not returned", worker, _name(fn))
            return False
        job = _Job([Call("call", worker, fn)], time.monotonic() + timeout_s)
        w.submit(job)
        if not job.done.wait(timeout_s):
            log.warning("%s: %s did not return within %gs", worker, _name(fn), timeout_s)
            return False
        result = job.results[0]
        if result is not None and result.error is not None:
            log.error("%s: %s failed", worker, _name(fn), exc_info=result.error)
        return True

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop the workers; one stuck in a call is left behind (it is a daemon thread)."""
        for worker in self._workers.values():
            worker.stop()
        deadline = time.monotonic() + timeout_s
        for worker in self._workers.values():
            if not worker.join(max(0.0, deadline - time.monotonic())):
                log.warning("source %s: its read is still running at shutdown", worker.name)
        self._workers.clear()

    # -- internals ----------------------------------------------------------------------------

    def _worker(self, name: str) -> _Worker:
        worker = self._workers.get(name)
        if worker is None:
            worker = self._workers[name] = _Worker(name, self._clock)
        return worker

    def _abandon(self, name: str, worker: _Worker) -> _Worker:
        """A fresh worker for a source whose call is stuck (see module), within ABANDON_LIMIT."""
        left = self.abandoned.get(name, 0)
        if left >= ABANDON_LIMIT:
            if left == ABANDON_LIMIT:
                self.abandoned[name] = left + 1  # said once
                log.error(
                    "source %s: %d stuck reads left behind already; it stays not called until "
                    "one returns (a read stuck in the kernel: see dmesg for hung tasks)",
                    name,
                    left,
                )
            return worker
        self.abandoned[name] = left + 1
        job = worker.current
        worker.abandon()
        self._missed = {k: v for k, v in self._missed.items() if v[0] is not job}
        del self._workers[name]
        log.warning(
            "source %s: a read has run for %.0fs; left behind, the source is called afresh",
            name,
            worker.running_s(),
        )
        return self._worker(name)

    def _collect_late(self) -> None:
        """Keep the results of missed calls that returned since; drop their errors."""
        for key, (job, i) in list(self._missed.items()):
            result = job.results[i] if job.finished[i].is_set() else None
            if result is None:
                continue
            del self._missed[key]
            if result.error is None:
                self._late[key] = (result, job.deadline)

    def _outcome(self, call: Call, job: _Job | None, i: int, deadline: float) -> Outcome[Any]:
        if job is not None and job.finished[i].wait(max(0.0, deadline - time.monotonic())):
            result = job.results[i]
            assert result is not None
            self._late.pop(call.key, None)  # a fresher reading supersedes a late one
            self._missed.pop(call.key, None)
            self._used_at[call.key] = result.ended
            return Outcome(result.value, result.error, result.stamp, result.duration_s)
        if job is not None:
            self._missed[call.key] = (job, i)
        pending = self._missed.get(call.key)
        running_s = 0.0
        if pending is not None and pending[0].started[pending[1]]:
            running_s = time.monotonic() - pending[0].started[pending[1]]
        missed = TIMEOUT if job is not None else BUSY
        late = self._late.pop(call.key, None)
        if late is None or late[0].ended <= self._used_at.get(call.key, float("-inf")):
            return Outcome(duration_s=running_s, missed=missed)
        result, late_deadline = late
        self._used_at[call.key] = result.ended
        return Outcome(
            result.value,
            None,
            result.stamp,
            running_s,
            missed,
            late_by_s=max(result.ended - late_deadline, 1e-9),
        )

    def _log_transition(self, name: str, missed: bool, job: _Job | None) -> None:
        if missed and name not in self._behind:
            self._behind.add(name)
            what = "has not returned" if job is not None else "is still running"
            log.warning(
                "source %s: a read %s within %gs; the others go on, it is not called again "
                "until it returns",
                name,
                what,
                self._timeout_s,
            )
        elif not missed and name in self._behind:
            self._behind.discard(name)
            log.info("source %s answers in time again", name)


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
