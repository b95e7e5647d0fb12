"""GPUs through NVML (nvidia-ml-py): identity, gauges, energy, processes, MIG devices, XIDs.

NVML is initialised once, on the first read, and shut down by close(). A node without the
driver is "absent"; a node whose driver is loaded but whose NVML cannot be used is a fault
with a short reason; either way initialisation is retried every `retry_s`, since the GPU
operator often installs the driver after this exporter started.

Every call can fail, and a failure only costs what it touched:
- NOT_SUPPORTED (or a function the driver lacks): that field of that GPU is dropped and not
  asked again; logged once.
- GPU_IS_LOST / RESET_REQUIRED: the GPU is reported lost (identity only) and asked again next
  interval; the other GPUs are unaffected.
- Anything else (a timeout, no permission, ...): the field is missing this interval; logged
  once per field and error.
- Errors that mean NVML itself is gone (uninitialised, driver unloaded, library/driver version
  mismatch) fail the read; NVML is re-initialised on the next one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from exporter.model.gpu_readings import (
    COMPUTE,
    GRAPHICS,
    GpuProcess,
    GpuReading,
    GpuReadings,
    MigInstanceReading,
    ProcessUtilization,
)
from exporter.model.readings import SourceAbsent, SourceError
from exporter.sources.gpu.nvml.events import XidWatcher

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_RETRY_S = 60.0
MHZ = 1e6

LOST = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED}
UNSUPPORTED = {
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
}
NVML_GONE = {
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
}
# Short, low-cardinality reasons for wattprobe_source_up{source="nvml"}.
REASONS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library not found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver not loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "permission denied",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "driver/library mismatch",
    pynvml.NVML_ERROR_UNINITIALIZED: "uninitialized",
    pynvml.NVML_ERROR_IRQ_ISSUE: "driver error",
    pynvml.NVML_ERROR_UNKNOWN: "unknown error",
}

# What each field is called in logs.
FIELD_NAMES = {
    "power": "power usage",
    "power_limit": "enforced power limit",
    "energy": "total energy counter (power is integrated instead)",
    "utilization": "utilization rates",
    "memory": "memory info",
    "temperature": "temperature",
    "sm_clock": "SM clock",
    "memory_clock": "memory clock",
    "clock_events": "clock event reasons",
    "pcie_replays": "PCIe replay counter",
    "ecc_corrected": "corrected ECC error count",
    "ecc_uncorrected": "uncorrected ECC error count",
    "processes": "compute processes",
    "graphics_processes": "graphics processes",
    "process_utilization": "per-process utilization",
    "mig_mode": "MIG mode",
    "max_mig": "MIG device count",
    "mig_processes": "MIG compute processes",
}


def error_code(exc: BaseException) -> int:
    value = getattr(exc, "value", pynvml.NVML_ERROR_UNKNOWN)
    return value if isinstance(value, int) else pynvml.NVML_ERROR_UNKNOWN


def describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # pynvml formats some codes through the library itself
        return f"NVML error {error_code(exc)}"


def text(value: object) -> str:
    """pynvml returns str from most calls, bytes from a few and older versions."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00 ")
    return str(value).strip()


def cuda_version_text(version: int) -> str:
    """NVML's 12040 -> "12.4"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


@dataclass
class _Device:
    """One GPU's handle and what the source learned about it. Mutated only by read()."""

    index: int
    handle: Any
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    unsupported: set[str] = field(default_factory=set)
    alternative: dict[str, int] = field(default_factory=dict)  # which fallback call works
    reported: set[tuple[str, int]] = field(default_factory=set)
    last_util_timestamp: int = 0  # usec: where nvmlDeviceGetProcessUtilization goes on from
    lost: bool = False


