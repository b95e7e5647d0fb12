"""A slow source under the real monitor loop (Monitor.run on its thread, short real intervals):
the others keep counting at their rate, the loop keeps its pace, the slow one reports timeout /
still busy and recovers, and every joule the fake counters advanced is counted exactly once."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from exporter.accounting.deadline import BUSY, TIMEOUT
from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdlePower
from exporter.model.readings import CpuTimes, EnergyReading, SourceError, TaskSample
from exporter.model.snapshot import Snapshot
from tests.support.invariants import check_monotonic, check_snapshot
from tests.support.monitor import monitor_settings

INTERVAL_S = 0.4
TIMEOUT_S = 0.15
# How much later than its tick a step may end: the read deadline plus the step's own work on a
# loaded 2-core machine. Without the deadline a hung source would hold the loop for seconds.
STEP_SLACK_S = TIMEOUT_S + 0.35
MAX_RANGE_UJ = 262_143_328_850
CGROUP = (
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1111_2222.slice/"
    f"cri-containerd-{'a' * 64}.scope\n"
)


@dataclass
class Counter:
    """An energy counter advancing at watts in real time while running; frozen otherwise."""

    watts: float
    base_uj: int = 10**9
    since: float | None = None  # monotonic start of the current run

    def value(self) -> int:
        if self.since is None:
            return self.base_uj
        return self.base_uj + int(self.watts * 1e6 * (time.monotonic() - self.since))

    def run(self) -> None:
        self.since = time.monotonic()

    def freeze(self) -> None:
        self.base_uj = self.value()
        self.since = None


@dataclass
class CounterSource:
    """A power source over one counter; read() can be made to hang or to take a while."""

    name: str
    device: str
    counter: Counter
    delay_s: float = 0.0
    gate: threading.Event = field(default_factory=threading.Event)
    calls: int = 0
    running: int = 0
    overlapped: bool = False

    def __post_init__(self) -> None:
        self.gate.set()

    def read(self) -> Sequence[EnergyReading]:
        self.calls += 1
        self.running += 1
        self.overlapped = self.overlapped or self.running > 1
        try:
            self.gate.wait(30)
            time.sleep(self.delay_s)
            # the value as the read returns: what a hung sysfs read would see when it completes
            uj = self.counter.value()
        finally:
            self.running -= 1
        return [EnergyReading("package", self.device, self.name, uj, MAX_RANGE_UJ)]


class Host:
    """/proc/stat and one busy container process, advancing in real time."""

    name = "procfs"

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def cpu_times(self) -> CpuTimes:
        t = time.monotonic() - self.t0
        return CpuTimes(busy_s=t, idle_s=t, ncpu=2)

    def tasks(self) -> list[TaskSample]:
        t = time.monotonic() - self.t0
        return [TaskSample((4242, 1), 4242, "work", CGROUP, False, t)]


@dataclass
class Loop:
    """Monitor.run on its own thread; every snapshot it publishes, with when it was published."""

    monitor: Monitor
    stop: threading.Event = field(default_factory=threading.Event)
    steps: list[tuple[float, Snapshot]] = field(default_factory=list)

    def start(self) -> threading.Thread:
        def on_step() -> None:
            self.steps.append((time.monotonic(), self.monitor.snapshot))

        thread = threading.Thread(
            target=self.monitor.run, args=(INTERVAL_S, self.stop, on_step), daemon=True
        )
        thread.start()
        return thread

    def wait_steps(self, n: int) -> list[Snapshot]:
        """The next n snapshots."""
        first = len(self.steps)
        deadline = time.monotonic() + n * INTERVAL_S + 10
        while len(self.steps) < first + n:
            assert time.monotonic() < deadline, "the loop stopped stepping"
            time.sleep(0.01)
        return [s for _, s in self.steps[first : first + n]]


def node_j(snap: Snapshot, device: str) -> float:
    return math.fsum(z.active_j + z.idle_j for z in snap.node_energy if z.device == device)


def status(snap: Snapshot, source: str) -> tuple[bool, str]:
    found = [s for s in snap.sources if s.source == source]
    assert len(found) == 1, snap.sources
    return found[0].up, found[0].reason


StartLoop = Callable[[CounterSource, CounterSource], Loop]


@pytest.fixture
def loop() -> Iterator[StartLoop]:
    made: list[tuple[Loop, threading.Thread]] = []

    def start(fast: CounterSource, slow: CounterSource) -> Loop:
        monitor = Monitor(
            MonitorParts(cpu=Host(), activity=Host(), power=[fast, slow]),
            monitor_settings(idle_power=IdlePower(default_w=1.0), read_timeout_s=TIMEOUT_S),
        )
        running = Loop(monitor)
        made.append((running, running.start()))
        return running

    yield start
    for running, thread in made:
        running.stop.set()
        thread.join(10)
        running.monitor.close()


def check_pace(loop: Loop) -> None:
    """No interval lost: one snapshot per tick, each later than its tick by at most the slack."""
    seqs = [s.sequence for _, s in loop.steps]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    times = [t for t, _ in loop.steps]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) < INTERVAL_S + STEP_SLACK_S, gaps
    elapsed = times[-1] - times[0]
    assert len(times) - 1 >= elapsed / INTERVAL_S - 2, (len(times), elapsed)


def check_exact(loop: Loop, sources: Sequence[CounterSource], start_uj: int) -> None:
    final = loop.monitor.snapshot
    for s in sources:
        advanced_j = (s.counter.value() - start_uj) / 1e6
        assert advanced_j > 0
        assert node_j(final, s.device) == pytest.approx(advanced_j, abs=1e-6), s.name
    for (_, a), (_, b) in itertools.pairwise(loop.steps):
        check_monotonic(a, b)
        check_snapshot(b)


def test_hung_source_times_out_and_recovers_with_nothing_lost(loop: StartLoop) -> None:
    fast = CounterSource("rapl", "intel-rapl:0", Counter(watts=100.0))
    slow = CounterSource("hwmon", "hwmon3", Counter(watts=40.0))
    start_uj = fast.counter.base_uj
    running = loop(fast, slow)
    running.wait_steps(2)  # baselines taken on frozen counters
    fast.counter.run()
    slow.counter.run()
    running.wait_steps(2)
    assert status(running.monitor.snapshot, "hwmon") == (True, "")

    slow.gate.clear()  # every hwmon read now hangs until released: ~6 intervals
    hung = running.wait_steps(6)
    calls_while_hung = slow.calls
    reasons = [status(s, "hwmon") for s in hung]
    assert reasons[0] == (False, TIMEOUT) or reasons[1] == (False, TIMEOUT), reasons
    assert reasons[-1] == (False, BUSY), reasons
    assert all(not up for up, _ in reasons[1:]), reasons
    for a, b in itertools.pairwise(hung):
        assert status(b, "rapl") == (True, "")
        # the fast zone goes on at its rate (100 W x the time between its readings)
        assert node_j(b, "intel-rapl:0") > node_j(a, "intel-rapl:0")
        assert node_j(b, "hwmon3") == node_j(a, "hwmon3")  # frozen, not zeroed or dropped
    rate = (node_j(hung[-1], "intel-rapl:0") - node_j(hung[0], "intel-rapl:0")) / (
        INTERVAL_S * (len(hung) - 1)
    )
    assert 60.0 < rate < 160.0, rate  # 100 W, over intervals whose length jitters under load

    slow.gate.set()
    running.wait_steps(3)
    assert status(running.monitor.snapshot, "hwmon") == (True, "")
    assert slow.calls == calls_while_hung + 3  # never called while its read hung
    assert not slow.overlapped
    fast.counter.freeze()
    slow.counter.freeze()
    running.wait_steps(3)
    check_exact(running, [fast, slow], start_uj)
    check_pace(running)


def test_source_slower_than_its_deadline_counts_all_an_interval_late(loop: StartLoop) -> None:
    fast = CounterSource("rapl", "intel-rapl:0", Counter(watts=80.0))
    # each read takes longer than the deadline but less than an interval: every interval misses,
    # and the reading that came late is used at the next one
    slow = CounterSource("hwmon", "hwmon3", Counter(watts=25.0))
    start_uj = fast.counter.base_uj
    running = loop(fast, slow)
    running.wait_steps(2)
    slow.delay_s = TIMEOUT_S + 0.1
    fast.counter.run()
    slow.counter.run()
    late = running.wait_steps(6)
    for s in late[1:]:
        up, reason = status(s, "hwmon")
        assert (up, reason) == (False, TIMEOUT)
        detail = next(x.detail for x in s.sources if x.source == "hwmon")
        assert "used the reading that came" in detail, detail
    assert node_j(late[-1], "hwmon3") > node_j(late[1], "hwmon3") > 0
    fast.counter.freeze()
    slow.counter.freeze()
    slow.delay_s = 0.0
    running.wait_steps(3)
    assert status(running.monitor.snapshot, "hwmon") == (True, "")
    check_exact(running, [fast, slow], start_uj)
    check_pace(running)


class FailingActivity:
    name = "procfs"

    def __init__(self, host: Host) -> None:
        self.host = host
        self.failing = False

    def tasks(self) -> list[TaskSample]:
        if self.failing:
            raise SourceError("read error", "injected")
        return self.host.tasks()


def test_activity_gap_does_not_recount_cpu_time() -> None:
    """An interval without the activity source keeps the previous per-task baseline: the next
    one counts only the CPU time of the gap, not every task's whole lifetime again."""
    clock = [1000.0]
    cpu_s = [500.0]

    class Tasks:
        name = "procfs"
        failing = False

        def tasks(self) -> list[TaskSample]:
            if self.failing:
                raise SourceError("read error", "injected")
            return [TaskSample((7, 1), 7, "work", CGROUP, False, cpu_s[0])]

    class Cpu:
        def cpu_times(self) -> CpuTimes:
            return CpuTimes(busy_s=cpu_s[0], idle_s=cpu_s[0], ncpu=2)

    tasks = Tasks()
    monitor = Monitor(
        MonitorParts(cpu=Cpu(), activity=tasks), monitor_settings(), clock=lambda: clock[0]
    )
    monitor.step()
    for failing in (False, True, True, False, False):
        clock[0] += 5
        cpu_s[0] += 2.0
        tasks.failing = failing
        snap = monitor.step()
    container = next(c for c in snap.containers if c.container_id == "a" * 64)
    assert container.cpu_seconds == pytest.approx(10.0)  # 5 intervals x 2 s, not 500 more
