"""A busy node played on the fixture trees: counters advance every 0.1 s in a thread.

GPU 1 (pod C alone) draws the most, then GPU 0 (pods A and B), then GPU 3; among CPU users the
nginx pod (5f1c3e2a) works most, then 7a8b9c0d, then 9e8d7c6b.
"""

from __future__ import annotations

import threading

from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost

BUSY_PODS = ["pod 5f1c3e2a", "pod 7a8b9c0d", "pod 9e8d7c6b"]


class BusyNode:
    def __init__(self, host: FixtureHost, scenario: Scenario | None) -> None:
        self.host = host
        self.scenario = scenario
        self.stop = threading.Event()
        self.lock = threading.Lock()  # the scenario file is rewritten whole
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _tick(self) -> None:
        h = self.host
        for device, joules in (("intel-rapl:0", 20.0), ("intel-rapl:1", 10.0)):
            if h.rapl_dir(device).exists():
                h.add_energy_j(device, joules)
        for pid, ticks in ((1001, 10), (1101, 5), (1301, 2)):
            h.add_process_ticks(pid, ticks)
        h.add_cpu_ticks(busy=17, idle=60)
        if self.scenario is not None:
            with self.lock:
                # 600, 400 and 150 W: within what an H100 (700 W limit) can draw
                for gpu, joules in ((1, 60.0), (0, 40.0), (3, 15.0)):
                    self.scenario.add_energy_j(gpu, joules)
                self.scenario.write()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            self._tick()

    def __enter__(self) -> BusyNode:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
