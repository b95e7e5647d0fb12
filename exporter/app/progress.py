"""Start-up progress: what wattprobe is waiting for, so nobody wonders whether it hung.

On a terminal (stderr is a tty) a step is one line that rewrites itself with a spinner and the
seconds spent; log records printed meanwhile clear it first. Anywhere else (a pod's log, a pipe)
a step is plain log lines: "what..." once it has taken a second (quick steps stay quiet) and
"what: done (2.3s)" when it ends. A failed step logs nothing of its own: whoever called it
reports the failure, in one line.

Slow start-up work takes a Progress and wraps itself in a step:

    with progress.step("compiling eBPF programs"):
        ...
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

log = logging.getLogger("wattprobe")

SPINNER = "|/-\\"
REDRAW_S = 0.1
# After a log record cleared the line, wait this long before drawing it again, so a record is
# never written behind a half-drawn progress line.
QUIET_AFTER_LOG_S = 0.3


FAILED = "failed"
SLOW_S = 1.0  # off a terminal, a step that takes longer than this says so when it passes it


class Progress:
    """Plain log lines: the behaviour off a terminal, and the base of TerminalProgress."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._what = ""
        self._started = 0.0
        self._timer: threading.Timer | None = None

    @property
    def active(self) -> str:
        """What is being waited for now, or "" when nothing is."""
        return self._what

    def begin(self, what: str, expected_s: float | None = None) -> None:
        """A step starts. expected_s, when known, is shown as the step's expected length."""
        self._cancel()
        self._what = what
        self._started = self._clock()
        about = f" (about {expected_s:g}s)" if expected_s else ""
        self._timer = threading.Timer(SLOW_S, self._still, args=(what, about))
        self._timer.daemon = True
        self._timer.start()

    def _still(self, what: str, about: str) -> None:
        if self._what == what:
            log.info("%s...%s", what, about)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def end(self, result: str = "done") -> None:
        """The step begun last has ended with this result."""
        self._cancel()
        if not self._what:
            return
        what, self._what = self._what, ""
        if result != FAILED:
            log.info("%s: %s (%.1fs)", what, result, self._clock() - self._started)

    @contextmanager
    def step(self, what: str, expected_s: float | None = None) -> Iterator[None]:
        self.begin(what, expected_s)
        try:
            yield
        except BaseException:
            self.end(FAILED)
            raise
        self.end()

    def close(self) -> None:
        """Stop reporting (a step still open stays unfinished)."""
        self._cancel()


class TerminalProgress(Progress):
    """One self-rewriting line on a terminal: "| measuring the first interval... 2.1s of ~5s"."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._stream = stream
        self._expected: float | None = None
        self._lock = threading.Lock()
        self._drawn = False
        self._quiet_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, what: str, expected_s: float | None = None) -> None:
        with self._lock:
            self._what = what
            self._expected = expected_s
            self._started = self._clock()
        if self._thread is None:
            self._thread = threading.Thread(target=self._spin, name="progress", daemon=True)
            self._thread.start()
        self._draw()

    def end(self, result: str = "done") -> None:
        with self._lock:
            if not self._what:
                return
            what, self._what = self._what, ""
            self._clear_locked()
        # the outcome stays as an ordinary log line (a failure is reported by the caller)
        if result != FAILED:
            log.info("%s: %s (%.1fs)", what, result, self._clock() - self._started)

    def close(self) -> None:
        super().close()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
        with self._lock:
            self._clear_locked()

    def clear_for_log(self) -> None:
        """Called before a log record is written to the same terminal."""
        with self._lock:
            self._clear_locked()
            self._quiet_until = self._clock() + QUIET_AFTER_LOG_S

    def _spin(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            if not self._what or self._clock() < self._quiet_until:
                return
            elapsed = self._clock() - self._started
            frame = SPINNER[int(elapsed / REDRAW_S) % len(SPINNER)]
            of = f" of ~{self._expected:g}s" if self._expected else ""
            self._write(f"\r\x1b[K{frame} {self._what}... {elapsed:.1f}s{of}")
            self._drawn = True

    def _clear_locked(self) -> None:
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: nothing to show it on
            self._what = ""


class _ClearProgressLine(logging.Filter):
    """Clears the progress line before a handler writes a record to the same terminal."""

    def __init__(self, progress: TerminalProgress) -> None:
        super().__init__()
        self._progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        self._progress.clear_for_log()
        return True


def progress_for(stream: TextIO | None = None) -> Progress:
    """A TerminalProgress when stream (stderr by default) is a terminal, else log lines.

    On a terminal, the root logger's handlers that write to that stream clear the line before
    each record.
    """
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return Progress()
    progress = TerminalProgress(stream)
    guard = _ClearProgressLine(progress)
    for handler in logging.getLogger().handlers:
        if getattr(handler, "stream", None) is stream:
            handler.addFilter(guard)
    return progress
