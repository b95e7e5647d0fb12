"""What the GPU backends give the rest of the agent besides their readings: the node's GPUs as
the monitor last merged them, for readers on other threads (the directory that resolves the
device IDs PodResources lists). The backend interface itself is GpuBackend in
exporter/model/ports.py; NVML (exporter/sources/gpu/nvml/) and DRM (exporter/sources/gpu/drm/)
implement it, and docs/architecture.md says how to add one.
"""

from __future__ import annotations

import threading

from exporter.model.gpu_readings import GpuReading, GpuReadings


class LatestGpus:
    """The GPUs of the latest merged reading: the monitor publishes, any thread reads. The
    indexes are the merged ones (exporter/accounting/gpu_merge.py), so a device ID resolves to
    the `gpu` label the GPU's series carry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gpus: tuple[GpuReading, ...] = ()

    def publish(self, readings: GpuReadings) -> None:
        with self._lock:
            self._gpus = readings.gpus

    def gpus(self) -> tuple[GpuReading, ...]:
        with self._lock:
            return self._gpus
