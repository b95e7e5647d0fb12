"""Debian's prometheus and prometheus-alertmanager as test subprocesses, plus a webhook receiver.

Everything listens on 127.0.0.1 on free ports, keeps its data in the given temp directory and
is stopped by its own PID. Every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.running import free_port, stop_process

JSONValue = Any


class PromQLError(Exception):
    """Prometheus answered status=error (a parse error, an execution error)."""


@dataclass
class Daemon:
    """A prometheus or alertmanager subprocess listening on 127.0.0.1:port."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        stop_process(self.proc)


def _start(name: str, argv: list[str], port: int, log_dir: Path) -> Daemon:
    return spawn_daemon(name, argv, port, log_dir / f"{name}-{port}.log")


def spawn_daemon(name: str, argv: list[str], port: int, log_path: Path) -> Daemon:
    """Start argv with its output in log_path, and wait until it answers on port."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    daemon = Daemon(name, proc, port, log_path)
    try:
        daemon.wait_ready()
    except BaseException:
        daemon.stop()
        raise
    return daemon


def start_prometheus(binary: str, config: Path, workdir: Path) -> Daemon:
    port = free_port()
    data = workdir / "prometheus-data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    return _start("prometheus", argv, port, workdir)


def start_alertmanager(binary: str, config: Path, workdir: Path) -> Daemon:
    port = free_port()
    data = workdir / "alertmanager-data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip port: a single local instance
        "--log.level=info",
    ]
    return _start("alertmanager", argv, port, workdir)


@dataclass
class PrometheusAPI:
    url: str
    timeout: float = 30.0

    def call(self, path: str, params: dict[str, str] | list[tuple[str, str]]) -> JSONValue:
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(self.url + path, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            answer = json.loads(err.read() or b"{}")
        if answer.get("status") != "success":
            raise PromQLError(f"{answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[JSONValue]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.call("/api/v1/query", params)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        assert isinstance(result, list)
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[JSONValue]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        result = self.call("/api/v1/query_range", params)["result"]
        assert isinstance(result, list)
        return result

    def series(self, match: str) -> list[dict[str, str]]:
        result = self.call("/api/v1/series", [("match[]", match)])
        assert isinstance(result, list)
        return result

    def metric_names(self) -> set[str]:
        with urllib.request.urlopen(self.url + "/api/v1/label/__name__/values", timeout=10) as r:
            return set(json.loads(r.read())["data"])

    def alerts(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/api/v1/alerts", timeout=10) as resp:
            alerts: list[dict[str, Any]] = json.loads(resp.read())["data"]["alerts"]
            return alerts


@dataclass
class WebhookReceiver:
    """An HTTP server on loopback collecting what Alertmanager's webhook_config posts."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    posts: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls) -> WebhookReceiver:
        posts: list[dict[str, Any]] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length))
                with lock:
                    posts.append(payload)
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
        thread.start()
        return cls(server, thread, posts, lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def alerts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a for post in self.posts for a in post.get("alerts", [])]

    def wait_for(
        self, found: Callable[[list[dict[str, Any]]], bool], timeout: float
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alerts = self.alerts()
            if found(alerts):
                return alerts
            time.sleep(0.2)
        return self.alerts()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
