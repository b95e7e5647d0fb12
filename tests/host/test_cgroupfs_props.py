"""Properties of cgroup identity: every runtime, driver and QoS layout round-trips; any text is
classified without an exception."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from exporter.host.cgroupfs.classify import (
    cgroup_lines,
    classify_cgroup,
    classify_task,
    parse_cgroup_path,
)
from exporter.model.identity import SYSTEM, ContainerRef
from tests.support.props import PROPERTY

hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
pod_uids = st.one_of(
    st.uuids(version=4).map(str),
    st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),  # static pods: config hash
)
qos_classes = st.sampled_from(["guaranteed", "burstable", "besteffort"])
# (systemd scope prefix or None for a bare id, runtime reported)
SYSTEMD_RUNTIMES: list[tuple[str | None, str]] = [
    ("cri-containerd", "containerd"),
    ("crio", "cri-o"),
    ("crio-conmon", "cri-o"),
    ("docker", "docker"),
]
CGROUPFS_RUNTIMES: list[tuple[str | None, str]] = [
    (None, ""),
    ("crio", "cri-o"),
    ("docker", "docker"),
]
# where kubelet's hierarchy may sit: the root, or under another slice (kind, --cgroup-root)
ROOTS_SYSTEMD = ["", "/kubelet.slice/kubelet-kubepods.slice"]
ROOTS_CGROUPFS = ["", "/kubelet", "/docker/" + "e" * 64]


def systemd_path(root: str, uid: str, qos: str, prefix: str | None, cid: str) -> str:
    kubepods = "kubelet-kubepods" if root else "kubepods"
    slug = uid.replace("-", "_")
    if qos == "guaranteed":
        base = f"{root}/{kubepods}.slice/{kubepods}-pod{slug}.slice"
    else:
        base = f"{root}/{kubepods}.slice/{kubepods}-{qos}.slice/{kubepods}-{qos}-pod{slug}.slice"
    return f"{base}/{prefix}-{cid}.scope"


def cgroupfs_path(root: str, uid: str, qos: str, prefix: str | None, cid: str) -> str:
    base = f"{root}/kubepods" + ("" if qos == "guaranteed" else f"/{qos}") + f"/pod{uid}"
    return f"{base}/{cid}" if prefix is None else f"{base}/{prefix}-{cid}"


def as_proc_file(path: str, layout: str) -> str:
    """The path as a /proc/<pid>/cgroup file of a v2, v1 or hybrid host."""
    if layout == "v2":
        return f"0::{path}\n"
    v1 = "".join(
        f"{i}:{c}:{path}\n"
        for i, c in enumerate(["cpu,cpuacct", "memory", "pids", "name=systemd"], start=1)
    )
    return v1 if layout == "v1" else v1 + "0::/\n"


@PROPERTY
@given(
    uid=pod_uids,
    cid=hex64,
    qos=qos_classes,
    systemd=st.booleans(),
    runtime=st.integers(min_value=0, max_value=10),
    root=st.integers(min_value=0, max_value=10),
    layout=st.sampled_from(["v2", "v1", "hybrid"]),
)
def test_kubelet_layouts_round_trip(
    *, uid: str, cid: str, qos: str, systemd: bool, runtime: int, root: int, layout: str
) -> None:
    prefix: str | None
    if systemd:
        prefix, name = SYSTEMD_RUNTIMES[runtime % len(SYSTEMD_RUNTIMES)]
        path = systemd_path(ROOTS_SYSTEMD[root % len(ROOTS_SYSTEMD)], uid, qos, prefix, cid)
    else:
        prefix, name = CGROUPFS_RUNTIMES[runtime % len(CGROUPFS_RUNTIMES)]
        path = cgroupfs_path(ROOTS_CGROUPFS[root % len(ROOTS_CGROUPFS)], uid, qos, prefix, cid)
    want = ContainerRef(container_id=cid, pod_uid=_dashed(uid), runtime=name, qos=qos, pseudo="")
    assert parse_cgroup_path(path) == want, path
    assert classify_cgroup(as_proc_file(path, layout)) == want
    assert classify_task(as_proc_file(path, layout), kernel_thread=False) == want


@PROPERTY
@given(uid=pod_uids, qos=qos_classes, systemd=st.booleans())
def test_pod_level_cgroup_has_no_container(uid: str, qos: str, systemd: bool) -> None:
    path = (
        systemd_path("", uid, qos, "x", "0").rsplit("/", 1)[0]
        if systemd
        else (cgroupfs_path("", uid, qos, None, "x").rsplit("/", 1)[0])
    )
    ref = parse_cgroup_path(path)
    assert ref == ContainerRef(pod_uid=_dashed(uid), qos=qos)


@PROPERTY
@given(cid=hex64, docker_root=st.booleans())
def test_plain_docker_containers(cid: str, docker_root: bool) -> None:
    path = f"/docker/{cid}" if docker_root else f"/system.slice/docker-{cid}.scope"
    assert parse_cgroup_path(path) == ContainerRef(container_id=cid, runtime="docker")


@PROPERTY
@given(st.text(max_size=300))
def test_any_text_is_classified(text: str) -> None:
    ref = classify_cgroup(text)
    assert isinstance(ref, ContainerRef)
    for path in cgroup_lines(text):
        found = parse_cgroup_path(path)
        assert found is None or isinstance(found, ContainerRef)
    if ref.container_id:
        assert len(ref.container_id) == 64
    if ref.pod_uid:
        uuid_or_hash = ref.pod_uid.replace("-", "")
        assert len(uuid_or_hash) == 32


@PROPERTY
@given(
    st.lists(
        st.sampled_from(
            ["kubepods", "kubepods.slice", "pod", "burstable", "docker", "..", "", "scope", "-"]
        )
        | st.text(alphabet="abcdef0123456789-_.:", max_size=70),
        max_size=8,
    )
)
def test_near_miss_paths_never_raise(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    ref = classify_cgroup(f"0::{path}\n")
    assert ref == SYSTEM or ref.container_id or ref.pod_uid


def _dashed(uid: str) -> str:
    if len(uid) == 32:
        return uid  # a static pod's hash has no dashes to restore
    return str(uuid.UUID(uid))
