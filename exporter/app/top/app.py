"""The `wattprobe top` loop: feed events and key presses in, a redrawn screen out.

Interactive on a terminal (rich Live on the alternate screen, keys through KeyReader); without
a terminal, or with --once, frames are printed one after another instead. The terminal is
restored on every way out: q, Ctrl-C, SIGTERM, SIGHUP, and around Ctrl-Z.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import FrameType
from typing import Protocol

from rich.console import Console, RenderableType
from rich.live import Live

from exporter.app.top.feeds import Emit, FeedEvent, Problem, Scraped
from exporter.app.top.frame import Frame, SortKey, View, frame_between
from exporter.app.top.keys import KeyReader
from exporter.app.top.render import Screen, render
from exporter.app.top.scrape import Scrape, SourceState

TICK_S = 0.25  # how often the screen checks its size and the waiting clock
ONCE_TIMEOUT_S = 120.0
SORT_KEYS = {"c": SortKey.CPU, "g": SortKey.GPU, "i": SortKey.IDLE, "n": SortKey.NAME}
QUIT_KEYS = ("q", "Q")
VIEW_KEY = "v"


class Feed(Protocol):
    label: str  # what is shown: "this node" or the URL
    interval_s: float
    starting: str  # what the screen says before the first scrape
    waiting: str  # and after it, until the first frame
    expected_s: float | None  # how long the first frame takes, when known

    def start(self, emit: Emit) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Key:
    key: str


@dataclass(frozen=True)
class Signalled:
    signum: int


Event = FeedEvent | Key | Signalled


class TopState:
    """What the screen shows, updated event by event (one thread: the main loop)."""

    def __init__(self, screen: Screen, feed: Feed, clock: Callable[[], float]) -> None:
        self.screen = screen
        self.frame: Frame | None = None
        self.last: Scrape | None = None
        self.sources: tuple[SourceState, ...] = ()
        self._feed = feed
        self._clock = clock
        self._started = clock()

    def waiting(self) -> str:
        what = self._feed.waiting if self.last else self._feed.starting
        elapsed = self._clock() - self._started
        expected = self._feed.expected_s
        return f"{what} ({elapsed:.1f}s" + (f" of ~{expected:g}s)" if expected else ")")

    def feed(self, event: FeedEvent) -> bool:
        """Take in a feed event; True when there is a new frame."""
        if isinstance(event, Problem):
            retry = "; retrying" if event.retrying else ""
            self.screen = replace(self.screen, problem=event.message + retry)
            return False
        scrape = event.scrape
        self.screen = replace(self.screen, problem="")
        self.sources = scrape.sources
        if self.last is None or scrape.intervals < self.last.intervals:
            self.last = scrape  # the first scrape, or the exporter restarted: a new baseline
            return False
        frame = frame_between(self.last, scrape)
        if frame is None:
            return False
        self.frame, self.last = frame, scrape
        return True

    def key(self, key: str) -> bool:
        """Take in a key press; False for quit."""
        if key in QUIT_KEYS:
            return False
        if key in SORT_KEYS:
            self.screen = replace(self.screen, sort=SORT_KEYS[key])
        elif key == VIEW_KEY:
            view = View.CONTAINERS if self.screen.view is View.PODS else View.PODS
            self.screen = replace(self.screen, view=view)
        return True

    def render(self, width: int, height: int | None) -> RenderableType:
        screen = self.screen if self.frame else replace(self.screen, waiting=self.waiting())
        return render(self.frame, screen, self.sources, width, height)


class _QueueLogs(logging.Handler):
    """While the screen is up, warnings become its problem line instead of text over it."""

    def __init__(self, emit: Callable[[Event], None]) -> None:
        super().__init__(logging.WARNING)
        self._emit = emit

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().splitlines()[0] if record.getMessage() else record.levelname
        self._emit(Problem(f"{record.levelname.lower()}: {message}"))


@contextmanager
def _logs_to(handler: logging.Handler) -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved


@contextmanager
def _signals(handlers: dict[int, Callable[[int, FrameType | None], None]]) -> Iterator[None]:
    saved = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


class Interactive:
    """The screen on a terminal: rich Live on the alternate screen, keys from a KeyReader."""

    def __init__(self, feed: Feed, console: Console, stdin_fd: int, screen: Screen) -> None:
        self._feed = feed
        self._console = console
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()  # put() is signal-safe
        self._state = TopState(screen, feed, time.monotonic)
        self._keys = KeyReader(stdin_fd, lambda k: self._events.put(Key(k)))
        self._live = Live(
            console=console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP, signal.SIGWINCH)
        with (
            _signals(dict.fromkeys(handled, self._on_signal)),
            _logs_to(_QueueLogs(self._events.put)),
        ):
            self._keys.start()
            try:
                self._live.start()
                self._feed.start(self._events.put)
                self._loop()
            except KeyboardInterrupt:
                pass
            finally:
                self._live.stop()
                self._keys.close()
                self._feed.stop()
        return 0

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._events.put(Signalled(signum))

    def _loop(self) -> None:
        size = None
        while True:
            try:
                event: Event | None = self._events.get(timeout=TICK_S)
            except queue.Empty:
                event = None
            if isinstance(event, Key) and not self._state.key(event.key):
                return
            if isinstance(event, Signalled):
                if event.signum in (signal.SIGTERM, signal.SIGHUP):
                    return
                if event.signum == signal.SIGTSTP:
                    self._suspend()
                    size = None
            elif isinstance(event, Scraped | Problem):
                self._state.feed(event)
            now = self._terminal_size()
            if event is not None or self._state.frame is None or now != size:
                size = now
                self._console.size = now
                self._live.update(self._state.render(*now), refresh=True)

    def _terminal_size(self) -> tuple[int, int]:
        """The terminal's size now. Asked of the terminal itself: COLUMNS and LINES in the
        environment (which rich would prefer) are often stale after a resize."""
        try:
            columns, lines = os.get_terminal_size(self._console.file.fileno())
        except (OSError, ValueError, AttributeError):
            return self._console.size.width, self._console.size.height
        return columns, lines

    def _suspend(self) -> None:
        """Ctrl-Z: give the terminal back, stop, and take it again when continued."""
        self._live.stop()
        self._keys.suspend()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(0, signal.SIGTSTP)  # the whole job stops here, as the shell expects
        signal.signal(signal.SIGTSTP, self._on_signal)
        self._keys.resume()
        self._live.start()


def run_batch(feed: Feed, console: Console, screen: Screen, *, once: bool) -> int:
    """Print frames as they come (all rows, no screen size); --once: the first frame only."""
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    state = TopState(screen, feed, time.monotonic)
    wait = max(ONCE_TIMEOUT_S, 10 * feed.interval_s)
    deadline = time.monotonic() + wait
    feed.start(events.put)
    try:
        while True:
            try:
                event = events.get(timeout=TICK_S)
            except queue.Empty:
                if once and time.monotonic() > deadline:
                    print(f"wattprobe top: no complete interval within {wait:g}s", file=sys.stderr)
                    return 1
                continue
            if isinstance(event, Problem) and once and feed.label != "this node":
                print(f"wattprobe top: {event.message}", file=sys.stderr)
                return 1
            if isinstance(event, Scraped | Problem) and state.feed(event):
                console.print(state.render(console.width, None))
                if once:
                    return 0
                console.print()
    except KeyboardInterrupt:
        return 0
    finally:
        feed.stop()
