"""The metrics server: one asyncio event loop on the caller's thread serves every connection.

Hardened for a port that every pod on the node can reach (see docs/security.md). A connection
(exporter/web/connection.py) that is idle, trickles its head, or does not read its response
costs a socket, a small object and at most one 64 KiB chunk of buffered response, never a thread
or a slot that a scraper needs. The exposition is rendered off the loop by one render thread
(exporter/exposition/cache.py), so a scrape never waits for a render or for the monitor's step.
Only GET and HEAD on the four defined paths (exporter/web/routes.py); TLS, basic auth and
response headers from --web.config.file (exporter/web/live.py), re-read when the file changes.

What the server bounds, beyond each connection's deadlines:
- connections: --web.max-connections; at the limit a new one replaces the oldest connection that
  is silent (no request being answered, none answered with less than 400), else the one answered
  connection that has waited longest for its next request (idle keep-alive), else gets 503;
- TLS handshakes holding TLS state: MAX_HANDSHAKES; a new one gives up the oldest;
- bcrypt checks waiting: exporter/web/authgate.py, per peer and in all; more get 429 at once;
- memory given back: after a flood has closed many connections, malloc_trim returns the freed
  heap to the system (exporter/web/trim.py), so RSS comes back down instead of staying at the
  flood's peak.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import resource
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client.registry import Collector

from exporter.exposition.cache import ExpositionCache, Renderer
from exporter.model.config import HttpLimits
from exporter.model.snapshot import Snapshot
from exporter.web.auth import BasicAuth
from exporter.web.authgate import AuthGate
from exporter.web.connection import Connection
from exporter.web.episodes import ShedEpisodes
from exporter.web.live import LiveWebConfig, WebState
from exporter.web.routes import Health, Routes
from exporter.web.telemetry import WebCounters, WebTelemetry
from exporter.web.trim import TRIM_AFTER_CLOSED, Trimmer

log = logging.getLogger(__name__)

BACKLOG = 1024  # a flood waits in the kernel's queue, not in ours
ACCEPT_BATCH = 64  # connections accepted per wake-up: a flood cannot hold the loop for long
FD_RESERVE = 256  # descriptors kept for everything but connections (sources, eBPF, kube)
JOIN_TIMEOUT_S = 10.0
# TLS handshakes holding TLS state at once (each ~45 KiB of OpenSSL state once the client's
# hello is in, measured). At the bound a new handshake gives up the oldest one if that one has
# had HANDSHAKE_GRACE_S to finish (a real client answers within one round trip), else the new
# one is refused before any cryptography is done for it: a burst of hellos then costs the CPU
# of MAX_HANDSHAKES handshakes per HANDSHAKE_GRACE_S at most, and a stalled one is given up.
MAX_HANDSHAKES = 128
EVICT_SCAN = 8  # silent connections looked at, oldest first, for one without a request arriving
HANDSHAKE_GRACE_S = 0.1
TRIM_EVERY_S = 5.0


def _connection_budget(wanted: int) -> int:
    """max_connections, within the descriptors this process may open.

    Go raises its soft RLIMIT_NOFILE to the hard limit at start; Python does not, and containers
    often start with a soft limit of 1024. An accept() that fails with EMFILE makes asyncio stop
    accepting for a second, scrapers included, so the limit is raised here, and if the hard
    limit is too low the connection limit is lowered below it instead.
    """
    need = wanted + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(hard, need)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError) as exc:
                log.debug("cannot raise RLIMIT_NOFILE to %d: %s", target, exc)
    if soft != resource.RLIM_INFINITY and soft < need:
        budget = max(1, soft - FD_RESERVE)
        log.warning(
            "--web.max-connections %d lowered to %d: the open-files limit is %d",
            wanted,
            budget,
            soft,
        )
        return budget
    return wanted


class MetricsServer:
    """Serves from an asyncio loop run by serve_forever() on the caller's thread.

    The socketserver-like surface (server_address, serve_forever, shutdown, server_close) is
    what the agent and the tests drive.
    """

    def __init__(
        self,
        address: tuple[str, int],
        routes: Routes,
        limits: HttpLimits,
        web: LiveWebConfig | None,
        family: socket.AddressFamily = socket.AF_INET,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.web = web
        self.max_connections = _connection_budget(limits.max_connections)
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(BACKLOG)
            self.socket.setblocking(False)
        except BaseException:
            self.socket.close()
            raise
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.renderer = Renderer(routes.cache)
        self.counters = WebCounters()
        self.shed_log = ShedEpisodes()
        routes.cache.register(WebTelemetry(self.counters, web))
        # every open connection; apart, those that are silent (no request being answered and
        # none answered below 400; oldest first: dicts keep insertion order), the ones given up
        # at the limit; and the TLS handshakes holding TLS state, oldest first
        self.connections: set[Connection] = set()
        self.unproven: dict[Connection, float] = {}
        # answered connections waiting for their next request, longest waiting first: at the
        # limit they give way after the silent ones, so held connections cannot lock out a new
        # scraper (issue 41: 4,096 connections that each got a 200 kept every newcomer at 503)
        self.idle: dict[Connection, float] = {}
        self.handshaking: dict[Connection, float] = {}
        self.auth_gate = AuthGate()
        self.trimmer = Trimmer()
        self.scrapes = 0  # scrapes waiting for a render (touched on the loop only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._shutdown_asked = False
        self._serving = threading.Event()
        self._done = threading.Event()

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def tls(self) -> bool:
        return self.web is not None and self.web.tls

    def snapshot_published(self) -> None:
        """The owner's monitor published a snapshot: render it off the request path now."""
        self.renderer.changed()

    # -- running ------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        del poll_interval  # socketserver's signature; the loop needs no polling
        if self._shutdown_asked:
            self._done.set()
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        self.renderer.start()
        self._serving.set()
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                self._close_connections(loop)
            finally:
                loop.close()
                self.renderer.stop()
                self.auth_gate.close()
                self._done.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # asyncio accepts `backlog` connections per wake-up and listens with the same number:
        # a small batch keeps the loop turning under a flood, then the queue is deepened again
        server = await loop.create_server(
            lambda: Connection(self), sock=self.socket, backlog=ACCEPT_BATCH
        )
        self.socket.listen(BACKLOG)
        trim = loop.call_later(TRIM_EVERY_S, self._trim, loop)
        try:
            if not self._shutdown_asked:
                await self._stop.wait()
        finally:
            server.close()
            trim.cancel()

    def _trim(self, loop: asyncio.AbstractEventLoop) -> None:
        self.shed_log.tick()
        if self.trimmer.tick():
            log.debug("freed heap returned to the system after %d connections", TRIM_AFTER_CLOSED)
        if self._stop is not None and not self._stop.is_set():
            loop.call_later(TRIM_EVERY_S, self._trim, loop)

    def _close_connections(self, loop: asyncio.AbstractEventLoop) -> None:
        for conn in list(self.connections):
            conn.abort()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(asyncio.sleep(0))  # connection_lost callbacks

    def shutdown(self) -> None:
        """Stop serve_forever and wait until it has returned (callable from another thread)."""
        self._shutdown_asked = True
        if not self._serving.is_set():
            return
        loop = self._loop
        if loop is not None and not self._done.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._stop_on_loop)
        self._done.wait(JOIN_TIMEOUT_S)

    def _stop_on_loop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def server_close(self) -> None:
        self.socket.close()

    # -- what connections share ---------------------------------------------------------

    def evict_one(self) -> bool:
        """Close the oldest silent connection, whatever its age; False when there is none.

        Before issue 28 only a silent connection at least a second old was given up, so a
        reconnect flood faster than --web.max-connections per second kept every connection
        younger than that and new scrapers got 503 (18 of 20 at 300 connections/s with a limit
        of 100). A scraper sends its request as soon as it is connected, and a connection with
        a request being answered is not silent, so giving up the oldest silent one at once
        costs a scraper nothing unless --web.max-connections newer connections arrive before
        its request does.
        """
        if self.unproven:
            pool, reason = self.unproven, "silent"
        elif self.idle:
            # then the answered connection idle longest: a scraper that held it reconnects
            # (Prometheus retries a GET on a closed keep-alive connection); a newcomer never
            # waits for the idle timeout
            pool, reason = self.idle, "idle"
        else:
            return False
        # a connection whose request has arrived but not yet been read is not silent: under a
        # burst the loop accepts a batch of connections before it reads the ones before them
        candidates = list(itertools.islice(pool, EVICT_SCAN))
        conn = next(
            (
                c
                for c in candidates
                # an idle one whose next request has begun to arrive is not idle any more
                if not c.has_unread_bytes() and (pool is self.unproven or not c.reader.pending)
            ),
            candidates[0],
        )
        del pool[conn]
        self.connections.discard(conn)
        self.counters.shed(reason)
        self.shed_log.event(reason)
        log.debug("connection from %r given up for a new one at the limit", conn.peer)
        conn.abort()
        return True

    def handshake_may_start(self, conn: Connection, now: float) -> bool:
        """Whether conn may start its handshake; at the bound, the oldest handshake is given up
        (its TLS state freed now, not when its connection is) if it had its grace, else False.
        """
        while len(self.handshaking) >= MAX_HANDSHAKES:
            oldest, started = next(iter(self.handshaking.items()))
            self.counters.shed("tls_handshake")
            self.shed_log.event("tls_handshake")
            if now - started < HANDSHAKE_GRACE_S:
                return False
            del self.handshaking[oldest]
            oldest.give_up_tls()
        self.handshaking[conn] = now
        return True

    def handshake_done(self, conn: Connection) -> None:
        self.handshaking.pop(conn, None)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.unproven.pop(conn, None)
        self.idle.pop(conn, None)
        self.handshaking.pop(conn, None)
        self.trimmer.closed_one()

    async def exposition(self, want_gzip: bool) -> bytes | None:
        """The bytes for a scrape; None when every scrape slot is taken (503)."""
        body = self.renderer.ready(want_gzip)
        if body is not None:
            return body
        if self.limits.max_requests > 0 and self.scrapes >= self.limits.max_requests:
            return None
        self.scrapes += 1  # held while this scrape waits for a render (a slow reader holds none)
        try:
            return await asyncio.wrap_future(self.renderer.request(want_gzip))
        finally:
            self.scrapes -= 1

    async def authorize(self, auth: BasicAuth, header: str | None, peer: Any) -> bool | None:
        """Whether the credentials are good; None when the bcrypt queue refuses (429)."""
        verdict = await self.auth_gate.check(auth, header, peer)
        if verdict is None:
            self.counters.auth_refused += 1
        return verdict

    def extra_headers(self, state: WebState | None = None) -> tuple[tuple[str, str], ...]:
        if self.web is None:
            return ()
        return (state or self.web.current_nowait()).config.headers


def make_server(
    host: str,
    port: int,
    snapshot: Callable[[], Snapshot],
    health: Health,
    telemetry_path: str,
    *,
    limits: HttpLimits | None = None,
    web: LiveWebConfig | None = None,
    containers: bool = True,
    collectors: Sequence[Collector] = (),
) -> MetricsServer:
    """containers: serve per-container series of pods' containers (--collector.container);
    collectors: more series rendered with every snapshot (the showback settings)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    cache = ExpositionCache(snapshot, containers=containers)
    for collector in collectors:
        cache.register(collector)
    routes = Routes(cache, health, telemetry_path)
    return MetricsServer((host, port), routes, limits or HttpLimits(), web, family)


__all__ = [
    "ExpositionCache",
    "Health",
    "HttpLimits",
    "LiveWebConfig",
    "MetricsServer",
    "Renderer",
    "WebState",
    "make_server",
]


__all__ = ["Health", "HttpLimits", "LiveWebConfig", "MetricsServer", "WebState", "make_server"]
