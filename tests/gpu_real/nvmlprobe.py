"""Direct NVML reads beside the agent: every call timed, every answer kept in NVML's own units
(mW, mJ, MHz, bytes, percent) under the fake NVML's scenario keys, so a sample can be written
back as a scenario file (record.py). Read-only: nothing here sets a clock, a limit or MIG mode,
and nothing resets the GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pynvml

Answer = int | str


@dataclass
class CallTimes:
    """Seconds each NVML call took, by call name; errors by call name and NVML error."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, dict[str, int]] = field(default_factory=dict)

    def timed(self, name: str, call: Callable[[], Any]) -> Any | None:
        start = time.perf_counter()
        try:
            return call()
        except (pynvml.NVMLError, AttributeError, TypeError) as err:
            # NVML's answer, or a binding too old for the call (no such function or argument):
            # either way a finding for the report, not a reason to stop measuring
            kind = type(err).__name__
            per = self.errors.setdefault(name, {})
            per[kind] = per.get(kind, 0) + 1
            return None
        finally:
            self.seconds.setdefault(name, []).append(time.perf_counter() - start)

    def summary(self) -> dict[str, dict[str, float | int]]:
        out: dict[str, dict[str, float | int]] = {}
        for name, values in sorted(self.seconds.items()):
            ordered = sorted(values)
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            out[name] = {
                "calls": len(values),
                "median_ms": round(statistics.median(values) * 1e3, 4),
                "p95_ms": round(p95 * 1e3, 4),
                "max_ms": round(ordered[-1] * 1e3, 4),
            }
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Nvml:
    """pynvml, initialised once; call close() at the end."""

    times: CallTimes = field(default_factory=CallTimes)
    handles: list[Any] = field(default_factory=list)
    last_seen_us: dict[int, int] = field(default_factory=dict)

    def open(self) -> dict[str, Answer]:
        self.times.timed("nvmlInit", pynvml.nvmlInit)
        system: dict[str, Answer] = {}
        for key, call in (
            ("driver_version", pynvml.nvmlSystemGetDriverVersion),
            ("nvml_version", pynvml.nvmlSystemGetNVMLVersion),
        ):
            value = self.times.timed(key, call)
            if value is not None:
                system[key] = _text(value)
        cuda = self.times.timed("cuda_version", pynvml.nvmlSystemGetCudaDriverVersion)
        if isinstance(cuda, int):
            system["cuda_version"] = cuda
        count = self.times.timed("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount) or 0
        for i in range(int(count)):
            handle = self.times.timed(
                "nvmlDeviceGetHandleByIndex", partial(pynvml.nvmlDeviceGetHandleByIndex, i)
            )
            if handle is not None:
                self.handles.append(handle)
        return system

    def close(self) -> None:
        self.times.timed("nvmlShutdown", pynvml.nvmlShutdown)

    def energy_mj(self, gpu: int) -> int | None:
        value = self.times.timed(
            "nvmlDeviceGetTotalEnergyConsumption",
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handles[gpu]),
        )
        return None if value is None else int(value)

    def identity(self, gpu: int) -> dict[str, Answer]:
        h = self.handles[gpu]
        out: dict[str, Answer] = {}
        name = self.times.timed("nvmlDeviceGetName", lambda: pynvml.nvmlDeviceGetName(h))
        uuid = self.times.timed("nvmlDeviceGetUUID", lambda: pynvml.nvmlDeviceGetUUID(h))
        pci = self.times.timed("nvmlDeviceGetPciInfo", lambda: pynvml.nvmlDeviceGetPciInfo(h))
        if name is not None:
            out["name"] = _text(name)
        if uuid is not None:
            out["uuid"] = _text(uuid)
        if pci is not None:
            out["pci_bus_id"] = _text(pci.busId)
            out["pci_device_id"] = f"0x{int(pci.pciDeviceId):08X}"
        mig = self.times.timed("nvmlDeviceGetMigMode", lambda: pynvml.nvmlDeviceGetMigMode(h))
        if mig is not None:
            out["mig_mode"] = int(mig[0])  # current mode; the pending one is never changed
        max_mig = self.times.timed(
            "nvmlDeviceGetMaxMigDeviceCount", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
        )
        if max_mig is not None:
            out["max_mig"] = int(max_mig)
        events = self.times.timed(
            "nvmlDeviceGetSupportedEventTypes", lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h)
        )
        if events is not None:
            out["events_supported"] = f"0x{int(events):x}"
        return out

    def sample(self, gpu: int) -> dict[str, Answer]:
        """One reading of everything the agent reads per interval, under scenario keys."""
        h = self.handles[gpu]
        t = self.times.timed
        out: dict[str, Answer] = {}

        def put(key: str, value: Any) -> None:
            if value is not None:
                out[key] = int(value)

        util = t("nvmlDeviceGetUtilizationRates", lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            put("util.gpu", util.gpu)
            put("util.memory", util.memory)
        memory = t(
            "nvmlDeviceGetMemoryInfo_v2",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        )
        if memory is None:
            memory = t("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        if memory is not None:
            put("memory.total", memory.total)
            put("memory.reserved", getattr(memory, "reserved", None))
            put("memory.used", memory.used)
        put(
            "temperature",
            t(
                "nvmlDeviceGetTemperature",
                lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            ),
        )
        put("power_mw", t("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(h)))
        put(
            "power_limit_mw",
            t("nvmlDeviceGetEnforcedPowerLimit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)),
        )
        put("energy_mj", self.energy_mj(gpu))
        for key, clock in (
            ("clock.graphics", pynvml.NVML_CLOCK_GRAPHICS),
            ("clock.sm", pynvml.NVML_CLOCK_SM),
            ("clock.mem", pynvml.NVML_CLOCK_MEM),
        ):
            put(
                key,
                t("nvmlDeviceGetClockInfo", partial(pynvml.nvmlDeviceGetClockInfo, h, clock)),
            )
        reasons = t(
            "nvmlDeviceGetCurrentClocksEventReasons",
            lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        )
        if reasons is not None:
            out["clock_events"] = f"0x{int(reasons):x}"
        put(
            "pcie_replay",
            t("nvmlDeviceGetPcieReplayCounter", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h)),
        )
        for key, kind in (
            ("ecc.corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc.uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            put(
                key,
                t(
                    "nvmlDeviceGetTotalEccErrors",
                    partial(pynvml.nvmlDeviceGetTotalEccErrors, h, kind, pynvml.NVML_VOLATILE_ECC),
                ),
            )
        procs = t(
            "nvmlDeviceGetComputeRunningProcesses",
            lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        )
        for p, proc in enumerate(procs or []):
            out[f"proc.{p}.pid"] = int(proc.pid)
            used = proc.usedGpuMemory
            if used is not None:  # pynvml maps NVML's "not available" to None
                out[f"proc.{p}.memory"] = int(used)
        samples = t(
            "nvmlDeviceGetProcessUtilization",
            lambda: pynvml.nvmlDeviceGetProcessUtilization(h, self.last_seen_us.get(gpu, 0)),
        )
        for p, s in enumerate(samples or []):
            out[f"putil.{p}.pid"] = int(s.pid)
            out[f"putil.{p}.sm"] = int(s.smUtil)
            out[f"putil.{p}.mem"] = int(s.memUtil)
            self.last_seen_us[gpu] = max(self.last_seen_us.get(gpu, 0), int(s.timeStamp))
        return out

    def xid_probe(self) -> dict[str, object]:
        """Create an XID event set, register every GPU, wait 0 ms once, free it: what the
        driver answers (a timeout is the normal answer when no XID happened)."""
        t = self.times.timed
        result: dict[str, object] = {}
        event_set = t("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        if event_set is None:
            result["created"] = False
            return result
        result["created"] = True
        registered = []
        for i, h in enumerate(self.handles):
            before = sum(self.times.errors.get("nvmlDeviceRegisterEvents", {}).values())
            t(
                "nvmlDeviceRegisterEvents",
                partial(
                    pynvml.nvmlDeviceRegisterEvents,
                    h,
                    pynvml.nvmlEventTypeXidCriticalError,
                    event_set,
                ),
            )
            failed = sum(self.times.errors.get("nvmlDeviceRegisterEvents", {}).values()) > before
            registered.append(-1 if failed else i)
        result["registered"] = [i for i in registered if i >= 0]
        start = time.perf_counter()
        try:
            data = pynvml.nvmlEventSetWait(event_set, 0)
            result["wait"] = {"event_type": int(data.eventType), "xid": int(data.eventData)}
        except pynvml.NVMLError as err:
            result["wait"] = type(err).__name__
        self.times.seconds.setdefault("nvmlEventSetWait(0)", []).append(time.perf_counter() - start)
        t("nvmlEventSetFree", lambda: pynvml.nvmlEventSetFree(event_set))
        return result
