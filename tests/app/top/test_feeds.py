"""The --from feed: one scrape per new interval, problems as one line, never an exception."""

from __future__ import annotations

import queue
import urllib.error
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from exporter.app.top.feeds import FeedEvent, HttpFeed, Problem, Scraped, interval_marker
from exporter.exposition.collector import SnapshotCollector
from exporter.model.snapshot import Snapshot
from tests.app.top.snapshots import snapshot

URL = "http://node:28390/metrics"


def exposition(snap: Snapshot) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap))
    return generate_latest(registry).decode()


def events_from(pages: list[Callable[[], str]]) -> list[FeedEvent]:
    """Run the feed over a scripted sequence of reads (one per poll); the events they caused."""
    got: queue.SimpleQueue[FeedEvent] = queue.SimpleQueue()
    polls = iter(pages)
    done: queue.SimpleQueue[list[FeedEvent]] = queue.SimpleQueue()

    def read(_url: str) -> str:
        page = next(polls, None)
        if page is None:  # all pages read and handled: what came of them is complete
            seen = []
            while not got.empty():
                seen.append(got.get())
            done.put(seen)
            raise TimeoutError
        return page()

    feed = HttpFeed(URL, 0.001, read=read)
    feed.start(got.put)
    events = done.get(timeout=10)
    feed.stop()
    return events


def test_one_scrape_per_interval() -> None:
    first, second = exposition(snapshot(3, 100.0)), exposition(snapshot(4, 105.0))
    events = events_from([lambda: first, lambda: first, lambda: second, lambda: second])
    scraped = [e.scrape for e in events if isinstance(e, Scraped)]
    assert [s.intervals for s in scraped] == [3, 4]
    assert [s.at for s in scraped] == [100.0, 105.0]


def test_problems_are_one_line_and_the_feed_goes_on() -> None:
    def refused() -> str:
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    def not_found() -> str:
        raise urllib.error.HTTPError(URL, 404, "Not Found", {}, None)  # type: ignore[arg-type]

    good = exposition(snapshot(7, 1.0))
    events = events_from(
        [refused, not_found, lambda: "node_cpu_seconds_total 1\n", lambda: "garbage{", lambda: good]
    )
    problems = [e.message for e in events if isinstance(e, Problem)]
    assert problems[:3] == [
        f"cannot read {URL}: Connection refused",
        f"cannot read {URL}: HTTP 404 Not Found",
        f"{URL} is not wattprobe's /metrics",
    ]
    assert all(e.retrying for e in events if isinstance(e, Problem))
    assert isinstance(events[-1], Scraped) and events[-1].scrape.intervals == 7


def test_interval_marker() -> None:
    page = exposition(snapshot(9, 123.5))
    marker = interval_marker(page)
    assert marker.splitlines()[0] == "wattprobe_intervals_total 9.0"
    assert marker.splitlines()[1].startswith("wattprobe_last_interval_timestamp_seconds 123.5")
    assert interval_marker("up 1\n") == ""
