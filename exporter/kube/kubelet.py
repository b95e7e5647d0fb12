"""Pod metadata from the kubelet: GET https://<node>:10250/pods, polled on an interval.

The kubelet answers with the pods it runs (static pods included), straight from the node, so it
keeps working while the apiserver is away. RBAC: get on nodes/pods (Kubernetes 1.33+) or
nodes/proxy; see docs/kubernetes.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from exporter.kube.background import Backoff, StatusBox, Worker, failure_status
from exporter.kube.kubeapi import KubeClient
from exporter.kube.pods import PodMeta, PodStore, parse_pod
from exporter.model.readings import SourceError, SourceStatus

log = logging.getLogger(__name__)

SOURCE = "kubelet"
MIN_REFRESH_GAP_S = 1.0  # early refreshes (a new container showed up) are at least this far apart


def parse_pod_list(body: object, label_keys: Sequence[str] = ()) -> list[PodMeta]:
    """A v1 PodList (decoded JSON) -> pods; SourceError when it is not one."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise SourceError("bad response", "not a PodList: no items array")
    pods = []
    for item in items:
        pod = parse_pod(item, label_keys)
        if pod is not None:
            pods.append(pod)
    return pods


class KubeletPodSource:
    """Polls the kubelet's /pods into a PodStore on its own thread."""

    name = SOURCE

    def __init__(
        self,
        client: KubeClient,
        store: PodStore,
        *,
        interval_s: float,
        label_keys: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._store = store
        self._interval_s = interval_s
        self._label_keys = tuple(label_keys)
        self._clock = clock
        self._status = StatusBox()
        self._wake = threading.Event()
        self._worker = Worker(f"{SOURCE}-pods", self._run)

    def poll_once(self) -> int:
        """Fetch /pods and replace the store's pods; the number of pods, or SourceError."""
        pods = parse_pod_list(self._client.get_json("/pods"), self._label_keys)
        self._store.replace(pods)
        return len(pods)

    def status(self) -> SourceStatus | None:
        return self._status.get()

    def statuses(self) -> list[SourceStatus]:
        status = self._status.get()
        return [status] if status is not None else []

    def request_refresh(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._worker.stop_event.set()
        self._wake.set()
        self._worker.stop()

    def _run(self, stop: threading.Event) -> None:
        backoff = Backoff(max_s=self._interval_s)
        while not stop.is_set():
            started = self._clock()
            self._wake.clear()  # a request arriving during this poll triggers the next one
            try:
                n = self.poll_once()
            except Exception as exc:
                if not isinstance(exc, SourceError):
                    log.exception("kubelet poll failed unexpectedly")
                self._status.set(failure_status(SOURCE, exc, self._clock() - started))
                delay = backoff.next_delay()
            else:
                took = self._clock() - started
                self._status.set(SourceStatus(SOURCE, True, detail=f"{n} pods", duration_s=took))
                backoff.reset()
                delay = self._interval_s
            if self._wake.wait(max(0.0, delay - (self._clock() - started))) and not stop.is_set():
                # an early refresh: keep a minimum gap so a burst of new containers costs one poll
                stop.wait(max(0.0, MIN_REFRESH_GAP_S - (self._clock() - started)))
