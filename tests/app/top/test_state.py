"""What the screen shows as events come in: keys, scrapes, problems, an exporter restart."""

from __future__ import annotations

from exporter.app.top.app import TopState
from exporter.app.top.feeds import HttpFeed, Problem, Scraped
from exporter.app.top.frame import SortKey, View
from exporter.app.top.render import Screen
from exporter.app.top.scrape import from_snapshot
from tests.app.top.snapshots import container, snapshot


class Clock:
    now = 10.0

    def __call__(self) -> float:
        return self.now


def scraped(sequence: int, timestamp: float, joules: float) -> Scraped:
    snap = snapshot(sequence, timestamp, containers=[container(1, {("package", ""): joules}, 1.0)])
    return Scraped(from_snapshot(snap, 0.0))


def after(state: TopState, key: str) -> tuple[SortKey, View]:
    assert state.key(key)
    return state.screen.sort, state.screen.view


def test_keys_sort_switch_views_and_quit() -> None:
    state = TopState(Screen("x"), HttpFeed("http://n/metrics", 1.0), Clock())
    assert after(state, "g") == (SortKey.GPU, View.PODS)
    assert after(state, "i") == (SortKey.IDLE, View.PODS)
    assert after(state, "n") == (SortKey.NAME, View.PODS)
    assert after(state, "v") == (SortKey.NAME, View.CONTAINERS)
    assert after(state, "v") == (SortKey.NAME, View.PODS)
    assert after(state, "x") == (SortKey.NAME, View.PODS)  # unknown keys change nothing
    assert not state.key("q")
    assert not state.key("Q")


def test_frames_problems_and_a_restart() -> None:
    clock = Clock()
    state = TopState(Screen("x"), HttpFeed("http://n/metrics", 1.0), clock)
    clock.now += 1.5
    assert state.waiting() == "reading http://n/metrics (1.5s)"
    assert not state.feed(scraped(5, 100.0, 10.0))  # the first scrape is a baseline
    assert state.waiting() == "waiting for the exporter's next interval (1.5s)"
    assert state.feed(scraped(6, 102.0, 30.0))
    assert state.frame is not None and state.frame.containers[0].cpu_w == 10.0
    assert not state.feed(Problem("cannot read http://n/metrics: timed out", retrying=True))
    assert state.screen.problem == "cannot read http://n/metrics: timed out; retrying"
    assert state.frame is not None  # the last numbers stay
    assert not state.feed(scraped(1, 200.0, 1.0))  # counters went back: a new baseline
    assert state.screen.problem == ""
    assert state.feed(scraped(2, 201.0, 5.0))
    assert state.frame.containers[0].cpu_w == 4.0
