"""The zone meter: the reading gate, counter deltas and wraps, power integration, the idle split.

The stateful property test drives one meter through arbitrary sequences of valid, garbage,
empty, negative, huge, NaN, wrapping, resetting and vanishing readings and checks what must hold
whatever comes: no energy beyond what the device can draw over the time that passed, nothing
negative, every rejected reading visible, and the true energy recovered once readings are good.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from exporter.accounting.idle import IdleBaseline
from exporter.accounting.meter import (
    POWER,
    DeviceSample,
    Measured,
    ZoneMeter,
    _invalid,
    split_active_idle,
)
from exporter.model.health import IMPLAUSIBLE, RESET, UNREADABLE
from tests.support.props import PROPERTY

RANGE = 262_143_328_850  # a RAPL package's max_energy_range_uj
BOUND_W = 1_000.0


def counter(stamp: float, uj: int | None, **kw: object) -> DeviceSample:
    return DeviceSample(stamp, energy_uj=uj, max_energy_uj=RANGE, max_power_w=BOUND_W, **kw)  # type: ignore[arg-type]


def feed(meter: ZoneMeter, samples: list[DeviceSample]) -> list[Measured | None]:
    return [meter.measure(s, interval=i, utilization=None) for i, s in enumerate(samples)]


def test_plain_increase_and_first_reading_is_a_baseline() -> None:
    got = feed(ZoneMeter(IdleBaseline(0.0)), [counter(0, 1_000), counter(5, 51_000)])
    assert got[0] is None
    assert got[1] == Measured(0.05, 0.0, 5.0, "counter")


def test_single_wrap_between_consecutive_intervals_is_counted() -> None:
    got = feed(ZoneMeter(IdleBaseline(0.0)), [counter(0, RANGE - 1_000_000), counter(5, 2_000_000)])
    assert got[1] is not None and got[1].energy_j == pytest.approx(3.0)


def test_lower_value_after_a_gap_is_a_reset_not_a_wrap() -> None:
    meter = ZoneMeter(IdleBaseline(0.0))
    meter.measure(counter(0, RANGE - 1_000_000), interval=0, utilization=None)
    assert meter.measure(counter(10, 2_000_000), interval=2, utilization=None) is None
    assert meter.rejected == {RESET: 1}


def test_one_absurd_power_reading_adds_nothing_now_or_later() -> None:
    """hwmon power1_input 18446744073709551615 uW between steady 100 W readings (issue 15)."""
    meter = ZoneMeter(IdleBaseline(0.0))
    samples = [
        DeviceSample(0.0, power_w=100.0),
        DeviceSample(1.0, power_w=18446744073709.551615),
        DeviceSample(2.0, power_w=100.0),
        DeviceSample(3.0, power_w=100.0),
    ]
    got = feed(meter, samples)
    assert got[1] is None
    total = math.fsum(m.energy_j for m in got if m is not None)
    assert total == pytest.approx(300.0)  # 3 s at 100 W: the gap is bridged from the last good one
    assert meter.rejected == {IMPLAUSIBLE: 1}
    assert meter.up


def test_an_absurd_counter_jump_never_becomes_the_baseline() -> None:
    meter = ZoneMeter(IdleBaseline(0.0))
    got = feed(meter, [counter(0, 10**9), counter(1, RANGE), counter(2, 10**9 + 200_000_000)])
    assert got[1] is None and meter.rejected == {IMPLAUSIBLE: 1}
    assert got[2] is not None and got[2].energy_j == pytest.approx(200.0)


def test_a_real_reset_resumes_counting_from_the_new_epoch() -> None:
    """A driver reload restarts the counter: one interval is lost, the next counts again."""
    meter = ZoneMeter(IdleBaseline(0.0))
    got = feed(
        meter,
        [counter(0, 10**11), counter(1, 10**11 + 10**8), counter(2, 5_000), counter(3, 50_005_000)],
    )
    assert got[2] is None and meter.rejected == {RESET: 1}
    assert got[3] is not None and got[3].energy_j == pytest.approx(50.0)
    assert meter.up


def test_a_garbage_first_reading_does_not_stall_the_meter() -> None:
    """The first reading is a baseline without a check against anything: if it was garbage (0),
    the readings that follow agree with each other and counting resumes after one interval."""
    meter = ZoneMeter(IdleBaseline(0.0))
    got = feed(meter, [counter(0, 0), counter(1, 10**11), counter(2, 10**11 + 10**8)])
    assert got[1] is None and meter.rejected == {IMPLAUSIBLE: 1}
    assert got[2] is not None and got[2].energy_j == pytest.approx(100.0)


@pytest.mark.parametrize(
    "sample",
    [
        DeviceSample(1.0, fault="garbage"),
        DeviceSample(1.0),
        DeviceSample(1.0, power_w=math.nan),
        DeviceSample(1.0, power_w=-5.0),
        DeviceSample(1.0, power_w=math.inf),
        DeviceSample(1.0, energy_uj=-1),
        DeviceSample(1.0, energy_uj=2**64),
        DeviceSample(1.0, energy_uj=RANGE + 1, max_energy_uj=RANGE),
    ],
)
def test_unusable_readings_are_rejected_visibly(sample: DeviceSample) -> None:
    meter = ZoneMeter()
    meter.measure(DeviceSample(0.0, power_w=10.0, energy_uj=0), interval=0, utilization=None)
    assert meter.measure(sample, interval=1, utilization=None) is None
    health = meter.health()
    assert not health.up
    assert sum(n for _, n in health.rejected) == 1
    assert {r for r, _ in health.rejected} <= {UNREADABLE, IMPLAUSIBLE}


def test_readings_without_a_shared_quantity_restart_without_counting_twice() -> None:
    """A GPU whose counter failed once: power integrates that span, then the counter resumes
    from the reading after it (not from the last counter value, which would count it again)."""
    meter = ZoneMeter(IdleBaseline(0.0))
    got = feed(
        meter,
        [
            DeviceSample(0.0, energy_uj=0, power_w=100.0),
            DeviceSample(1.0, power_w=100.0),
            DeviceSample(2.0, energy_uj=200_000_000, power_w=100.0),
            DeviceSample(3.0, energy_uj=300_000_000, power_w=100.0),
        ],
    )
    energies = [m.energy_j if m else 0.0 for m in got]
    assert energies == pytest.approx([0.0, 100.0, 100.0, 100.0])
    assert got[1] is not None and got[1].method == POWER


def test_idle_split_uses_the_baseline_and_never_goes_negative() -> None:
    assert split_active_idle(100.0, 10.0, 5.0) == (50.0, 50.0)
    assert split_active_idle(30.0, 10.0, 5.0) == (0.0, 30.0)
    assert split_active_idle(-1.0, 10.0, 5.0) == (0.0, 0.0)


# -- the stateful property test ------------------------------------------------------------

GOOD, SPIKE, GARBAGE, EMPTY, NEGATIVE, NAN, HUGE, RESET_TO, WRAP_TO, VANISH = range(10)


class MeterMachine(RuleBasedStateMachine):
    """One counter device (a RAPL zone that wraps) and one power device (an hwmon sensor),
    each fed the device's true state or something hostile in its place."""

    def __init__(self) -> None:
        super().__init__()
        self.counter_meter = ZoneMeter(IdleBaseline(0.0))
        self.power_meter = ZoneMeter(IdleBaseline(0.0))
        self.stamp = 0.0
        self.interval = 0
        self.true_uj = 10**9
        self.true_w = 50.0
        self.counted_j = [0.0, 0.0]  # counter, power
        self.allowed_j = 0.0
        self.rejections_seen = [0, 0]
        self.last_kinds: tuple[int, int] = (GOOD, GOOD)
        self.measured: list[Measured | None] = [None, None]
        self.previous_good = False
        self.true_delta_uj = 0

    @rule(
        dt=st.floats(0.01, 60.0),
        watts=st.floats(0.0, BOUND_W),
        counter_kind=st.integers(0, 9),
        power_kind=st.integers(0, 9),
        junk=st.integers(0, 2**70),
    )
    def interval_passes(
        self, dt: float, watts: float, counter_kind: int, power_kind: int, junk: int
    ) -> None:
        self.stamp += dt
        self.interval += 1
        self.allowed_j += BOUND_W * max(dt, 1e-3)
        # the last interval's counter reading was good and accepted: this one's delta is exact
        self.previous_good = self.last_kinds[0] == GOOD and self.counter_meter.up
        self.true_delta_uj = int(watts * dt * 1e6)
        self.true_uj = (self.true_uj + self.true_delta_uj) % RANGE
        self.true_w = watts
        samples = (self._counter_sample(counter_kind, junk), self._power_sample(power_kind, junk))
        self.last_kinds = (counter_kind, power_kind)
        for i, (meter, sample) in enumerate(
            zip((self.counter_meter, self.power_meter), samples, strict=True)
        ):
            if sample is None:  # vanished: the source returned nothing for it
                self.measured[i] = None
                continue
            before = sum(meter.rejected.values())
            got = meter.measure(sample, interval=self.interval, utilization=None)
            self.measured[i] = got
            rejected = sum(meter.rejected.values()) - before
            assert rejected in (0, 1)
            assert meter.up == (rejected == 0)  # every rejection is visible at once
            if got is not None:
                assert got.active_j >= 0 and got.idle_j >= 0
                self.counted_j[i] += got.energy_j
        if counter_kind == RESET_TO:
            self.true_uj = junk % RANGE

    def _counter_sample(self, kind: int, junk: int) -> DeviceSample | None:
        value: int | None = {
            GOOD: self.true_uj,
            SPIKE: (self.true_uj + junk) % RANGE,
            GARBAGE: None,
            EMPTY: None,
            NEGATIVE: -1 - junk,
            NAN: None,
            HUGE: 2**64 + junk,
            RESET_TO: junk % RANGE,
            WRAP_TO: self.true_uj,
            VANISH: None,
        }[kind]
        if kind == VANISH:
            return None
        fault = "garbage" if kind in (GARBAGE, NAN) else ""
        return DeviceSample(
            self.stamp, energy_uj=value, max_energy_uj=RANGE, max_power_w=BOUND_W, fault=fault
        )

    def _power_sample(self, kind: int, junk: int) -> DeviceSample | None:
        value: float | None = {
            GOOD: self.true_w,
            SPIKE: float(junk) / 1e6,
            GARBAGE: None,
            EMPTY: None,
            NEGATIVE: -1.0 - junk,
            NAN: math.nan,
            HUGE: 1.8446744073709552e13,
            RESET_TO: self.true_w,
            WRAP_TO: self.true_w,
            VANISH: None,
        }[kind]
        if kind == VANISH:
            return None
        return DeviceSample(self.stamp, power_w=value, max_power_w=BOUND_W)

    @invariant()
    def never_more_than_the_devices_can_draw(self) -> None:
        for counted in self.counted_j:
            assert 0 <= counted <= self.allowed_j * (1 + 1e-9) + 1e-6

    @invariant()
    def consecutive_good_counter_readings_count_the_true_delta(self) -> None:
        if self.last_kinds[0] == GOOD and self.previous_good and self.measured[0] is not None:
            assert self.measured[0].energy_j == pytest.approx(self.true_delta_uj / 1e6, abs=1e-6)


