"""Pod metadata: what a pod object says about its containers, and a store the monitor reads.

A background source (kubelet poller, apiserver watcher) writes the store; the monitor thread
reads an immutable PodIndex from it and never waits on the network. Names of deleted pods stay
for the workload retention window, so a terminated container's last series keep their names
until the monitor drops them; when the source stops answering, the last known pods stay for the
metadata TTL and then go (series fall back to IDs).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.model.identity import ContainerRef

# Static pods: the kubelet names their cgroup after the config hash; the apiserver shows a mirror
# pod with its own uid and the hash in this annotation.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Volcano's vGPU scheduler writes the GPUs it gave each container here (its device plugin's
# IDs are placeholders the kubelet picks at random): containers in spec order separated by ";",
# each a list of "<uuid>,<type>,<memory MiB>,<cores %>:" (Project-HAMi/volcano-vgpu-device-plugin
# pkg/util: AssignedIDsAnnotations, EncodePodDevices)
VOLCANO_VGPU_ANNOTATION = "volcano.sh/vgpu-ids-new"
_MAX_ANNOTATION = 65536
_STATUS_LISTS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    container_id: str  # the runtime's id, "<runtime>://" prefix removed
    name: str
    current: bool  # False for the previous instance of a restarted container (lastState)


@dataclass(frozen=True, slots=True)
class PodMeta:
    uid: str  # as the pod's cgroup names it
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...]  # allow-listed labels only
    containers: tuple[ContainerMeta, ...]
    aliases: tuple[str, ...] = ()  # other uids of the same pod (a static pod's mirror uid)
    vgpus: tuple[tuple[str, tuple[str, ...]], ...] = ()  # Volcano vGPU: container -> GPU UUIDs

    def vgpu_uuids(self, container: str) -> tuple[str, ...] | None:
        """The GPUs Volcano's scheduler gave the named container; None when it says nothing."""
        for name, uuids in self.vgpus:
            if name == container:
                return uuids
        return None

    def container_id(self, name: str) -> str:
        """The id of the running instance of the named container, or ""."""
        for c in self.containers:
            if c.current and c.name == name:
                return c.container_id
        return ""


def runtime_container_id(text: str) -> str:
    """'containerd://<id>', 'cri-o://<id>', 'docker://<id>' -> '<id>' (lower case)."""
    _scheme, sep, rest = text.partition("://")
    return (rest if sep else text).strip().lower()


