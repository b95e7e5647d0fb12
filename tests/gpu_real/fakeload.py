"""The fake-load mode: with no GPU, the validator plays the driver's part for the load process.
Every tick it writes GPU 0 of the fake NVML's scenario as a driver would show that process at
the current duty cycle (utilization, the process in the process list with a utilization sample,
power between idle and 90 % of the limit) and advances the energy counter by power x time, so
the counter's growth is known exactly from the file's values."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.sources.gpu.nvml.scenario import Scenario, parse

TICK_S = 0.1
IDLE_W = 70.0
LOAD_MEMORY = 4 << 30


@dataclass
class FakeDriver:
    path: Path
    pid: int = 0
    duty: float = 0.0
    running: bool = False  # the load process holds a context
    # The counter stands still until the first phase: the agent's baseline and the validator's
    # first read, a moment apart, then see the same value, so the test can ask for exact
    # agreement (on a real GPU the report gives that moment, nvml_read_after_agent_s, instead).
    flowing: bool = False
    xid_pending: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def set(
        self, *, pid: int | None = None, duty: float | None = None, running: bool | None = None
    ) -> None:
        with self._lock:
            self.flowing |= duty is not None
            self.pid = self.pid if pid is None else pid
            self.duty = self.duty if duty is None else duty
            self.running = self.running if running is None else running

    def inject_xid(self, xid: int) -> None:
        with self._lock:
            self.xid_pending.append(xid)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop moving the counters: after this the file's energy is final."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        scenario = Scenario(self.path, parse(self.path.read_text()))
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            with self._lock:
                self._write(scenario, now - last)
            last = now

    def _write(self, s: Scenario, dt: float) -> None:
        limit_w = s.number("gpu.0.power_limit_mw") / 1000
        watts = IDLE_W + self.duty * (0.9 * limit_w - IDLE_W)
        s["gpu.0.power_mw"] = round(watts * 1000)
        if self.flowing:
            s.add_energy_j(0, watts * dt)
        s["gpu.0.util.gpu"] = round(self.duty * 100)
        for key in [k for k in s.values if k.startswith(("gpu.0.proc.", "gpu.0.putil."))]:
            del s[key]
        if self.running:
            s["gpu.0.proc.0.pid"] = self.pid
            s["gpu.0.proc.0.memory"] = LOAD_MEMORY
            if self.duty > 0:
                s["gpu.0.putil.0.pid"] = self.pid
                s["gpu.0.putil.0.sm"] = round(self.duty * 100)
                s["gpu.0.putil.0.mem"] = round(self.duty * 40)
        for xid in self.xid_pending:
            s.add_event(0, xid)
        self.xid_pending.clear()
        s.write()
