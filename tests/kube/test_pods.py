"""Pod objects -> metadata, the store's expiry rules, and names as the monitor asks for them."""

from __future__ import annotations

import json

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.kube.kubelet import parse_pod_list
from exporter.kube.pods import KubeNames, PodMeta, PodStore, parse_pod, runtime_container_id
from exporter.model.identity import SYSTEM, ContainerRef
from tests.support.kubefakes import Ctr, pod_object
from tests.support.paths import FIXTURES

A = "a" * 64
B = "b" * 64
C = "c" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_runtime_prefixes_are_stripped() -> None:
    assert runtime_container_id(f"containerd://{A}") == A
    assert runtime_container_id(f"cri-o://{A}") == A
    assert runtime_container_id(f"docker://{A.upper()}") == A
    assert runtime_container_id(A) == A
    assert runtime_container_id("") == ""


def test_parse_pod_takes_init_ephemeral_and_restarted_containers() -> None:
    obj = pod_object(
        name="web-0",
        namespace="shop",
        uid="5F1C3E2A-8B4D-4C6E-9F0A-1B2C3D4E5F60",
        containers=[Ctr("nginx", f"containerd://{A}", previous_id=f"containerd://{C}")],
        init_containers=[Ctr("migrate", f"containerd://{B}", terminated=True)],
        labels={"app": "web", "team": "payments", "pod-template-hash": "7d9c8b6f5"},
    )
    obj["status"]["ephemeralContainerStatuses"] = [
        {"name": "debugger", "containerID": "containerd://" + "d" * 64, "state": {}}
    ]
    pod = parse_pod(obj, label_keys=("team", "app", "missing"))
    assert pod is not None
    assert pod.uid == "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"  # as the cgroup path names it
    assert (pod.namespace, pod.name) == ("shop", "web-0")
    assert pod.labels == (("team", "payments"), ("app", "web"))  # allow-listed, in flag order
    by_id = {c.container_id: (c.name, c.current) for c in pod.containers}
    assert by_id == {
        A: ("nginx", True),
        C: ("nginx", False),  # the instance before the restart keeps its name
        B: ("migrate", True),
        "d" * 64: ("debugger", True),
    }
    assert pod.container_id("nginx") == A


def test_static_pod_mirror_is_known_by_its_cgroup_uid() -> None:
    obj = pod_object(
        name="kube-apiserver-node-1",
        namespace="kube-system",
        uid="6a1b7c2d-0000-4000-8000-00000000a001",  # the mirror pod's own uid
        containers=[Ctr("kube-apiserver", f"containerd://{A}")],
        annotations={"kubernetes.io/config.mirror": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},
    )
    pod = parse_pod(obj)
    assert pod is not None
    assert pod.uid == "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    assert pod.aliases == ("6a1b7c2d-0000-4000-8000-00000000a001",)


def test_garbage_objects_do_not_raise() -> None:
    junk: list[object] = [None, 3, "pod", [], {}, {"metadata": "x"}, {"metadata": {"uid": 7}}]
    for obj in junk:
        assert parse_pod(obj) is None
    pod = parse_pod(
        {"metadata": {"uid": "u1"}, "status": {"containerStatuses": [1, {"name": 2}, "x"]}}
    )
    assert pod == PodMeta("u1", "", "", (), ())


def test_checked_in_kubelet_payload() -> None:
    pods = parse_pod_list(json.loads((FIXTURES / "kube" / "kubelet-pods.json").read_text()))
    names = {(p.namespace, p.name) for p in pods}
    assert ("kube-system", "kube-apiserver-node-1") in names
    assert len(pods) == 8
    # every container process in the fixture /proc tree that belongs to a pod is named
    refs = [
        classify_cgroup(f.read_text())
        for f in sorted((FIXTURES / "proc").glob("*/cgroup"))
        if classify_cgroup(f.read_text()).pod_uid
    ]
    store = PodStore(ttl_s=60, deleted_retention_s=60)
    store.replace(pods)
    names_of = KubeNames(store)
    named = {ref.container_id: names_of.container(ref) for ref in refs}
    assert named["a1a1" * 16] == ("shop", "web-7d9c8b6f5-x2k4p", "nginx")
    assert named["c1c1" * 16] == ("batch", "indexer-28391-kq7zt", "indexer")  # cri-o (+ conmon)
    assert named["d1d1" * 16] == ("cache", "redis-0", "redis")  # docker
    assert named["f1f1" * 16] == ("frontend", "ui-5f7b9c6d4-qwert", "ui")  # cgroup v1 cgroupfs
    assert named["f3f3" * 16] == ("default", "sleeper", "wait-for-db")  # an init container
    assert named["e1e1" * 16] == ("kube-system", "kube-apiserver-node-1", "kube-apiserver")
    # the sandbox (pause) container is in no containerStatuses: pod known, container not
    assert named["a" * 64] == ("shop", "web-7d9c8b6f5-x2k4p", "")