class _NvmlGone(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(describe(exc))
        self.code = error_code(exc)


class _Calls:
    """One GPU's calls in one interval, applying the error policy of the module docstring."""

    def __init__(self, device: _Device) -> None:
        self.device = device
        self._lost = False
        self.failed: set[str] = set()  # calls that failed this interval (not unsupported ones)

    def is_lost(self) -> bool:
        """Whether a call found the GPU lost (a method: it changes as calls are made)."""
        return self._lost

    def get(
        self,
        name: str,
        *calls: Callable[[], T],
        not_found: T | None = None,
    ) -> T | None:
        """The first call that works (the one that worked before is tried first).

        Calls after the first are fallbacks for older drivers: a call the driver does not
        support moves on to the next for good. not_found is returned for NVML_ERROR_NOT_FOUND,
        which some calls use for "nothing there" rather than as an error.
        """
        dev = self.device
        if self._lost or name in dev.unsupported:
            return None
        start = dev.alternative.get(name, 0)
        for i in range(start, len(calls)):
            try:
                return calls[i]()
            except pynvml.NVMLError as exc:
                code = error_code(exc)
                if code == pynvml.NVML_ERROR_NOT_FOUND and not_found is not None:
                    return not_found
                if code in LOST:
                    self._lost = True
                    return None
                if code in NVML_GONE:
                    raise _NvmlGone(exc) from exc
                if code in UNSUPPORTED and i + 1 < len(calls):
                    dev.alternative[name] = i + 1
                    continue
                self._failed(name, exc, code)
                return None
        return None

    def _failed(self, name: str, exc: BaseException, code: int) -> None:
        dev = self.device
        what = FIELD_NAMES.get(name, name)
        if code not in UNSUPPORTED:
            self.failed.add(name)
        if code in UNSUPPORTED:
            dev.unsupported.add(name)
            log.info("GPU %d (%s): %s not supported: %s", dev.index, dev.uuid, what, describe(exc))
        elif (name, code) not in dev.reported:
            dev.reported.add((name, code))
            log.warning(
                "GPU %d (%s): reading %s failed: %s (logged once; retried every interval)",
                dev.index,
                dev.uuid,
                what,
                describe(exc),
            )


class NvmlSource:
    """Reads every GPU NVML can see. read() and close() are called from one thread at a time."""

    name = "nvml"

    def __init__(
        self,
        procfs: Path,
        *,
        retry_s: float = DEFAULT_RETRY_S,
        watch_xid: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._procfs = procfs
        self._retry_s = retry_s
        self._watch_xid = watch_xid
        self._clock = clock
        self._initialized = False
        self._failure: SourceError | None = None
        self._retry_at = 0.0
        self._devices: list[_Device] = []
        self._driver_version = ""
        self._nvml_version = ""
        self._cuda_version = ""
        self._watcher: XidWatcher | None = None
        # XIDs counted by watchers before NVML was re-initialised: counts only ever grow
        self._xids_before: dict[int, dict[int, int]] = {}

    # -- life cycle ------------------------------------------------------------------------

    def read(self) -> GpuReadings:
        self._ensure_started()
        try:
            gpus = tuple(self._read_gpu(dev) for dev in self._devices)
        except _NvmlGone as gone:
            self._stop()
            self._retry_at = self._clock()  # try again right away, next interval
            reason = REASONS.get(gone.code, "nvml error")
            raise SourceError(reason, f"NVML stopped working: {gone}") from gone
        return GpuReadings(
            driver_version=self._driver_version,
            nvml_version=self._nvml_version,
            cuda_version=self._cuda_version,
            gpus=gpus,
            event_watch=self._watcher.status() if self._watcher else None,
        )

    def close(self) -> None:
        """Stop the XID watcher and shut NVML down. Safe to call more than once."""
        self._stop()

    def _ensure_started(self) -> None:
        if self._initialized:
            return
        now = self._clock()
        if self._failure is not None and now < self._retry_at:
            raise _fresh(self._failure)  # a new object: re-raising one grows its traceback
        try:
            self._start()
        except SourceError as exc:
            self._failure = exc
            self._retry_at = now + self._retry_s
            raise
        self._failure = None

    def _start(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise self._init_error(exc) from exc
        try:
            self._driver_version = self._system_text(pynvml.nvmlSystemGetDriverVersion)
            self._nvml_version = self._system_text(pynvml.nvmlSystemGetNVMLVersion)
            cuda = self._system_call(pynvml.nvmlSystemGetCudaDriverVersion)
            self._cuda_version = cuda_version_text(cuda) if isinstance(cuda, int) else ""
            count = pynvml.nvmlDeviceGetCount()
            self._devices = [self._open_device(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            _shutdown()
            raise SourceError(
                REASONS.get(error_code(exc), "nvml error"), f"listing GPUs: {describe(exc)}"
            ) from exc
        if not self._devices:
            _shutdown()
            raise SourceAbsent("NVML works but sees no GPUs")
        self._initialized = True
        log.info(
            "NVML %s, driver %s, CUDA %s: %s",
            self._nvml_version,
            self._driver_version,
            self._cuda_version,
            ", ".join(f"{d.index} {d.name} {d.uuid}" for d in self._devices),
        )
        if self._watch_xid:
            self._watcher = XidWatcher([(d.index, d.handle) for d in self._devices if d.handle])
            self._watcher.start()

    def _stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            for dev in self._devices:
                before = self._xids_before.setdefault(dev.index, {})
                for xid, n in self._watcher.counts(dev.index).items():
                    before[xid] = before.get(xid, 0) + n
            self._watcher = None
        if self._initialized:
            self._initialized = False
            self._devices = []
            _shutdown()

    def _init_error(self, exc: BaseException) -> SourceError:
        code = error_code(exc)
        driver = self._procfs / "driver" / "nvidia"
        no_driver = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if code in no_driver and not driver.exists():
            return SourceAbsent(f"no NVIDIA driver ({driver} missing; NVML: {describe(exc)})")
        return SourceError(REASONS.get(code, "init failed"), f"nvmlInit: {describe(exc)}")

    @staticmethod
    def _system_call(fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except pynvml.NVMLError as exc:
            if error_code(exc) in NVML_GONE:
                raise
            log.info("NVML: %s: %s", getattr(fn, "__name__", "call"), describe(exc))
            return None

    def _system_text(self, fn: Callable[[], object]) -> str:
        value = self._system_call(fn)
        return text(value) if value is not None else ""

    def _open_device(self, index: int) -> _Device:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            if error_code(exc) not in LOST:
                raise
            log.warning("GPU %d is lost: %s", index, describe(exc))
            return _Device(index, None, lost=True)
        dev = _Device(index, handle)
        self._identify(dev)
        return dev

    def _identify(self, dev: _Device) -> None:
        calls = _Calls(dev)
        h = dev.handle
        dev.uuid = text(calls.get("uuid", lambda: pynvml.nvmlDeviceGetUUID(h)) or "")
        dev.name = text(calls.get("name", lambda: pynvml.nvmlDeviceGetName(h)) or "")
        pci = calls.get("pci", lambda: pynvml.nvmlDeviceGetPciInfo(h))
        dev.pci_bus_id = text(pci.busId) if pci is not None else ""

    # -- one GPU -----------------------------------------------------------------------------

    def _read_gpu(self, dev: _Device) -> GpuReading:
        if dev.handle is None:
            try:
                dev.handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index)
            except pynvml.NVMLError as exc:
                if error_code(exc) in NVML_GONE:
                    raise _NvmlGone(exc) from exc
                return self._lost(dev)
        calls = _Calls(dev)
        h = dev.handle
        # power first: the cheapest call, and the one that finds out whether the GPU is there
        power_mw = calls.get("power", lambda: pynvml.nvmlDeviceGetPowerUsage(h))
        if calls.is_lost():
            return self._lost(dev)
        if dev.lost:
            dev.lost = False
            log.warning("GPU %d (%s) answers again", dev.index, dev.uuid)
        if not dev.uuid:
            self._identify(dev)
        mig = calls.get("mig_mode", lambda: pynvml.nvmlDeviceGetMigMode(h))
        mig_enabled = None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        util = calls.get("utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        memory = calls.get(
            "memory",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
            lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        )
        temperature = calls.get(
            "temperature",
            lambda: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
            lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        )
        limit_mw = calls.get("power_limit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h))
        energy_mj = calls.get("energy", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
        sm_mhz = calls.get(
            "sm_clock", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        )
        mem_mhz = calls.get(
            "memory_clock", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        )
        reasons = calls.get(
            "clock_events",
            lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        )
        replays = calls.get("pcie_replays", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h))
        ecc_corrected = calls.get("ecc_corrected", lambda: _ecc(h, corrected=True))
        ecc_uncorrected = calls.get("ecc_uncorrected", lambda: _ecc(h, corrected=False))
        if mig_enabled:
            instances = self._read_mig(dev, calls)
            processes = tuple(p for inst in instances for p in inst.processes)
            utilization: tuple[ProcessUtilization, ...] | None = None
        else:
            instances = ()
            processes = self._processes(calls, h)
            utilization = self._process_utilization(dev, calls)
        if calls.is_lost():
            return self._lost(dev)
        return GpuReading(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            pci_bus_id=dev.pci_bus_id,
            mig_enabled=mig_enabled,
            utilization_ratio=None if util is None else util.gpu / 100.0,
            memory_utilization_ratio=None if util is None else util.memory / 100.0,
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            memory_reserved_bytes=_reserved(memory),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            energy_mj=None if energy_mj is None else int(energy_mj),
            sm_clock_hz=None if sm_mhz is None else sm_mhz * MHZ,
            memory_clock_hz=None if mem_mhz is None else mem_mhz * MHZ,
            clock_event_reasons=None if reasons is None else int(reasons),
            pcie_replays=None if replays is None else int(replays),
            ecc_corrected=ecc_corrected,
            ecc_uncorrected=ecc_uncorrected,
            processes=processes,
            process_utilization=utilization,
            mig_instances=instances,
            xid_errors=self._xids(dev.index),
            processes_unread=_processes_unread(calls.failed),
        )

    def _lost(self, dev: _Device) -> GpuReading:
        if not dev.lost:
            dev.lost = True
            log.warning(
                "GPU %d (%s) is lost (fallen off the bus or needs a reset)", dev.index, dev.uuid
            )
        return GpuReading(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            pci_bus_id=dev.pci_bus_id,
            lost=True,
            xid_errors=self._xids(dev.index),
        )

    def _xids(self, index: int) -> tuple[tuple[int, int], ...]:
        counts = dict(self._xids_before.get(index, {}))
        if self._watcher is not None:
            for xid, n in self._watcher.counts(index).items():
                counts[xid] = counts.get(xid, 0) + n
        return tuple(sorted(counts.items()))

    @staticmethod
    def _processes(calls: _Calls, handle: Any) -> tuple[GpuProcess, ...]:
        compute = calls.get(
            "processes", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        )
        graphics = calls.get(
            "graphics_processes", lambda: pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
        )
        return merge_processes(
            [_process(p, COMPUTE) for p in compute or ()]
            + [_process(p, GRAPHICS) for p in graphics or ()]
        )

    @staticmethod
    def _process_utilization(dev: _Device, calls: _Calls) -> tuple[ProcessUtilization, ...] | None:
        h = dev.handle
        since = dev.last_util_timestamp
        samples: list[Any] | None = calls.get(
            "process_utilization",
            lambda: pynvml.nvmlDeviceGetProcessUtilization(h, since),
            not_found=[],
        )
        if samples is None:
            return None
        if samples:
            dev.last_util_timestamp = max(since, *(int(s.timeStamp) for s in samples))
        return sum_utilization((int(s.pid), int(s.smUtil), int(s.memUtil)) for s in samples)

    def _read_mig(self, dev: _Device, calls: _Calls) -> tuple[MigInstanceReading, ...]:
        h = dev.handle
        slots = calls.get("max_mig", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h)) or 0
        instances = []
        for slot in range(slots):
            mig = calls.get(
                "mig_handle",
                partial(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, slot),
                not_found=False,  # an empty slot
            )
            if not mig:
                continue
            instances.append(self._read_mig_device(calls, mig))
        return tuple(instances)

    @staticmethod
    def _read_mig_device(calls: _Calls, mig: Any) -> MigInstanceReading:
        memory = calls.get(
            "mig_memory",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2),
            lambda: pynvml.nvmlDeviceGetMemoryInfo(mig),
        )
        gi = calls.get("mig_ids", lambda: pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = calls.get("mig_ids", lambda: pynvml.nvmlDeviceGetComputeInstanceId(mig))
        compute = calls.get(
            "mig_processes", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(mig)
        )
        processes = merge_processes(_process(p, COMPUTE, gi, ci) for p in compute or ())
        return MigInstanceReading(
            uuid=text(calls.get("mig_uuid", lambda: pynvml.nvmlDeviceGetUUID(mig)) or ""),
            name=text(calls.get("mig_name", lambda: pynvml.nvmlDeviceGetName(mig)) or ""),
            gpu_instance=-1 if gi is None else int(gi),
            compute_instance=-1 if ci is None else int(ci),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            processes=processes,
        )


# -- helpers ---------------------------------------------------------------------------------

# The calls that make up a GPU's process list: one of them failing leaves the split unknown.
PROCESS_CALLS = ("processes", "graphics_processes", "process_utilization", "mig_processes")


def _processes_unread(failed: set[str]) -> str:
    """Why the GPU's process list is incomplete this interval ("" when it is not)."""
    names = [FIELD_NAMES.get(n, n) for n in PROCESS_CALLS if n in failed]
    return f"reading {', '.join(names)} failed" if names else ""


NVML_INVALID_ID = 0xFFFFFFFF


def _fresh(exc: SourceError) -> SourceError:
    if isinstance(exc, SourceAbsent):
        return SourceAbsent(exc.detail)
    return SourceError(exc.reason, exc.detail)


def _shutdown() -> None:
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        log.debug("nvmlShutdown: %s", describe(exc))


def _ecc(handle: Any, *, corrected: bool) -> int:
    kind = (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        if corrected
        else pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    )
    return int(pynvml.nvmlDeviceGetTotalEccErrors(handle, kind, pynvml.NVML_VOLATILE_ECC))


def _reserved(memory: Any) -> int | None:
    value = getattr(memory, "reserved", None)  # only the v2 struct has it
    return None if value is None else int(value)


def _process(info: Any, kind: str, gi: int | None = None, ci: int | None = None) -> GpuProcess:
    used = info.usedGpuMemory
    gpu_instance = getattr(info, "gpuInstanceId", None)
    compute_instance = getattr(info, "computeInstanceId", None)
    if gi is not None:
        gpu_instance, compute_instance = gi, ci
    return GpuProcess(
        pid=int(info.pid),
        used_memory_bytes=None if used is None else int(used),
        kind=kind,
        gpu_instance=None if gpu_instance in (None, NVML_INVALID_ID) else int(gpu_instance),
        compute_instance=None
        if compute_instance in (None, NVML_INVALID_ID)
        else int(compute_instance),
    )


def merge_processes(processes: Iterable[GpuProcess]) -> tuple[GpuProcess, ...]:
    """One entry per PID: a process with both a compute and a graphics context is listed twice
    by NVML, with the same memory; keep the first and the larger memory figure."""
    by_pid: dict[int, GpuProcess] = {}
    for p in processes:
        old = by_pid.get(p.pid)
        if old is None:
            by_pid[p.pid] = p
        elif (p.used_memory_bytes or 0) > (old.used_memory_bytes or 0):
            by_pid[p.pid] = GpuProcess(
                old.pid, p.used_memory_bytes, old.kind, old.gpu_instance, old.compute_instance
            )
    return tuple(by_pid.values())


def sum_utilization(samples: Iterable[tuple[int, int, int]]) -> tuple[ProcessUtilization, ...]:
    """Per-PID totals of (pid, sm %, memory %) samples. Percentages are clamped to 0..100:
    a driver glitch must not hand one process the whole GPU."""
    totals: dict[int, list[float]] = {}
    for pid, sm, mem in samples:
        acc = totals.setdefault(pid, [0.0, 0.0, 0.0])
        acc[0] += min(max(sm, 0), 100)
        acc[1] += min(max(mem, 0), 100)
        acc[2] += 1
    return tuple(
        ProcessUtilization(pid, sm, mem, int(n)) for pid, (sm, mem, n) in sorted(totals.items())
    )
