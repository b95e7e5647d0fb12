"""A stand-in nvidia-smi for the test of validate.py: it answers the `--query-gpu ...
--format=csv,noheader,nounits -lms N` form the validator uses, from NVML through pynvml, so on
the fake NVML it prints what a driver's nvidia-smi would print for that scenario."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pynvml

MIB = 1 << 20
FIELDS: dict[str, Callable[[Any, int], str]] = {
    "index": lambda h, i: str(i),
    "power.draw": lambda h, i: f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1000:.2f}",
    "utilization.gpu": lambda h, i: str(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
    "memory.used": lambda h, i: str(pynvml.nvmlDeviceGetMemoryInfo(h).used // MIB),
    "temperature.gpu": lambda h, i: str(
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    ),
    "clocks.sm": lambda h, i: str(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
    "power.limit": lambda h, i: f"{pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000:.2f}",
}


def main(argv: list[str]) -> int:
    opts = dict(a.lstrip("-").split("=", 1) for a in argv if "=" in a)
    if "-lms" in argv:  # `-lms N`, as nvidia-smi takes it
        opts["lms"] = argv[argv.index("-lms") + 1]
    if opts.get("format") != "csv,noheader,nounits" or "query-gpu" not in opts:
        print(f"fake nvidia-smi: unsupported arguments {argv}", file=sys.stderr)
        return 2
    fields = [FIELDS[name] for name in opts["query-gpu"].split(",")]
    period = int(opts.get("lms", "0")) / 1000
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    while True:
        for i, h in enumerate(handles):
            print(", ".join(field(h, i) for field in fields), flush=True)
        if not period:
            return 0
        time.sleep(period)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
