"""`wattprobe serve` as the validation runs it (python -m exporter, the repo on PYTHONPATH, as on
a machine where it is not installed): start, scrape, wait for its next interval, CPU and RSS."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def pick(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    want = set(labels.items())
    return {lbl: v for (n, lbl), v in samples.items() if n == name and want <= lbl}


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(pick(samples, name, **labels).values())


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    rss_bytes: int


def usage(pid: int) -> Usage | None:
    """utime+stime and VmRSS from /proc: what the agent costs the node."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = next(
        (int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")),
        0,
    )
    return Usage(cpu, rss)


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    started: float

    @classmethod
    def start(cls, args: list[str], log: Path, env: dict[str, str]) -> Agent:
        port = free_port()
        path = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        listen = ["--web.listen-address", f"127.0.0.1:{port}"]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "exporter", "serve", *listen, *args],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**env, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"},
            )
        return cls(proc, port, log, time.monotonic())

    def get(self, path: str = "/metrics", timeout: float = 5.0) -> str:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body: bytes = resp.read()
            return body.decode()

    def samples(self) -> Samples:
        return parse(self.get())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> float:
        """Seconds from start until /metrics serves a GPU's energy counter."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"agent exited with {self.proc.returncode}")
            try:
                if "wattprobe_gpu_energy_joules_total{" in self.get(timeout=2.0):
                    return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"no GPU energy series within {timeout:.0f}s")

    def next_interval(self, timeout: float) -> tuple[float, Samples]:
        """Block until the agent publishes a new interval; its samples and when they arrived."""
        before = total(self.samples(), "wattprobe_intervals_total")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            samples = self.samples()
            if total(samples, "wattprobe_intervals_total") != before:
                return time.monotonic(), samples
            time.sleep(0.02)
        raise TimeoutError(f"no new interval within {timeout:.1f}s")

    def usage(self) -> Usage | None:
        return usage(self.proc.pid)

    def stop(self) -> int | None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
