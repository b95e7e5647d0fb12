"""The one owner of `wattprobe serve`'s threads and handles.

start() builds what the Config asks for (exporter/app/wiring.py) and starts it in order: the
Kubernetes threads (pod names, PodResources), the monitor's loop, the HTTP server. close()
stops them in reverse and releases what the sources hold (NVML and its event thread, the
source reader threads, the eBPF programs and maps), so nothing started here outlives it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from exporter import __version__
from exporter.app.progress import Progress
from exporter.app.registry import CONTAINER, REGISTRY
from exporter.app.wiring import Parts, build
from exporter.exposition.showback import ShowbackCollector
from exporter.exposition.showback_live import LiveShowback
from exporter.model.config import Config
from exporter.web.live import LiveWebConfig
from exporter.web.server import Health, MetricsServer, make_server

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0


class Agent:
    def __init__(
        self,
        config: Config,
        web: LiveWebConfig | None = None,
        progress: Progress | None = None,
        builder: Callable[[Config, Progress | None], Parts] = build,
        showback: LiveShowback | None = None,
    ) -> None:
        self.config = config
        self._web = web
        self._showback = showback
        self._progress = progress or Progress()
        self._build = builder
        self._stop = threading.Event()
        self._last_step = time.monotonic()
        self.parts: Parts | None = None
        self.server: MetricsServer | None = None
        self._loop: threading.Thread | None = None
        self._http: threading.Thread | None = None
        self._closed = False

    # -- starting ---------------------------------------------------------------------------

    def start(self) -> None:
        """Build and start everything; on a failure, what was started is closed again.
        Raises wiring.StartupError when a source the configuration insists on cannot start."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        config = self.config
        self.parts = parts = self._build(config, self._progress)
        parts.start()
        self._loop = threading.Thread(target=self._run_loop, name="monitor", daemon=True)
        stall_after = max(3 * config.interval_s, 30.0)
        loop = self._loop
        health = Health(
            alive=lambda: loop.is_alive() and time.monotonic() - self._last_step < stall_after,
            ready=lambda: parts.monitor.snapshot.ready,
        )
        self.server = make_server(
            config.listen_host,
            config.listen_port,
            lambda: parts.monitor.snapshot,
            health,
            config.telemetry_path,
            limits=config.http_limits,
            web=self._web,
            containers=REGISTRY.enabled(config, CONTAINER),
            collectors=[ShowbackCollector(self._showback.current)] if self._showback else [],
        )
        # the first interval only sets baselines: /metrics has energy after the second
        self._progress.begin("measuring the first interval", expected_s=config.interval_s)
        self._loop.start()
        self._http = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self._http.start()
        host, port = self.address
        log.info(
            "wattprobe %s serving %s://%s:%s%s every %gs",
            __version__,
            self.server.scheme,
            host or "0.0.0.0",  # noqa: S104 (only a log line)
            port,
            config.telemetry_path,
            config.interval_s,
        )

    def _run_loop(self) -> None:
        assert self.parts is not None
        monitor = self.parts.monitor

        server = self.server

        def stepped() -> None:
            self._last_step = time.monotonic()
            if server is not None:
                server.snapshot_published()  # rendered off the request path, now
            if self._progress.active and monitor.snapshot.ready:
                self._progress.end("ready")

        monitor.run(self.config.interval_s, self._stop, on_step=stepped)

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    # -- running and stopping ---------------------------------------------------------------

    def stop(self) -> None:
        """Ask wait() to return: safe from a signal handler."""
        self._stop.set()

    def wait(self, on_wake: Callable[[], None] | None = None) -> None:
        """Block until stop(); on_wake runs on this thread at every wake-up (once a second),
        for work a signal handler only flags (SIGHUP's reload)."""
        # Not a bare wait(): a signal that the kernel hands to another thread runs its Python
        # handler only once the main thread wakes up, and a bare wait may never wake
        while not self._stop.wait(1.0):
            if on_wake is not None:
                on_wake()

    def close(self) -> None:
        """Stop and release everything, in the reverse order of start(). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._progress.close()
        if self.server is not None:
            if self._http is not None:
                self.server.shutdown()  # returns once serve_forever has
                self._http.join(JOIN_TIMEOUT_S)
            self.server.server_close()
        if self._loop is not None and self._loop.ident is not None:
            self._loop.join(JOIN_TIMEOUT_S)
        if self.parts is not None:
            self.parts.close()  # NVML, source readers, eBPF, Kubernetes threads and sockets