def _dict(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: object, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def _str(obj: object, key: str) -> str:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else ""


def parse_pod(obj: object, label_keys: Sequence[str] = ()) -> PodMeta | None:
    """A v1 Pod object (decoded JSON) -> PodMeta; None when it has no uid.

    Tolerates missing or mistyped fields (a half-written or foreign object must not raise).
    """
    meta = _dict(obj, "metadata")
    api_uid = _str(meta, "uid").lower()
    if not api_uid:
        return None
    mirror = _str(_dict(meta, "annotations"), MIRROR_ANNOTATION).lower()
    uid = mirror or api_uid
    labels = _dict(meta, "labels")
    kept = tuple((k, labels[k]) for k in label_keys if isinstance(labels.get(k), str))
    containers: list[ContainerMeta] = []
    status = _dict(obj, "status")
    for list_name in _STATUS_LISTS:
        for cs in _list(status, list_name):
            name = _str(cs, "name")
            current = runtime_container_id(_str(cs, "containerID"))
            if current:
                containers.append(ContainerMeta(current, name, True))
            previous = runtime_container_id(
                _str(_dict(_dict(cs, "lastState"), "terminated"), "containerID")
            )
            if previous and previous != current:
                containers.append(ContainerMeta(previous, name, False))
    return PodMeta(
        uid=uid,
        namespace=_str(meta, "namespace"),
        name=_str(meta, "name"),
        labels=kept,
        containers=tuple(containers),
        aliases=(api_uid,) if mirror and mirror != api_uid else (),
        vgpus=volcano_vgpus(
            _str(_dict(meta, "annotations"), VOLCANO_VGPU_ANNOTATION),
            [_str(c, "name") for c in _list(_dict(obj, "spec"), "containers")],
        ),
    )


def volcano_vgpus(text: str, containers: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Volcano's volcano.sh/vgpu-ids-new annotation -> (container, GPU UUIDs) in spec order;
    malformed parts are skipped (never raises)."""
    if not text or len(text) > _MAX_ANNOTATION:
        return ()
    out: list[tuple[str, tuple[str, ...]]] = []
    for name, part in zip(containers, text.split(";"), strict=False):
        uuids = tuple(
            dict.fromkeys(
                dev.split(",", 1)[0].strip()
                for dev in part.split(":")[:64]
                if "," in dev and dev.split(",", 1)[0].strip().startswith(("GPU-", "MIG-"))
            )
        )
        if name and uuids:
            out.append((name, uuids))
    return tuple(out)


def node_name_of(obj: object) -> str:
    return _str(_dict(obj, "spec"), "nodeName")


@dataclass(frozen=True)
class PodIndex:
    """Immutable lookup tables over the pods a store knows (present and recently deleted)."""

    containers: Mapping[str, tuple[PodMeta, str]] = field(default_factory=dict)
    pods: Mapping[str, PodMeta] = field(default_factory=dict)  # uid and aliases -> pod
    by_name: Mapping[tuple[str, str], PodMeta] = field(default_factory=dict)
    present: tuple[PodMeta, ...] = ()
    deleted: tuple[PodMeta, ...] = ()

    @classmethod
    def build(cls, present: Iterable[PodMeta], deleted: Iterable[PodMeta]) -> PodIndex:
        present, deleted = tuple(present), tuple(deleted)
        containers: dict[str, tuple[PodMeta, str]] = {}
        pods: dict[str, PodMeta] = {}
        by_name: dict[tuple[str, str], PodMeta] = {}
        # present pods last: they win where a deleted pod shares a name (StatefulSets reuse them)
        for pod in (*deleted, *present):
            for uid in (pod.uid, *pod.aliases):
                pods[uid] = pod
            by_name[(pod.namespace, pod.name)] = pod
            for c in pod.containers:
                containers[c.container_id] = (pod, c.name)
        return cls(containers, pods, by_name, present, deleted)


EMPTY_INDEX = PodIndex()


class PodStore:
    """Thread-safe pod metadata with expiry; writers are sources, the reader is the monitor.

    ttl_s: how long the last known pods stay once the source stops confirming them.
    deleted_retention_s: how long a deleted pod's names stay (set it to the workload retention).
    """

    def __init__(
        self,
        *,
        ttl_s: float,
        deleted_retention_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._deleted_retention_s = deleted_retention_s
        self._clock = clock
        self._lock = threading.Lock()
        self._present: dict[str, PodMeta] = {}
        self._deleted: OrderedDict[str, tuple[PodMeta, float]] = OrderedDict()  # by deletion time
        self._synced_at: float | None = None
        self._version = 0
        self._index = EMPTY_INDEX
        self._index_version = 0

    def replace(self, pods: Iterable[PodMeta]) -> None:
        """A full, fresh list of the node's pods (kubelet poll, apiserver list)."""
        fresh = {p.uid: p for p in pods}
        with self._lock:
            now = self._clock()
            for uid, old in self._present.items():
                if uid not in fresh:
                    self._mark_deleted(old, now)
            for uid in fresh:
                self._deleted.pop(uid, None)
            if fresh != self._present:
                self._present = fresh
                self._version += 1
            self._synced_at = now

    def upsert(self, pod: PodMeta) -> None:
        """An added or modified pod (watch event)."""
        with self._lock:
            self._synced_at = self._clock()
            self._deleted.pop(pod.uid, None)
            if self._present.get(pod.uid) != pod:
                self._present[pod.uid] = pod
                self._version += 1

    def remove(self, uid: str) -> None:
        """A deleted pod (watch event): its names stay for the retention window."""
        with self._lock:
            now = self._synced_at = self._clock()
            pod = self._present.pop(uid, None)
            if pod is not None:
                self._mark_deleted(pod, now)

    def mark_synced(self) -> None:
        """The source confirmed its view is current (a watch is open and healthy)."""
        with self._lock:
            self._synced_at = self._clock()

    def index(self) -> PodIndex:
        with self._lock:
            self._expire(self._clock())
            if self._index_version != self._version:
                self._index = PodIndex.build(
                    self._present.values(), (p for p, _ in self._deleted.values())
                )
                self._index_version = self._version
            return self._index

    def counts(self) -> tuple[int, int]:
        """(present pods, deleted pods still remembered)"""
        with self._lock:
            return len(self._present), len(self._deleted)

    def _mark_deleted(self, pod: PodMeta, now: float) -> None:
        self._deleted.pop(pod.uid, None)
        self._deleted[pod.uid] = (pod, now)
        self._version += 1

    def _expire(self, now: float) -> None:
        while self._deleted:
            uid, (_pod, at) = next(iter(self._deleted.items()))
            if now - at <= self._deleted_retention_s:
                break
            del self._deleted[uid]
            self._version += 1
        stale = self._synced_at is not None and now - self._synced_at > self._ttl_s
        if stale and self._present:
            self._present = {}
            self._version += 1


class KubeNames:
    """WorkloadNames from a PodStore: container id -> names, pod uid -> names.

    A container in a pod cgroup that the store does not know yet asks the source for an early
    refresh, once per container id, so a new container is named within about one interval.
    """

    def __init__(
        self,
        store: PodStore,
        on_unknown: Callable[[], None] | None = None,
        remember: int = 4096,
    ) -> None:
        self._store = store
        self._on_unknown = on_unknown
        self._asked: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def container(self, ref: ContainerRef) -> tuple[str, str, str]:
        if ref.pseudo:
            return "", "", ref.pseudo
        index = self._store.index()
        hit = index.containers.get(ref.container_id) if ref.container_id else None
        if hit is not None:
            pod, name = hit
            return pod.namespace, pod.name, name
        if ref.pod_uid and ref.container_id:
            self._unknown(ref.container_id)
        known = index.pods.get(ref.pod_uid) if ref.pod_uid else None
        if known is not None:
            return known.namespace, known.name, ""
        return "", "", ""

    def pod(self, pod_uid: str) -> tuple[str, str]:
        known = self._store.index().pods.get(pod_uid)
        return (known.namespace, known.name) if known is not None else ("", "")

    def _unknown(self, container_id: str) -> None:
        # sandbox ("pause") containers are never in containerStatuses: ask once per id, not forever
        if self._on_unknown is None or container_id in self._asked:
            return
        self._asked[container_id] = None
        while len(self._asked) > self._remember:
            self._asked.popitem(last=False)
        self._on_unknown()
