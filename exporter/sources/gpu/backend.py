"""The GPU device backend interface: what wattprobe needs from one vendor's GPUs.

A backend reads every GPU of the node at once and returns vendor-neutral GpuReadings: identity
(index, UUID, model, PCI bus id), readings (utilization, memory, temperature, power and its
limit, the energy counter, clocks), per-process use (memory, and SM samples where the vendor has
them) and error events. Everything downstream (the GPU meters, attribution, the GPU directory
that names PodResources devices, the exposition) reads only GpuReadings. NVML
(exporter/sources/gpu/nvml/source.py) is the first backend; docs/architecture.md says how to add
one.
"""

from __future__ import annotations

import threading

from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.ports import GpuBackend


class LatestReadings:
    """A backend that remembers the GPUs of its last successful read, for readers on other
    threads (the GPU directory that resolves PodResources device IDs): they see what the
    backend read, not what the last snapshot published."""

    def __init__(self, backend: GpuBackend) -> None:
        self._backend = backend
        self.name = backend.name
        self._lock = threading.Lock()
        self._gpus: tuple[GpuReading, ...] = ()

    def read(self) -> GpuReadings:
        readings = self._backend.read()
        with self._lock:
            self._gpus = readings.gpus
        return readings

    def close(self) -> None:
        self._backend.close()

    def gpus(self) -> tuple[GpuReading, ...]:
        with self._lock:
            return self._gpus
