from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.procfs import ProcfsSource
from exporter.workloads.cgroup import (
    KERNEL,
    SYSTEM,
    ContainerRef,
    classify_cgroup,
    classify_task,
    parse_cgroup_path,
)

UID = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"
US = UID.replace("-", "_")
CID = "ab" * 32


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # systemd driver
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/cri-containerd-{CID}.scope",
            ContainerRef(CID, UID, "containerd", "burstable"),
        ),
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{US}.slice/crio-{CID}.scope",
            ContainerRef(CID, UID, "cri-o", "besteffort"),
        ),
        (
            f"/kubepods.slice/kubepods-pod{US}.slice/docker-{CID}.scope",
            ContainerRef(CID, UID, "docker", "guaranteed"),
        ),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/crio-conmon-{CID}.scope",
            ContainerRef(CID, UID, "cri-o", "burstable"),
        ),
        # cgroupfs driver
        (f"/kubepods/burstable/pod{UID}/{CID}", ContainerRef(CID, UID, "", "burstable")),
        (f"/kubepods/besteffort/pod{UID}/{CID}", ContainerRef(CID, UID, "", "besteffort")),
        (f"/kubepods/pod{UID}/crio-{CID}", ContainerRef(CID, UID, "cri-o", "guaranteed")),
        # static pod (32 hex digits), kubelet --cgroup-root / kind node nesting, pod-level cgroup
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{'0f' * 16}.slice/"
            f"cri-containerd-{CID}.scope",
            ContainerRef(CID, "0f" * 16, "containerd", "burstable"),
        ),
        (
            f"/system.slice/docker-{'cd' * 32}.scope/kubelet.slice/kubelet-kubepods.slice/"
            "kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{US}.slice/cri-containerd-{CID}.scope",
            ContainerRef(CID, UID, "containerd", "besteffort"),
        ),
        (f"/kubepods/burstable/pod{UID}", ContainerRef("", UID, "", "burstable")),
        # containers outside Kubernetes
        (f"/system.slice/docker-{CID}.scope", ContainerRef(CID, "", "docker")),
        (f"/docker/{CID}", ContainerRef(CID, "", "docker")),
        (f"/machine.slice/libpod-{CID}.scope", ContainerRef(CID, "", "podman")),
        # host cgroups
        ("/init.scope", None),
        ("/", None),
        ("/system.slice/containerd.service", None),
        (f"/user.slice/{CID}", None),  # a bare hex directory outside /docker/ is not a container
    ],
)
def test_parse_cgroup_path(path: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup_path(path) == expected


def test_cgroup_v1_file_uses_the_line_that_names_a_container() -> None:
    path = f"/kubepods/burstable/pod{UID}/{CID}"
    text = f"12:pids:{path}\n1:name=systemd:{path}\n0::/\n"
    assert classify_cgroup(text) == ContainerRef(CID, UID, "", "burstable")


def test_kernel_threads_and_host_processes() -> None:
    assert classify_task("0::/\n", kernel_thread=True) is KERNEL
    assert classify_task("0::/init.scope\n", kernel_thread=False) is SYSTEM


def test_fixture_tree_covers_every_runtime_driver_and_qos() -> None:
    tasks = ProcfsSource(Path(__file__).parent / "fixtures" / "proc").tasks()
    refs = {classify_task(t.cgroup, t.kernel_thread) for t in tasks}
    assert {r.runtime for r in refs if r.pod_uid} == {"containerd", "cri-o", "docker", ""}
    assert {r.qos for r in refs if r.pod_uid} == {"guaranteed", "burstable", "besteffort"}
    assert SYSTEM in refs and KERNEL in refs
    assert ContainerRef("9a" * 32, "", "docker") in refs


HEX = "0123456789abcdef"
uids = st.text(HEX, min_size=32, max_size=32).map(
    lambda h: f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
)
ids = st.text(HEX, min_size=64, max_size=64)


@given(
    uid=uids,
    cid=ids,
    qos=st.sampled_from(["guaranteed", "burstable", "besteffort"]),
    runtime=st.sampled_from(["cri-containerd", "crio", "docker"]),
    systemd=st.booleans(),
)
def test_round_trip_of_generated_layouts(
    uid: str, cid: str, qos: str, runtime: str, systemd: bool
) -> None:
    if systemd:
        qos_part = "" if qos == "guaranteed" else f"kubepods-{qos}.slice/"
        pod = f"kubepods-{'' if qos == 'guaranteed' else qos + '-'}pod{uid.replace('-', '_')}.slice"
        path = f"/kubepods.slice/{qos_part}{pod}/{runtime}-{cid}.scope"
    else:
        qos_part = "" if qos == "guaranteed" else f"{qos}/"
        prefix = "crio-" if runtime == "crio" else ""
        path = f"/kubepods/{qos_part}pod{uid}/{prefix}{cid}"
    ref = parse_cgroup_path(path)
    assert ref is not None
    assert (ref.container_id, ref.pod_uid, ref.qos) == (cid, uid, qos)


@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    ref = classify_cgroup(text)
    assert isinstance(ref, ContainerRef)
