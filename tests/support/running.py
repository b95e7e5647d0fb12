"""Run `wattprobe serve` as a subprocess on a free loopback port, and read its /metrics."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

# (name, labels) -> value
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def parse_samples(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def select(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric whose labels include the given ones."""
    want = set(labels.items())
    return {lbl: v for (n, lbl), v in samples.items() if n == name and want <= lbl}


@dataclass
class ExporterProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    scheme: str = "http"
    ssl_context: ssl.SSLContext | None = None  # for https: how the client verifies the server
    auth: tuple[str, str] | None = None  # basic auth (user, password) sent with every get

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def get(self, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path)
        if self.auth is not None:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def metrics(self) -> str:
        status, body = self.get()
        assert status == 200, body
        return body

    def samples(self) -> Samples:
        return parse_samples(self.metrics())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, path: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.get(path, timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{path} not 200 after {timeout}s:\n{self.log()}")

    def wait_next_interval(self, timeout: float = 30.0) -> str:
        """Block until a new snapshot is served (its interval counter moved); return it."""
        before = _interval_count(self.metrics())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.metrics()
            if _interval_count(body) != before:
                return body
            time.sleep(0.02)
        raise AssertionError(f"no new interval within {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within the timeout."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _interval_count(body: str) -> float:
    for line in body.splitlines():
        if line.startswith("wattprobe_intervals_total "):
            return float(line.split()[1])
    return -1.0


# Most tests check per-container attribution, which serve keeps behind --collector.container
# since issue 22 (a pod's own series are the default); a test's args may still switch it off.
TEST_ARGS = ("--collector.container",)


def start_exporter(
    args: list[str],
    log_dir: Path,
    env: dict[str, str] | None = None,
    wait: str = "/healthz",
    *,
    scheme: str = "http",
    ssl_context: ssl.SSLContext | None = None,
    auth: tuple[str, str] | None = None,
    prefix: Sequence[str] = (),
    port: int | None = None,
    test_args: Sequence[str] = TEST_ARGS,
) -> ExporterProcess:
    """prefix: argv the exporter runs under (e.g. setpriv or capsh dropping privileges);
    port: where it listens (default: a free one), e.g. the port of an exporter it replaces;
    test_args: flags every test exporter gets before `args` (TEST_ARGS; () for serve's
    defaults, as the series-per-pod test and the benchmarks need)."""
    port = port or free_port()
    log_path = log_dir / f"exporter-{port}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "exporter",
                "serve",
                "--web.listen-address",
                f"127.0.0.1:{port}",
                *test_args,
                *args,
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
        )
    running = ExporterProcess(proc, port, log_path, scheme, ssl_context, auth)
    try:
        running.wait_for(wait)
    except BaseException:
        running.stop()
        raise
    return running
