"""Polls PodResources on its own thread and keeps the latest device assignments, DRA claims and
the node's CDI specs (read on the same thread: the monitor only reads what it kept)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.kube.background import Backoff, StatusBox, Worker, failure_status
from exporter.kube.cdi import EMPTY_INDEX, CdiIndex, CdiScanner
from exporter.kube.gpus import (
    ClaimDevice,
    DeviceAssignment,
    is_gpu_resource,
)
from exporter.kube.podresources.client import PodResourcesClient
from exporter.model.config import DEFAULT_GPU_RESOURCES
from exporter.model.readings import SourceError, SourceStatus

log = logging.getLogger(__name__)

SOURCE = "podresources"


@dataclass(frozen=True)
class Assignments:
    devices: tuple[DeviceAssignment, ...]
    allocatable_gpus: int | None  # None: GetAllocatableResources not served by this kubelet
    at: float  # monotonic time of the List that produced it
    claims: tuple[ClaimDevice, ...] = ()  # DRA: one per device of a claim, per container
    cdi: CdiIndex = EMPTY_INDEX  # the node's CDI specs, read when there are claims


class PodResourcesPoller:
    """Latest PodResources assignments; kept for the metadata TTL when the kubelet stops
    answering, then dropped."""

    name = SOURCE

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        interval_s: float,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        cdi: CdiScanner | None = None,
        gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES,
    ) -> None:
        self._client = client
        self._cdi = cdi if cdi is not None else CdiScanner()
        self._gpu_resources = gpu_resources
        # the CDI problems of the last scan ((path, reason) -> kind; bounded by the number of
        # spec files read, MAX_SPEC_FILES per directory) and the rejections counted so far
        self._problems: dict[tuple[str, str], str] = {}
        self._rejected: dict[str, int] = {}
        self._interval_s = interval_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._status = StatusBox()
        self._latest: Assignments | None = None
        self._allocatable_served = True
        self._worker = Worker(f"{SOURCE}-poll", self._run)

    def poll_once(self) -> Assignments:
        listed, claims = self._client.list_all()
        devices = tuple(listed)
        # specs only matter to claims; a node without DRA never reads them
        cdi = self._cdi.scan() if claims else EMPTY_INDEX
        self._log_problems(cdi)
        allocatable: int | None = None
        if self._allocatable_served:
            try:
                allocatable = sum(
                    1
                    for r, _ in self._client.allocatable_devices()
                    if is_gpu_resource(r, self._gpu_resources)
                )
            except SourceError as exc:
                if exc.reason != "unimplemented":
                    raise
                self._allocatable_served = False  # older kubelets, or its feature gate off
                log.info("podresources: GetAllocatableResources not served; List only")
        latest = Assignments(devices, allocatable, self._clock(), tuple(claims), cdi)
        self._latest = latest
        return latest

    def _log_problems(self, cdi: CdiIndex) -> None:
        """A spec problem is counted and logged when it appears, and said once more when it is
        gone: one line per episode, not per poll nor once for the life of the process (before
        issue 41 a spec fixed and broken again was never said again, and nothing counted)."""
        now = {(p.path, p.reason): p.kind for p in cdi.problems}
        for (path, reason), kind in now.items():
            if (path, reason) not in self._problems:
                self._rejected[kind] = self._rejected.get(kind, 0) + 1
                log.warning("CDI spec %s: %s", path, reason)
        for path, _reason in self._problems.keys() - now.keys():
            if not any(p == path for p, _ in now):
                log.info("CDI spec %s: no longer refused", path)
        self._problems = now

    def cdi_rejections(self) -> tuple[tuple[str, int], ...]:
        """Spec files (or directories) refused so far, per problem kind (cdi.PROBLEM_KINDS)."""
        return tuple(sorted(self._rejected.items()))

    def assignments(self) -> tuple[DeviceAssignment, ...]:
        latest = self.latest()
        return latest.devices if latest is not None else ()

    def latest(self) -> Assignments | None:
        """The last List, None before the first or once it is older than the TTL."""
        latest = self._latest
        if latest is None or self._clock() - latest.at > self._ttl_s:
            return None
        return latest

    def statuses(self) -> list[SourceStatus]:
        status = self._status.get()
        return [status] if status is not None else []

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._worker.stop()
        self._client.close()

    def _run(self, stop: threading.Event) -> None:
        backoff = Backoff(max_s=self._interval_s)
        while not stop.is_set():
            started = self._clock()
            try:
                got = self.poll_once()
            except Exception as exc:
                if not isinstance(exc, SourceError):
                    log.exception("podresources poll failed unexpectedly")
                self._status.set(failure_status(SOURCE, exc, self._clock() - started))
                delay = backoff.next_delay()
            else:
                gpus = sum(
                    1 for d in got.devices if is_gpu_resource(d.resource, self._gpu_resources)
                )
                detail = f"{gpus} GPU device assignments"
                if got.claims:
                    detail += f", {len(got.claims)} DRA claim devices, {got.cdi.specs} CDI specs"
                if got.allocatable_gpus is not None:
                    detail += f", {got.allocatable_gpus} allocatable GPU devices"
                took = self._clock() - started
                self._status.set(SourceStatus(SOURCE, True, detail=detail, duration_s=took))
                backoff.reset()
                delay = self._interval_s
            stop.wait(max(0.0, delay - (self._clock() - started)))
