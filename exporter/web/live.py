"""The web config as it is now: re-read when the file, or a certificate it names, changes.

exporter-toolkit re-reads its file on every request and its certificates on every TLS
handshake. wattprobe does the same work only when something changed: each new connection and
each request stat()s the config file and the files it names (microseconds), and rebuilds the
TLS context and the user table when any of them differs. So a rotated certificate (a Secret
volume swapping its ..data link, cert-manager rewriting a file) or an edited user list applies
to the next connection, with no restart and no scrape paying for a parse.

A file that turns bad while running is refused as Prometheus refuses a bad reload: the last good
config keeps serving (/healthz and scrapes included) and one error per change says why, until
the file is fixed. The cost: an edit that removes a user or a CA takes effect only once the file
is valid again, so such edits must be checked (`wattprobe serve --web.config.file` at start, or
the error line) rather than assumed. wattprobe_web_config_last_reload_successful (0 after a
refused read) and its success timestamp say the same to Prometheus, as Prometheus's own
prometheus_config_last_reload_successful does (exporter/web/telemetry.py). Switching TLS on or
off needs a restart (the listening socket is plain or TLS for its life): such an edit is refused
the same way.

The event loop never reads, parses or hashes (issue 41: a 10,000-user file rewritten every 10 ms
held the loop ~0.7 s per reload, and 1 of 20 scrapes was answered within 1 s). It asks
current_nowait(), which stat()s and, on a change, hands the reload to a worker thread and
returns the state in force: the old config serves until the new one is whole, then one
reference is swapped. Reloads never overlap; a change made during one is seen at the next ask.
The file is read through the bounded reader (host/hostfile.py), so a FIFO or a device as the
config file is refused with a reason and the last good config kept, never a read that waits.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.host.files import file_stamp
from exporter.web.auth import BasicAuth
from exporter.web.config import WebConfig, WebConfigError, read_web_config
from exporter.web.tls import build_context

log = logging.getLogger(__name__)

Stamp = tuple[tuple[object, ...], ...]


@dataclass(frozen=True)
class WebState:
    config: WebConfig
    context: ssl.SSLContext | None  # None: plain HTTP
    auth: BasicAuth


@dataclass(frozen=True)
class ReloadStatus:
    successful: bool
    success_timestamp: float  # Unix time of the last successful read


def load_web_state(path: Path) -> WebState:
    """Read, validate and build everything the file asks for; WebConfigError if unusable."""
    config = read_web_config(path)
    context = build_context(config.tls) if config.tls is not None else None
    return WebState(config, context, BasicAuth(config.users))


class LiveWebConfig:
    def __init__(self, path: Path, initial: WebState) -> None:
        self.path = path
        self.tls = initial.context is not None
        self._state = initial
        self._files = initial.config.files()
        self._stamp = self._fingerprint()
        self._lock = threading.Lock()
        # a worker is reloading; its own lock, never held across a reload, so the loop never
        # waits for one (a reload holds _lock)
        self._reloading = False
        self._flag_lock = threading.Lock()
        self.last_reload = ReloadStatus(True, time.time())

    @classmethod
    def load(cls, path: Path) -> LiveWebConfig:
        return cls(path, load_web_state(path))

    def _fingerprint(self) -> Stamp:
        return tuple(file_stamp(p) for p in (self.path, *self._files))

    def current(self) -> WebState:
        """The state to serve this connection or request with: the last good one."""
        if self._fingerprint() == self._stamp:
            return self._state
        with self._lock:
            stamp = self._fingerprint()
            if stamp != self._stamp:
                self._reload(stamp)
            return self._state

    def current_nowait(self) -> WebState:
        """current() for the event loop: the state in force at once; a changed file is reloaded
        on a worker thread (at most one at a time) and applies to later connections."""
        if self._fingerprint() == self._stamp:
            return self._state
        with self._flag_lock:
            if not self._reloading:
                self._reloading = True
                threading.Thread(
                    target=self._reload_in_background, name="web-config-reload", daemon=True
                ).start()
        return self._state

    def _reload_in_background(self) -> None:
        try:
            with self._lock:
                stamp = self._fingerprint()
                if stamp != self._stamp:
                    self._reload(stamp)
        finally:
            with self._flag_lock:
                self._reloading = False

    def _reload(self, stamp: Stamp) -> None:
        # The stamp is taken before reading, so a change made during the read is seen next time.
        # If the new file names other certificates, the stamp is retaken over the new names, so
        # the outcome is logged once per change, never per connection.
        files = self._files
        try:
            config = read_web_config(self.path)
            self._files = config.files()
            context = build_context(config.tls) if config.tls is not None else None
            if (context is not None) != self.tls:
                raise WebConfigError("TLS cannot be switched on or off while running; restart")
            self._state = WebState(config, context, BasicAuth(config.users))
            self.last_reload = ReloadStatus(True, time.time())
            log.info("web config %s reloaded", self.path)
        except WebConfigError as exc:
            self.last_reload = ReloadStatus(False, self.last_reload.success_timestamp)
            log.error("web config %s unusable, still serving the previous one: %s", self.path, exc)
        except Exception as exc:  # a bug in parsing must not drop every connection
            self.last_reload = ReloadStatus(False, self.last_reload.success_timestamp)
            log.error(
                "web config %s unusable, still serving the previous one: %s: %s",
                self.path,
                type(exc).__name__,
                " ".join(str(exc).split())[:200],
            )
        self._stamp = stamp if self._files == files else self._fingerprint()

    def reload(self) -> None:
        """Re-read the file now (SIGHUP), whether or not it looks changed; logs the outcome."""
        with self._lock:
            self._reload(self._fingerprint())
