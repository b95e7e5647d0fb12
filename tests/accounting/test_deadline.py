"""DeadlineReads: per-source worker threads, one shared deadline, late results used once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from exporter.accounting.deadline import (
    ABANDON_LIMIT,
    BUSY,
    TIMEOUT,
    Call,
    DeadlineReads,
    InlineReads,
)
from exporter.model.readings import SourceError

TIMEOUT_S = 0.2
WAIT_S = 10.0  # how long a test waits for something that must happen (never reached when it works)


class Gated:
    """A source whose every call blocks until the test opens its gate; returns a call counter."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0
        self.returned = 0
        self.running = 0
        self.overlapped = False
        self._lock = threading.Lock()

    def read(self) -> int:
        with self._lock:
            self.calls += 1
            n = self.calls
            self.running += 1
            self.overlapped = self.overlapped or self.running > 1
        self.gate.wait(WAIT_S)
        with self._lock:
            self.running -= 1
            self.returned += 1
        return n

    def wait_returned(self, n: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.returned < n:
            assert time.monotonic() < deadline, f"{self.returned} calls returned, not {n}"
            time.sleep(0.005)


@pytest.fixture
def reads() -> Iterator[DeadlineReads]:
    made = DeadlineReads(TIMEOUT_S, clock=time.monotonic)
    yield made
    made.close()


def test_on_time_calls_return_their_values_and_stamps(reads: DeadlineReads) -> None:
    before = time.monotonic()
    got = reads.run([Call("a", "one", lambda: 1), Call("b", "two", lambda: "x")])
    assert (got["a"].value, got["a"].missed, got["a"].error) == (1, "", None)
    assert got["b"].value == "x"
    assert before <= got["a"].stamp <= time.monotonic()


def test_errors_come_back_as_errors(reads: DeadlineReads) -> None:
    def fail() -> int:
        raise SourceError("read error", "boom")

    got = reads.run([Call("a", "one", fail)])["a"]
    assert isinstance(got.error, SourceError)
    assert (got.value, got.missed) == (None, "")


def test_a_stuck_source_misses_then_is_busy_and_never_called_twice(
    reads: DeadlineReads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.accounting.deadline")
    slow = Gated()
    slow.gate.clear()
    calls = [Call("slow", "slow", slow.read), Call("fast", "fast", lambda: 7)]
    started = time.monotonic()
    first = reads.run(calls)
    took = time.monotonic() - started
    assert first["slow"].missed == TIMEOUT and first["slow"].value is None
    assert first["fast"].value == 7 and not first["fast"].missed
    assert TIMEOUT_S * 0.9 <= took < TIMEOUT_S + 1.0
    running = [first["slow"].duration_s]
    for _ in range(3):
        started = time.monotonic()
        again = reads.run(calls)
        assert time.monotonic() - started < 0.1  # a busy source is not waited for at all
        assert again["slow"].missed == BUSY and again["slow"].value is None
        running.append(again["slow"].duration_s)  # how long it has been running
        assert again["fast"].value == 7
    # the stuck call's age only grows (measured from when its worker started it, which on a
    # loaded machine can be a little after the round's deadline clock started)
    assert running == sorted(running) and running[0] > 0
    assert slow.calls == 1
    assert sum("not return" in r.getMessage() for r in caplog.records) == 1
    slow.gate.set()
    slow.wait_returned(1)
    back = reads.run(calls)
    # the fresh call returned in time: its value (call 2) is used and the late one dropped
    assert (back["slow"].value, back["slow"].missed) == (2, "")
    assert not slow.overlapped
    assert reads.run(calls)["slow"].value == 3  # the late value of call 1 never comes back
    assert any("answers in time again" in r.getMessage() for r in caplog.records)


def test_late_result_is_used_when_the_next_call_misses_too(reads: DeadlineReads) -> None:
    slow = Gated()
    slow.gate.clear()
    calls = [Call("slow", "slow", slow.read)]
    assert reads.run(calls)["slow"].missed == TIMEOUT
    slow.gate.set()
    slow.wait_returned(1)
    slow.gate.clear()  # call 1 came late; call 2 will hang
    got = reads.run(calls)["slow"]
    assert (got.missed, got.value) == (TIMEOUT, 1)  # missed, but call 1's late value is used
    assert got.late_by_s > 0
    for _ in range(2):  # call 2 still runs: busy, and call 1's value is not handed out twice
        busy = reads.run(calls)["slow"]
        assert (busy.missed, busy.value) == (BUSY, None)
    slow.gate.set()
    slow.wait_returned(2)
    assert reads.run(calls)["slow"].value == 3


def test_late_errors_are_dropped(reads: DeadlineReads) -> None:
    gate = threading.Event()
    fail_now = [True]

    def flaky() -> int:
        gate.wait(WAIT_S)
        if fail_now[0]:
            raise SourceError("read error", "late and broken")
        return 5

    calls = [Call("x", "x", flaky)]
    assert reads.run(calls)["x"].missed == TIMEOUT
    gate.set()
    time.sleep(0.05)
    fail_now[0] = False
    got = reads.run(calls)["x"]
    assert (got.value, got.missed, got.error) == (5, "", None)


def test_calls_of_one_worker_run_in_order(reads: DeadlineReads) -> None:
    order: list[str] = []

    def record(name: str) -> Callable[[], str]:
        def call() -> str:
            order.append(name)
            return name

        return call

    got = reads.run([Call("cpu", "procfs", record("cpu")), Call("tasks", "procfs", record("t"))])
    assert order == ["cpu", "t"]
    assert (got["cpu"].value, got["tasks"].value) == ("cpu", "t")


def test_the_deadline_is_shared_not_per_source(reads: DeadlineReads) -> None:
    gated = [Gated() for _ in range(4)]
    for g in gated:
        g.gate.clear()
    started = time.monotonic()
    got = reads.run([Call(f"s{i}", f"s{i}", g.read) for i, g in enumerate(gated)])
    assert time.monotonic() - started < TIMEOUT_S + 1.0  # not 4 x the timeout
    assert {o.missed for o in got.values()} == {TIMEOUT}
    for g in gated:
        g.gate.set()


def test_call_on_waits_for_the_worker_and_skips_a_busy_one(reads: DeadlineReads) -> None:
    slow = Gated()
    done: list[str] = []
    reads.run([Call("slow", "slow", slow.read)])
    assert reads.call_on("slow", lambda: done.append("closed"), timeout_s=1.0)
    assert done == ["closed"]
    slow.gate.clear()
    reads.run([Call("slow", "slow", slow.read)])
    assert not reads.call_on("slow", lambda: done.append("again"), timeout_s=1.0)
    assert done == ["closed"]
    slow.gate.set()


def test_close_leaves_a_stuck_worker_behind_within_its_bound() -> None:
    reads = DeadlineReads(TIMEOUT_S)
    stuck = threading.Event()
    reads.run([Call("s", "s", lambda: stuck.wait(WAIT_S))])
    started = time.monotonic()
    reads.close(timeout_s=0.2)
    assert time.monotonic() - started < 1.0
    stuck.set()


def test_inline_reads_run_on_the_callers_thread() -> None:
    threads: list[threading.Thread] = []

    def call() -> int:
        threads.append(threading.current_thread())
        return 1

    got = InlineReads(clock=lambda: 42.0).run([Call("a", "w", call)])
    assert threads == [threading.current_thread()]
    assert (got["a"].value, got["a"].stamp) == (1, 42.0)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        DeadlineReads(0.0)


def _until_fresh(reads: DeadlineReads, calls: list[Call], key: str) -> object:
    """run() until key returns in time; bounded (each run waits at most one deadline)."""
    for _ in range(int(WAIT_S / TIMEOUT_S) + 10):
        out = reads.run(calls)[key]
        if not out.missed:
            return out.value
        time.sleep(TIMEOUT_S / 4)
    raise AssertionError(f"{key} never answered")


def test_a_stuck_worker_is_abandoned_and_the_source_called_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call stuck past the bound is left behind: a fresh worker calls the source again, the
    stuck call's result is never used, and its thread ends when it returns."""
    stuck = threading.Event()
    calls_made: list[str] = []

    def read() -> str:
        calls_made.append("call")
        if len(calls_made) == 1:
            stuck.wait(WAIT_S)  # the first call blocks, as a read in the kernel would
            return "stale"
        return "fresh"

    reads = DeadlineReads(TIMEOUT_S, abandon_after_s=TIMEOUT_S * 2)
    try:
        calls = [Call("k", "src", read), Call("k2", "src", lambda: "second")]
        first = reads.run(calls)
        assert first["k"].missed == TIMEOUT
        assert _until_fresh(reads, calls, "k") == "fresh"
        assert reads.abandoned == {"src": 1}
        left = [t for t in threading.enumerate() if t.name == "source-src"]
        assert len(left) == 2  # the stuck one and the fresh one
        stuck.set()  # the abandoned thread ends after its one call; the fresh one waits for jobs
        for _ in range(3):
            got = reads.run(calls)
            assert got["k"].value != "stale"
            assert got["k2"].value == "second"
        assert any("left behind" in r.getMessage() for r in caplog.records)
    finally:
        reads.close()
    for t in left:
        t.join(WAIT_S)
    assert not [t for t in left if t.is_alive()]


def test_abandoned_threads_are_bounded_per_source(caplog: pytest.LogCaptureFixture) -> None:
    """A source stuck every time costs at most ABANDON_LIMIT threads, then stays busy."""
    gate = threading.Event()

    def read() -> int:
        gate.wait(WAIT_S)
        return 1

    reads = DeadlineReads(TIMEOUT_S, abandon_after_s=TIMEOUT_S)
    try:
        calls = [Call("k", "src", read)]
        for _ in range(int(WAIT_S / TIMEOUT_S)):
            got = reads.run(calls)["k"]
            assert got.missed in (TIMEOUT, BUSY)
            if reads.abandoned.get("src", 0) > ABANDON_LIMIT:
                break
            time.sleep(TIMEOUT_S / 2)
        assert reads.abandoned["src"] == ABANDON_LIMIT + 1  # the limit, and said once
        assert reads.run(calls)["k"].missed == BUSY
        assert len([t for t in threading.enumerate() if t.name == "source-src"]) == (
            ABANDON_LIMIT + 1
        )
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
    finally:
        gate.set()
        reads.close()