TestMeterMachine = MeterMachine.TestCase
TestMeterMachine.settings = settings(PROPERTY, max_examples=max(50, PROPERTY.max_examples // 3))


@PROPERTY
@given(
    st.lists(
        st.tuples(st.floats(0.01, 30.0), st.floats(0.0, BOUND_W)),
        min_size=2,
        max_size=30,
    )
)
def test_good_readings_recover_the_true_energy_exactly(steps: list[tuple[float, float]]) -> None:
    """No fault at all: the counter meter counts what the device drew, wraps included, and the
    power meter the trapezoid of its readings."""
    meter = ZoneMeter(IdleBaseline(0.0))
    stamp, true_uj, drawn_uj = 0.0, RANGE - 10**6, 0
    meter.measure(counter(stamp, true_uj), interval=0, utilization=None)
    counted = 0.0
    for i, (dt, watts) in enumerate(steps, start=1):
        stamp += dt
        energy = int(watts * dt * 1e6)
        drawn_uj += energy
        true_uj = (true_uj + energy) % RANGE
        got = meter.measure(counter(stamp, true_uj), interval=i, utilization=None)
        assert got is not None
        counted += got.energy_j
    assert counted == pytest.approx(drawn_uj / 1e6, rel=1e-9, abs=1e-6)
    assert meter.health().rejected == ()


def test_a_device_that_did_nothing_bills_all_its_energy_as_idle() -> None:
    """Utilization 0: all it drew was idle, whatever the baseline; any other utilization is
    split by the baseline."""
    meter = ZoneMeter(IdleBaseline(10.0))
    meter.measure(counter(0, 0), interval=0, utilization=0.0)
    assert meter.measure(counter(5, 200_000_000), interval=1, utilization=0.0) == Measured(
        0.0, 200.0, 5.0, "counter"
    )
    assert meter.measure(counter(10, 400_000_000), interval=2, utilization=1.0) == Measured(
        150.0, 50.0, 5.0, "counter"
    )


def test_a_reading_at_the_same_instant_covers_no_time() -> None:
    meter = ZoneMeter()
    meter.measure(counter(3, 1_000), interval=0, utilization=0.5)
    assert meter.measure(counter(3, 1_000), interval=1, utilization=0.5) is None


def test_the_idle_baseline_learns_the_mean_power_of_each_interval() -> None:
    """The baseline is taught watts (joules over seconds), not joules or joule-seconds."""
    meter = ZoneMeter()
    for i in range(4):  # 10 W for 5 s each, idle
        meter.measure(counter(5 * i, 50_000_000 * i), interval=i, utilization=0.01)
    assert meter.health().idle_w == 10.0


def test_power_readings_are_integrated_and_named_so() -> None:
    meter = ZoneMeter(IdleBaseline(0.0))
    meter.measure(DeviceSample(0.0, power_w=100.0), interval=0, utilization=None)
    got = meter.measure(DeviceSample(2.0, power_w=300.0), interval=1, utilization=None)
    assert got == Measured(400.0, 0.0, 2.0, "power")
    assert got.energy_j == 400.0
    assert Measured(3.0, 1.0, 1.0, "power").energy_j == 4.0


def test_the_generic_bounds_are_the_documented_ones() -> None:
    """Without a device's own bounds: a u64 counter may hold any u64, power up to 5 kW."""
    assert _invalid(DeviceSample(0.0, energy_uj=2**64 - 1)) == ""
    assert _invalid(DeviceSample(0.0, energy_uj=2**64)) == IMPLAUSIBLE
    assert _invalid(DeviceSample(0.0, power_w=5_000.0)) == ""
    assert _invalid(DeviceSample(0.0, power_w=5_000.5)) == IMPLAUSIBLE


def test_readings_and_measures_are_frozen_and_slotted() -> None:
    """One DeviceSample per device and interval: no per-instance dict, and no stage can change
    one another stage holds."""
    sample, measured = DeviceSample(0.0, power_w=1.0), Measured(1.0, 0.0, 1.0, POWER)
    for value in (sample, measured):
        assert not hasattr(value, "__dict__")
        # frozen with slots raises TypeError on Python 3.11 (its super() in __setattr__)
        with pytest.raises((dataclasses.FrozenInstanceError, TypeError)):
            setattr(value, dataclasses.fields(value)[0].name, 1.0)


def test_a_fault_episode_is_logged_once_with_its_reason_and_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    meter = ZoneMeter(IdleBaseline(0.0), name="rapl package-0")
    assert meter.health().up is True
    with caplog.at_level(logging.INFO, logger="exporter.accounting.meter"):
        meter.measure(counter(0, 1_000), interval=0, utilization=None)
        assert caplog.messages == []  # the first reading is no recovery
        meter.measure(counter(5, None, fault="EIO"), interval=1, utilization=None)
        meter.measure(counter(10, None, fault="EIO"), interval=2, utilization=None)
        meter.measure(DeviceSample(11.0, power_w=math.nan), interval=3, utilization=None)
        meter.measure(counter(15, 900), interval=4, utilization=None)
        meter.measure(counter(20, 2_000), interval=5, utilization=None)
    assert caplog.messages == [
        "rapl package-0: unreadable (EIO); the last good reading stays the baseline",
        "rapl package-0: readings accepted again",
    ]
    assert meter.health().rejected == ((IMPLAUSIBLE, 1), (RESET, 1), (UNREADABLE, 2))
    default = ZoneMeter()
    with caplog.at_level(logging.WARNING, logger="exporter.accounting.meter"):
        caplog.clear()
        default.measure(DeviceSample(0.0, power_w=-1.0), interval=0, utilization=None)
        default.measure(counter(1, 1_000), interval=1, utilization=None)
        default.measure(counter(2, 1), interval=3, utilization=None)
    assert caplog.messages == [
        "device: implausible reading; the last good reading stays the baseline",
        "device: counter reset; the last good reading stays the baseline",
    ]


def test_a_devices_own_power_bound_is_used_only_when_it_means_something() -> None:
    """0 W and any power up to the bound are plausible; a bound that is 0 or infinite is no
    bound (the generic 5 kW applies), a small real one (a 0.5 W sensor rail) is one."""
    for watts in (0.0, 0.5):
        assert _invalid(DeviceSample(0.0, power_w=watts)) == ""
    assert _invalid(DeviceSample(0.0, power_w=0.6, max_power_w=0.5)) == IMPLAUSIBLE
    assert _invalid(DeviceSample(0.0, power_w=0.5, max_power_w=0.5)) == ""
    assert _invalid(DeviceSample(0.0, power_w=100.0, max_power_w=0.0)) == ""
    assert _invalid(DeviceSample(0.0, power_w=6_000.0, max_power_w=math.inf)) == IMPLAUSIBLE
    assert _invalid(DeviceSample(0.0, energy_uj=RANGE, max_energy_uj=RANGE)) == ""
    assert _invalid(DeviceSample(0.0, energy_uj=RANGE + 1, max_energy_uj=RANGE)) == IMPLAUSIBLE


def test_a_short_interval_bounds_its_energy_by_its_own_length() -> None:
    """0.5 s at a 1 kW bound is at most 500 J: 600 J is implausible, not one second's worth."""
    meter = ZoneMeter(IdleBaseline(0.0))
    meter.measure(counter(0.0, 0), interval=0, utilization=None)
    assert meter.measure(counter(0.5, 600_000_000), interval=1, utilization=None) is None
    assert meter.health().rejected == ((IMPLAUSIBLE, 1),)
    fresh = ZoneMeter(IdleBaseline(0.0))
    fresh.measure(counter(0.0, 0), interval=0, utilization=None)
    assert fresh.measure(counter(0.5, 500_000_000), interval=1, utilization=None) == Measured(
        500.0, 0.0, 0.5, "counter"
    )


def test_a_counter_then_power_only_readings_restart_from_the_power_reading() -> None:
    """A GPU whose energy counter stops answering: the next power reading is a new start (no
    span counted twice, nothing invented), the one after it counts."""
    meter = ZoneMeter(IdleBaseline(0.0))
    meter.measure(counter(0, 1_000), interval=0, utilization=None)
    assert meter.measure(DeviceSample(5.0, power_w=10.0), interval=1, utilization=None) is None
    got = meter.measure(DeviceSample(10.0, power_w=30.0), interval=2, utilization=None)
    assert got == Measured(100.0, 0.0, 5.0, "power")
    back = meter.measure(counter(15, 5_000), interval=3, utilization=None)
    assert back is None  # no shared quantity with the power reading: a new start again


def test_sub_second_intervals_integrate_and_split_by_their_own_length() -> None:
    assert split_active_idle(100.0, 10.0, 0.5) == (95.0, 5.0)
    meter = ZoneMeter(IdleBaseline(0.0))
    meter.measure(DeviceSample(0.0, power_w=100.0), interval=0, utilization=None)
    got = meter.measure(DeviceSample(0.5, power_w=100.0), interval=1, utilization=None)
    assert got == Measured(50.0, 0.0, 0.5, "power")
