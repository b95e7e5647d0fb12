"""The showback settings as they are now: the flags, overlaid by --showback.config, reread when
the file changes.

current() stat()s the file (microseconds) and rereads it only when its identity, size or times
changed: a ConfigMap volume swapping its ..data link, or anyone rewriting the file. It is called
once per render (every interval), so an edit is served within one interval, with no restart.
A file that turns bad is refused as the web config is (exporter/web/live.py): the last good
settings keep being served, one log line per change says why, and
wattprobe_showback_config_last_reload_successful goes to 0 until the file is fixed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.exposition.showback_file import read_showback
from exporter.host.files import file_stamp
from exporter.model.showback import Showback, ShowbackError, validate

log = logging.getLogger(__name__)

Stamp = tuple[object, ...]


@dataclass(frozen=True)
class ReloadStatus:
    successful: bool
    success_timestamp: float  # Unix time of the last successful read


@dataclass(frozen=True)
class ShowbackView:
    """What one render serves: the settings, and the file's reload status (None: no file)."""

    settings: Showback
    reload: ReloadStatus | None


def load_showback(flags: Showback, path: Path | None) -> Showback:
    """The flags overlaid by the file, validated; ShowbackError when unusable."""
    validate(flags)  # a bad flag is named as such even where the file would replace it
    if path is None:
        return flags
    return validate(flags.overlay(read_showback(path)))


class LiveShowback:
    def __init__(self, flags: Showback, path: Path | None) -> None:
        """Reads the file once: ShowbackError when the flags or the file are unusable."""
        self.flags = flags
        self.path = path
        self._lock = threading.Lock()
        self._stamp = file_stamp(path) if path is not None else ()
        reload = ReloadStatus(True, time.time()) if path is not None else None
        # one attribute, replaced whole: a render never sees new settings with an old status
        self._view = ShowbackView(load_showback(flags, path), reload)

    def current(self) -> ShowbackView:
        """The last good settings, after rereading the file if it changed since the last read."""
        if self.path is not None and file_stamp(self.path) != self._stamp:
            with self._lock:
                stamp = file_stamp(self.path)
                if stamp != self._stamp:
                    self._reread(stamp)
        return self._view

    def reload(self) -> None:
        """Reread the file now (SIGHUP), changed or not; logs the outcome."""
        if self.path is None:
            return
        with self._lock:
            self._reread(file_stamp(self.path))

    def _reread(self, stamp: Stamp) -> None:
        # The stamp is taken before reading, so a change made during the read is seen next time;
        # a refused file is not reread (nor logged again) until it changes.
        assert self.path is not None
        self._stamp = stamp
        try:
            settings = load_showback(self.flags, self.path)
        except ShowbackError as exc:
            self._refused(str(exc))
            return
        except Exception as exc:  # a parser bug must not stop the exposition
            self._refused(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            return
        self._view = ShowbackView(settings, ReloadStatus(True, time.time()))
        log.info("showback config %s reloaded", self.path)

    def _refused(self, why: str) -> None:
        last = self._view.reload
        assert last is not None  # only a file is reread
        self._view = ShowbackView(self._view.settings, ReloadStatus(False, last.success_timestamp))
        log.error("showback config %s refused, still serving the previous one: %s", self.path, why)