def meta(uid: str, cid: str, name: str = "p") -> PodMeta:
    from exporter.kube.pods import ContainerMeta  # noqa: PLC0415

    return PodMeta(uid, "ns", name, (), (ContainerMeta(cid, "c", True),))


def test_deleted_pods_keep_their_names_for_the_retention_window() -> None:
    clock = Clock()
    store = PodStore(ttl_s=3600, deleted_retention_s=30, clock=clock)
    store.replace([meta("u1", A), meta("u2", B)])
    store.replace([meta("u2", B)])  # u1 deleted
    clock.now += 29
    assert A in store.index().containers
    assert store.counts() == (1, 1)
    clock.now += 2
    store.mark_synced()
    assert A not in store.index().containers
    assert B in store.index().containers
    assert store.counts() == (1, 0)


def test_stale_pods_go_after_the_ttl_when_the_source_stops_answering() -> None:
    clock = Clock()
    store = PodStore(ttl_s=100, deleted_retention_s=30, clock=clock)
    store.replace([meta("u1", A)])
    clock.now += 99
    assert A in store.index().containers
    clock.now += 2
    assert A not in store.index().containers
    store.replace([meta("u1", A)])  # the source is back
    assert A in store.index().containers


def test_watch_events_and_index_reuse() -> None:
    clock = Clock()
    store = PodStore(ttl_s=100, deleted_retention_s=30, clock=clock)
    store.upsert(meta("u1", A, "one"))
    first = store.index()
    assert store.index() is first  # unchanged store: the same immutable index
    store.upsert(meta("u1", A, "one"))  # the same object again: still no rebuild
    assert store.index() is first
    store.upsert(meta("u2", B, "two"))
    store.remove("u1")
    idx = store.index()
    assert idx is not first
    assert [p.uid for p in idx.present] == ["u2"]
    assert [p.uid for p in idx.deleted] == ["u1"]
    assert idx.containers[A][0].name == "one"  # still named while retained
    assert first.containers.keys() == {A}  # an index never changes after it was handed out


def test_a_recreated_statefulset_pod_is_found_by_name_as_the_new_one() -> None:
    store = PodStore(ttl_s=100, deleted_retention_s=30)
    store.replace([meta("old", A, "web-0")])
    store.replace([meta("new", B, "web-0")])
    assert store.index().by_name[("ns", "web-0")].uid == "new"


def test_names_for_the_monitor() -> None:
    asked: list[int] = []
    store = PodStore(ttl_s=100, deleted_retention_s=30)
    store.replace([meta("u1", A, "pod-a")])
    names = KubeNames(store, on_unknown=lambda: asked.append(1))
    assert names.container(SYSTEM) == ("", "", "system_processes")
    assert names.container(ContainerRef(container_id=A, pod_uid="u1")) == ("ns", "pod-a", "c")
    assert names.pod("u1") == ("ns", "pod-a")
    assert names.pod("nope") == ("", "")
    unknown = ContainerRef(container_id=B, pod_uid="u1")
    assert names.container(unknown) == ("ns", "pod-a", "")
    assert names.container(unknown) == ("ns", "pod-a", "")
    assert asked == [1]  # one early refresh per unknown container, not one per interval
    outside = ContainerRef(container_id=C)  # plain docker outside Kubernetes: never asks
    assert names.container(outside) == ("", "", "")
    assert asked == [1]
