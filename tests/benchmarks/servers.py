"""Running exporters for the benchmarks: `wattprobe serve` and Debian's prometheus-node-exporter
as subprocesses on loopback, a thread that keeps a synthetic host moving, and the scrapers."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import REPO
from tests.benchmarks.scraper import Request
from tests.benchmarks.synthetic import SyntheticHost
from tests.support.realparts import require_binary
from tests.support.running import ExporterProcess, free_port, start_exporter

NODE_EXPORTER = "prometheus-node-exporter"


class Advancer:
    """Advances a synthetic host every `period_s` (by the time that really passed) until stopped,
    so the exporter under test always finds moving counters and churning processes."""

    def __init__(self, host: SyntheticHost, period_s: float) -> None:
        self.host = host
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="advance", daemon=True)
        self.cpu_s = 0.0  # what advancing cost this process (it shares the machine)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.period_s):
            now = time.monotonic()
            start = time.thread_time()
            self.host.advance(now - last)
            self.cpu_s += time.thread_time() - start
            last = now

    def __enter__(self) -> Advancer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@contextmanager
def wattprobe(
    args: list[str],
    log_dir: Path,
    env: dict[str, str] | None = None,
    *,
    scheme: str = "http",
    ssl_context: ssl.SSLContext | None = None,
    auth: tuple[str, str] | None = None,
) -> Iterator[ExporterProcess]:
    # serve's own defaults, not the tests' (tests/running.TEST_ARGS)
    proc = start_exporter(
        args,
        log_dir=log_dir,
        env=env,
        wait="/readyz",
        test_args=(),
        scheme=scheme,
        ssl_context=ssl_context,
        auth=auth,
    )
    try:
        yield proc
    finally:
        proc.stop()


@dataclass
class NodeExporter:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


RAPL_HWMON = ("--collector.disable-defaults", "--collector.rapl", "--collector.hwmon")


@contextmanager
def node_exporter(
    sysfs: Path,
    procfs: Path,
    log_dir: Path,
    collectors: tuple[str, ...] = RAPL_HWMON,
    ready: bytes = b"node_rapl_",
    *,
    web_config: Path | None = None,
    ca: Path | None = None,
    auth: tuple[str, str] | None = None,
) -> Iterator[NodeExporter]:
    """node_exporter reading the given trees, by default with only its RAPL and hwmon
    collectors; collectors=() runs Debian's defaults (what a node runs). Ready once /metrics
    has `ready` in it. web_config: its --web.config.file (TLS: give the CA that checks it)."""
    binary = require_binary(NODE_EXPORTER)
    port = free_port()
    log = (log_dir / f"node-exporter-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--path.sysfs={sysfs}",
            f"--path.procfs={procfs}",
            *collectors,
            f"--web.listen-address=127.0.0.1:{port}",
            *([f"--web.config.file={web_config}"] if web_config is not None else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    running = NodeExporter(proc, port)
    url = running.url
    context = None
    if ca is not None:
        url = url.replace("http://", "https://")
        context = ssl.create_default_context(cafile=str(ca))
    headers = {}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, headers=headers), timeout=2, context=context
                ) as resp:
                    if resp.status == 200 and ready in resp.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node_exporter did not serve {ready!r} (log: {log.name})")
            time.sleep(0.1)
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_scrapers(url: str, scrapers: int, count: int, gap_s: float) -> list[list[Request]]:
    """The requests of `scrapers` concurrent keep-alive scrapers, `count` each, per scraper in
    the order they were made."""
    start_at = time.time() + 0.5  # after every scraper process has started
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.benchmarks.scraper",
                url,
                str(count),
                str(gap_s),
                str(start_at),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(scrapers)
    ]
    out: list[list[Request]] = []
    for p in procs:
        stdout, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"scraper failed: {err.decode(errors='replace')}")
        out.append([(start, latency, snap) for start, latency, snap in json.loads(stdout)])
    return out


def fetch(url: str, gzip: bool = False) -> bytes:
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        body: bytes = r.read()
        return body
