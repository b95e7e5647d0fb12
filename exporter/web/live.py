"""The web config as it is now: re-read when the file, or a certificate it names, changes.

exporter-toolkit re-reads its file on every request and its certificates on every TLS
handshake. wattprobe does the same work only when something changed: each new connection and
each request stat()s the config file and the files it names (microseconds), and rebuilds the
TLS context and the user table when any of them differs. So a rotated certificate (a Secret
volume swapping its ..data link, cert-manager rewriting a file) or an edited user list applies
to the next connection, with no restart and no scrape paying for a parse.

A file that turns bad while running fails closed, as in exporter-toolkit: new TLS handshakes
are refused and requests answer 500 until the file is fixed, with one error logged per change.
Serving on with the last good file would keep a removed user or a revoked CA working.
Switching TLS on or off needs a restart (the listening socket is plain or TLS for its life).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

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


def load_web_state(path: Path) -> WebState:
    """Read, validate and build everything the file asks for; WebConfigError if unusable."""
    config = read_web_config(path)
    context = build_context(config.tls) if config.tls is not None else None
    return WebState(config, context, BasicAuth(config.users))


def _stat(path: Path) -> tuple[object, ...]:
    try:
        st = os.stat(path)
    except OSError as exc:
        return (exc.errno,)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class LiveWebConfig:
    def __init__(self, path: Path, initial: WebState) -> None:
        self.path = path
        self.tls = initial.context is not None
        self._state: WebState | WebConfigError = initial
        self._files = initial.config.files()
        self._stamp = self._fingerprint()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> LiveWebConfig:
        return cls(path, load_web_state(path))

    def _fingerprint(self) -> Stamp:
        return tuple(_stat(p) for p in (self.path, *self._files))

    def current(self) -> WebState | WebConfigError:
        """The state to serve this connection or request with, or why none can be served."""
        if self._fingerprint() == self._stamp:
            return self._state
        with self._lock:
            stamp = self._fingerprint()
            if stamp != self._stamp:
                self._reload(stamp)
            return self._state

    def _reload(self, stamp: Stamp) -> None:
        # The stamp is taken before reading, so a change made during the read is seen next time.
        # If the new file names other certificates, the stamp (over the old names) differs from
        # the next fingerprint, which costs one more reload and is then stable.
        try:
            config = read_web_config(self.path)
            self._files = config.files()
            context = build_context(config.tls) if config.tls is not None else None
            if (context is not None) != self.tls:
                raise WebConfigError("TLS cannot be switched on or off while running; restart")
            state: WebState | WebConfigError = WebState(config, context, BasicAuth(config.users))
            log.info("web config %s reloaded", self.path)
        except WebConfigError as exc:
            log.error("web config %s unusable, refusing requests until fixed: %s", self.path, exc)
            state = exc
        self._state = state
        self._stamp = stamp
