"""nvidia-smi sampled beside the agent (`--query-gpu ... -lms 100`), as an outside witness:
its rows, timed on arrival, integrate into energy and give the gauges to compare with."""

from __future__ import annotations

import itertools
import math
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FIELDS = (
    "index",
    "power.draw",
    "utilization.gpu",
    "memory.used",
    "temperature.gpu",
    "clocks.sm",
    "power.limit",
)


def command(binary: str, period_ms: int = 100) -> list[str]:
    query = ",".join(FIELDS)
    return [binary, f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", str(period_ms)]


def parse_row(line: str) -> dict[str, float | None] | None:
    """One CSV row; None for a row that is not ours (a header, a warning). '[N/A]' -> None."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS):
        return None
    row: dict[str, float | None] = {}
    for name, text in zip(FIELDS, parts, strict=True):
        try:
            row[name] = float(text)
        except ValueError:
            if name == "index":
                return None
            row[name] = None
    return row


@dataclass
class SmiSampler:
    binary: str
    log: Path
    rows: list[tuple[float, dict[str, float | None]]] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            command(self.binary),
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            row = parse_row(line)
            if row is not None:
                with self._lock:
                    self.rows.append((time.monotonic(), row))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def series(self, gpu: int) -> list[tuple[float, dict[str, float | None]]]:
        with self._lock:
            return [(t, r) for t, r in self.rows if r["index"] == gpu]

    def energy_j(self, gpu: int, start: float, end: float) -> tuple[float, int] | None:
        """power.draw integrated (trapezoids) over [start, end]; None with fewer than 2 rows."""
        points: list[tuple[float, float]] = []
        for t, row in self.series(gpu):
            watts = row["power.draw"]
            if start <= t <= end and watts is not None:
                points.append((t, watts))
        if len(points) < 2:
            return None
        joules = math.fsum(
            (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points)
        )
        # the window's ends lie between rows: hold the first and last power over the gap
        joules += (points[0][0] - start) * points[0][1] + (end - points[-1][0]) * points[-1][1]
        return joules, len(points)

    def nearest(self, gpu: int, when: float) -> dict[str, float | None] | None:
        rows = self.series(gpu)
        if not rows:
            return None
        return min(rows, key=lambda tr: abs(tr[0] - when))[1]
