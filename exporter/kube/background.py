"""Pieces shared by the sources that run on their own threads: status, backoff, the thread."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from exporter.model.readings import SourceError, SourceStatus

log = logging.getLogger(__name__)


class StatusBox:
    """The latest status of a background source. One writer, any reader: a reference swap.
    Changes (up to down, a new reason, back up) are logged once, not on every attempt."""

    def __init__(self) -> None:
        self._status: SourceStatus | None = None  # None until the first attempt ends

    def set(self, status: SourceStatus) -> None:
        old = self._status
        self._status = status
        if old is not None and (old.up, old.reason) == (status.up, status.reason):
            return
        if status.up:
            log.info("%s: up (%s)", status.source, status.detail)
        else:
            log.warning("%s: down, %s: %s", status.source, status.reason, status.detail)

    def get(self) -> SourceStatus | None:
        return self._status


class Backoff:
    """Exponential backoff with jitter (half fixed, half random), so agents on many nodes that
    lost the same server do not come back to it in lockstep."""

    def __init__(
        self, initial_s: float = 1.0, max_s: float = 60.0, rng: random.Random | None = None
    ) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not secrets)
        self._failures = 0

    def next_delay(self) -> float:
        ceiling = min(self._max_s, self._initial_s * 2.0**self._failures)
        self._failures = min(self._failures + 1, 32)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


def failure_status(source: str, exc: BaseException, duration_s: float) -> SourceStatus:
    if isinstance(exc, SourceError):
        return SourceStatus(source, False, exc.reason, exc.detail, duration_s)
    return SourceStatus(source, False, "internal error", repr(exc), duration_s)


class Worker:
    """A daemon thread running one function until stopped; an escaped exception is logged and
    the function restarted after a pause, so the source recovers by itself."""

    def __init__(self, name: str, body: Callable[[threading.Event], None]) -> None:
        self._name = name
        self._body = body
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._body(self.stop_event)
            except Exception:
                log.exception("%s failed; restarting it", self._name)
                self.stop_event.wait(5.0)
            else:
                return
