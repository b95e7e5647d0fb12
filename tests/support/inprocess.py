"""An exporter in this process: a Monitor stepping on its own thread (Monitor.run) and the real
HTTP server on a loopback port, for tests that must inject what a subprocess cannot (a fake
clock, a source's retry interval) and still scrape /metrics over HTTP."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from exporter.accounting.monitor import Monitor
from exporter.web.server import Health, make_server
from tests.support.running import Samples, parse_samples


class InProcessExporter:
    def __init__(self, monitor: Monitor, interval_s: float) -> None:
        self.monitor = monitor
        self._stop = threading.Event()
        self._last_step = [time.monotonic()]
        self._loop = threading.Thread(
            target=monitor.run,
            args=(interval_s, self._stop, lambda: self._last_step.__setitem__(0, time.monotonic())),
            name="monitor",
            daemon=True,
        )
        health = Health(alive=self._loop.is_alive, ready=lambda: monitor.snapshot.ready)
        self._server = make_server("127.0.0.1", 0, lambda: monitor.snapshot, health, "/metrics")
        self.port = self._server.server_address[1]
        self._http = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._loop.start()
        self._http.start()

    def get(self, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def samples(self) -> Samples:
        status, body = self.get()
        assert status == 200, body
        return parse_samples(body)

    def wait_next_interval(self, timeout: float = 30.0) -> str:
        before = self.monitor.snapshot.sequence
        deadline = time.monotonic() + timeout
        while self.monitor.snapshot.sequence == before:
            assert time.monotonic() < deadline, f"no new interval within {timeout}s"
            time.sleep(0.01)
        status, body = self.get()
        assert status == 200, body
        return body

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._loop.join(10)
        self.monitor.close()
