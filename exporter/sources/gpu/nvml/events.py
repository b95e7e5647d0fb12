"""XID events: a background thread waits on an NVML event set and counts XIDs per GPU.

XIDs are the driver's error reports (79: fallen off the bus, 48: double-bit ECC, 13/31/43:
application faults ...). NVML delivers them as nvmlEventTypeXidCriticalError events with the
XID in eventData. The wait has a bounded timeout so that stop() takes effect within it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pynvml

from exporter.model.gpu_readings import EventWatch

log = logging.getLogger(__name__)

WAIT_MS = 500  # how long one wait blocks: the bound on how long stop() takes
ERROR_BACKOFF_S = 1.0
WAIT_FAILED = "wait failed"  # the nvml_xid source_up reason while event waits fail


def _address(handle: Any) -> int | None:
    """A device handle's pointer value: NVML hands out the same handle in event data."""
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
    return int(value) if value else None


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"NVML error {getattr(exc, 'value', '?')}"


class XidWatcher:
    """Counts XID events per (GPU index, XID) from start() until stop()."""

    def __init__(self, devices: Sequence[tuple[int, Any]], wait_ms: int = WAIT_MS) -> None:
        self._devices = list(devices)
        self._wait_ms = wait_ms
        self._lock = threading.Lock()
        self._counts: dict[int, dict[int, int]] = {}
        self._by_address: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._status = EventWatch(False, "not started")
        self._watching = self._status  # the status while waits work

    def start(self) -> EventWatch:
        """Register every GPU that supports XID events and start the thread."""
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            self._status = EventWatch(False, "event set failed", _describe(exc))
            log.warning("XID events will not be counted: nvmlEventSetCreate: %s", _describe(exc))
            return self._status
        skipped = []
        for index, handle in self._devices:
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set
                )
            except pynvml.NVMLError as exc:
                skipped.append(f"GPU {index}: {_describe(exc)}")
                continue
            address = _address(handle)
            if address is not None:
                self._by_address[address] = index
        if skipped:
            log.warning("XID events not watched on %s", "; ".join(skipped))
        if not self._by_address:
            self._free()
            self._status = EventWatch(False, "not supported", "; ".join(skipped))
            return self._status
        detail = "; ".join(skipped)
        self._status = self._watching = EventWatch(
            True, "", f"not watched: {detail}" if detail else ""
        )
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()
        return self._status

    def status(self) -> EventWatch:
        return self._status

    def counts(self, index: int) -> dict[int, int]:
        with self._lock:
            return dict(self._counts.get(index, {}))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                # never free an event set a thread may still be waiting on
                log.warning("XID watcher did not stop within %gs", timeout_s)
                return
        self._free()

    def _free(self) -> None:
        if self._event_set is None:
            return
        try:
            pynvml.nvmlEventSetFree(self._event_set)
        except pynvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", _describe(exc))
        self._event_set = None

    def _run(self) -> None:
        reported: set[int] = set()
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
            except pynvml.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == pynvml.NVML_ERROR_TIMEOUT:
                    self._waits_work()
                    continue
                # while waits fail nvml_xid is down, so that no one takes silence for no XIDs
                self._status = EventWatch(False, WAIT_FAILED, f"nvmlEventSetWait: {_describe(exc)}")
                if code not in reported and isinstance(code, int):
                    reported.add(code)
                    log.warning("waiting for XID events: %s (logged once)", _describe(exc))
                self._stop.wait(ERROR_BACKOFF_S)
                continue
            self._waits_work()
            if int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                self._count(data.device, int(data.eventData))

    def _waits_work(self) -> None:
        if self._status is not self._watching:
            log.info("waiting for XID events works again")
            self._status = self._watching

    def _count(self, device: Any, xid: int) -> None:
        address = _address(device)
        index = self._by_address.get(address) if address is not None else None
        if index is None:
            log.warning("XID %d on a GPU this exporter does not know", xid)
            return
        log.warning("GPU %d: XID %d", index, xid)
        with self._lock:
            per_gpu = self._counts.setdefault(index, {})
            per_gpu[xid] = per_gpu.get(xid, 0) + 1
