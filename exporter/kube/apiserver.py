"""Pod metadata from the apiserver: list + watch the pods bound to this node.

List (paged) gives the full set and a resourceVersion; a watch from there streams ADDED, MODIFIED,
DELETED and BOOKMARK events. A 410 Gone (on the request or as a watch ERROR event) means the
resourceVersion is too old: re-list. Any other failure: back off with jitter, then re-list, so the
store is never left half-updated. RBAC: list and watch on pods, cluster-wide.

KubeEdge edge nodes have no kubelet API; their edgecore serves the same list/watch on its
MetaServer (http://127.0.0.1:10550; https on the same port with its requireAuthorization gate),
which filters only on metadata.name and metadata.namespace. To a MetaServer (plain HTTP, or the
loopback port 10550) this source therefore sends no node field selector; it always filters on
spec.nodeName itself. Tokens go over https only. If an endpoint cannot watch at all (404, 405,
400, 501 on the watch request), the source falls back to listing every poll interval.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from exporter.kube.background import Backoff, StatusBox, Worker, failure_status
from exporter.kube.kubeapi import Gone, KubeClient, StreamIdle
from exporter.kube.pods import PodMeta, PodStore, node_name_of, parse_pod
from exporter.model.readings import SourceError, SourceStatus

log = logging.getLogger(__name__)

SOURCE = "apiserver"
PODS_PATH = "/api/v1/pods"
PAGE_SIZE = 500
# Answers to a watch request that mean "this endpoint cannot watch", not "try again".
_CANNOT_WATCH = frozenset({"not found", "http 400", "http 405", "http 501"})


METASERVER_PORT = 10550


def is_metaserver(client: KubeClient) -> bool:
    """KubeEdge's MetaServer: plain HTTP (no apiserver serves that any more), or its port on the
    node's loopback (https with edgecore's requireAuthorization)."""
    loopback = client.host in ("localhost", "::1") or client.host.startswith("127.")
    return not client.https or (loopback and client.port == METASERVER_PORT)


class ApiserverPodSource:
    """Keeps a PodStore in step with the apiserver's view of this node's pods."""

    name = SOURCE

    def __init__(
        self,
        client: KubeClient,
        store: PodStore,
        *,
        node_name: str,
        poll_interval_s: float,
        label_keys: Sequence[str] = (),
        watch_timeout_s: float = 300.0,
        idle_timeout_s: float = 90.0,
        page_size: int = PAGE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._store = store
        self._node = node_name
        self._poll_interval_s = poll_interval_s
        self._label_keys = tuple(label_keys)
        self._watch_timeout_s = watch_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._page_size = page_size
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not secrets)
        # MetaServer filters only on name and namespace: a node selector would hide every pod
        self._server_side_filter = not is_metaserver(client)
        self._status = StatusBox()
        self._worker = Worker(f"{SOURCE}-pods", self._run)
        self._cannot_watch = ""  # why this endpoint is polled instead of watched

    # -- one list, one watch ----------------------------------------------------------

    def list_once(self) -> tuple[list[PodMeta], str]:
        """All pods of this node (following pages) and the list's resourceVersion."""
        if not self._node:
            raise SourceError(
                "no node name", "set --kube.node-name (or NODE_NAME from the downward API)"
            )
        pods: list[PodMeta] = []
        resource_version = ""
        token = ""
        while True:
            query = {**self._selector(), "limit": str(self._page_size)}
            if token:
                query["continue"] = token
            body = self._client.get_json(PODS_PATH, query)
            items = body.get("items") if isinstance(body, dict) else None
            meta = body.get("metadata") if isinstance(body, dict) else None
            if not isinstance(items, list) or not isinstance(meta, dict):
                raise SourceError("bad response", f"{self._client.url}{PODS_PATH}: not a PodList")
            for item in items:
                if node_name_of(item) == self._node:
                    pod = parse_pod(item, self._label_keys)
                    if pod is not None:
                        pods.append(pod)
            resource_version = str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            if not token:
                return pods, resource_version

    def sync(self) -> tuple[int, str]:
        """List and replace the store's pods; (pods, resourceVersion)."""
        pods, resource_version = self.list_once()
        self._store.replace(pods)
        return len(pods), resource_version

    def watch(self, resource_version: str, stop: threading.Event) -> str:
        """Apply watch events until the server ends the stream, it goes idle, or stop is set;
        the last resourceVersion seen. Gone when the version expired, SourceError on faults."""
        timeout = self._watch_timeout_s * (1 + self._rng.random())  # spread re-watches out
        query = {
            **self._selector(),
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(timeout)),
        }
        started = self._clock()
        with self._client.stream_lines(PODS_PATH, query, self._idle_timeout_s) as lines:
            self._store.mark_synced()
            self._up(f"{self._store.counts()[0]} pods, watching", self._clock() - started)
            try:
                for line in lines:
                    resource_version = self._apply(line, resource_version)
                    if stop.is_set():
                        break
            except StreamIdle:
                # quiet, or the peer vanished without closing: watch again (which tells which);
                # not a sign of freshness, so the store is not marked synced
                return resource_version
        # the server ended the watch (its timeoutSeconds): the view was current until now
        self._store.mark_synced()
        return resource_version

    def _apply(self, line: bytes, resource_version: str) -> str:
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise SourceError("bad response", f"watch event is not JSON ({exc})") from None
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(kind, str) or not isinstance(obj, dict):
            raise SourceError("bad response", "watch event without type or object")
        if kind == "ERROR":
            message = str(obj.get("message") or obj.get("reason") or "")
            if obj.get("code") == 410:
                raise Gone(f"watch: {message}")
            raise SourceError("watch error", f"code {obj.get('code')}: {message}")
        metadata = obj.get("metadata")
        if isinstance(metadata, dict) and metadata.get("resourceVersion"):
            resource_version = str(metadata["resourceVersion"])
        if kind == "BOOKMARK":
            self._store.mark_synced()
            return resource_version
        pod = parse_pod(obj, self._label_keys)
        if pod is None:
            return resource_version
        if kind == "DELETED" or node_name_of(obj) != self._node:
            self._store.remove(pod.uid)
        elif kind in ("ADDED", "MODIFIED"):
            self._store.upsert(pod)
        return resource_version

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self._node}"} if self._server_side_filter else {}

    # -- the thread -------------------------------------------------------------------

    def status(self) -> SourceStatus | None:
        return self._status.get()

    def statuses(self) -> list[SourceStatus]:
        status = self._status.get()
        return [status] if status is not None else []

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._worker.stop_event.set()
        self._client.interrupt()
        self._worker.stop()

    def _up(self, detail: str, duration_s: float) -> None:
        self._status.set(SourceStatus(SOURCE, True, detail=detail, duration_s=duration_s))

    def _run(self, stop: threading.Event) -> None:
        backoff = Backoff(max_s=60.0, rng=self._rng)
        resource_version: str | None = None
        expired_in_a_row = 0
        while not stop.is_set():
            started = self._clock()
            delay = 0.0
            watching = False
            try:
                if resource_version is None:
                    n, resource_version = self.sync()
                    if self._cannot_watch:
                        self._up(f"{n} pods, polled: {self._cannot_watch}", self._since(started))
                        delay = self._poll_interval_s
                        resource_version = None
                if resource_version is not None:
                    watching = True
                    resource_version = self.watch(resource_version, stop)
                    expired_in_a_row = 0
                backoff.reset()
            except Gone as exc:
                log.info("apiserver: %s; re-listing", exc.detail)
                resource_version = None
                expired_in_a_row += 1
                if expired_in_a_row > 1:  # a server that keeps expiring us must not spin us
                    delay = backoff.next_delay()
            except Exception as exc:
                if watching and isinstance(exc, SourceError) and exc.reason in _CANNOT_WATCH:
                    self._cannot_watch = f"watch answered {exc.reason}"
                    log.warning("apiserver: cannot watch (%s); polling instead", exc.detail)
                else:
                    if not isinstance(exc, SourceError):
                        log.exception("apiserver source failed unexpectedly")
                    self._status.set(failure_status(SOURCE, exc, self._since(started)))
                    delay = backoff.next_delay()
                resource_version = None
            if delay:
                stop.wait(delay)

    def _since(self, started: float) -> float:
        return self._clock() - started
