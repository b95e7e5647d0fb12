"""`wattprobe top`: choose the feed (this node or --from URL) and the mode (screen or printed)."""

from __future__ import annotations

import sys
import urllib.parse
from dataclasses import replace

from rich.console import Console

from exporter.app.progress import progress_for
from exporter.app.top.app import Feed, Interactive, run_batch
from exporter.app.top.feeds import HttpFeed, MonitorFeed
from exporter.app.top.render import Screen
from exporter.app.wiring import build
from exporter.model.config import Config

DEFAULT_INTERVAL_S = 2.0  # measuring here: a livelier default than serve's 5s
DEFAULT_POLL_S = 1.0  # reading an exporter: how often to look for its next interval


class TopError(Exception):
    """top cannot start; the message is one line for the user."""


def metrics_url(text: str) -> str:
    """'http://node:28390' -> 'http://node:28390/metrics'; only http and https."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{text!r} is not an http:// or https:// URL")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def make_feed(config: Config, from_url: str | None, interval_s: float | None) -> Feed:
    if from_url is not None:
        return HttpFeed(from_url, interval_s or DEFAULT_POLL_S)
    interval = interval_s or DEFAULT_INTERVAL_S
    progress = progress_for()
    try:
        parts = build(replace(config, interval_s=interval), progress)
    except Exception as exc:  # a source that cannot even be built: one line, no traceback
        raise TopError(f"cannot measure this node: {exc}") from exc
    finally:
        progress.close()
    parts.start()
    return MonitorFeed(parts.monitor, interval, close=parts.close)


def run_top(
    config: Config,
    *,
    from_url: str | None,
    interval_s: float | None,
    once: bool,
    console: Console | None = None,
) -> int:
    console = console or Console(highlight=False)
    feed = make_feed(config, from_url, interval_s)
    screen = Screen(source=feed.label)
    if not once and console.is_terminal and sys.stdin.isatty():
        return Interactive(feed, console, sys.stdin.fileno(), screen).run()
    return run_batch(feed, console, screen, once=once)
