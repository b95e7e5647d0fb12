from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.host.cgroupfs.classify import classify_cgroup, classify_task, parse_cgroup_path
from exporter.host.cgroupfs.ns import to_host_file, to_host_path
from exporter.model.identity import KERNEL, SYSTEM, ContainerRef
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.paths import FIXTURES

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
    tasks = ProcfsSource(FIXTURES / "proc").tasks()
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


# -- paths read from inside a private cgroup namespace (a non-privileged pod on cgroup v2) -------
#
# The kernel shows /proc/<pid>/cgroup relative to the reader's cgroup namespace root, so the
# agent in its own pod sees the ancestors it shares with a process as "..".

AGENT_UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
AGENT_US = AGENT_UID.replace("-", "_")
AGENT_CID = "cd" * 32
PAUSE_CID = "ef" * 32
# the agent container's cgroup (its namespace root), systemd and cgroupfs drivers
AGENT_SYSTEMD = (
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{AGENT_US}.slice/"
    f"cri-containerd-{AGENT_CID}.scope"
)
AGENT_CGROUPFS = f"/kubepods/burstable/pod{AGENT_UID}/{AGENT_CID}"


def _kernel_view(path: str, namespace_root: str) -> str:
    """What the kernel shows a reader in a namespace rooted at namespace_root (cgroup_path_ns)."""
    rel = posixpath.relpath(path, namespace_root)
    return "/" if rel == "." else "/" + rel


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        # the reader's namespace root is a host cgroup two levels down (e.g. a docker container)
        (
            f"/../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/"
            f"cri-containerd-{CID}.scope",
            ContainerRef(CID, UID, "containerd", "burstable"),
        ),
        # the agent's own namespace (AGENT_SYSTEMD): another pod, in another QoS class
        (
            f"/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{US}.slice/crio-{CID}.scope",
            ContainerRef(CID, UID, "cri-o", "besteffort"),
        ),
        # ... a guaranteed pod, whose slice sits directly under kubepods.slice
        (
            f"/../../../kubepods-pod{US}.slice/cri-containerd-{CID}.scope",
            ContainerRef(CID, UID, "containerd", "guaranteed"),
        ),
        # ... a pod of the same QoS class: the pod slice's name still says it
        (
            f"/../../kubepods-burstable-pod{US}.slice/cri-containerd-{CID}.scope",
            ContainerRef(CID, UID, "containerd", "burstable"),
        ),
        # cgroupfs driver, another QoS class
        (
            f"/../../../besteffort/pod{UID}/{CID}",
            ContainerRef(CID, UID, "", "besteffort"),
        ),
        # host processes and the root cgroup
        ("/../../../../system.slice/containerd.service", None),
        ("/../../../..", None),
    ],
)
def test_paths_seen_from_a_private_cgroup_namespace(
    seen: str, expected: ContainerRef | None
) -> None:
    """The ".." segments carry no names; where the rest still names the pod and container, the
    parser finds them without knowing the namespace root."""
    assert parse_cgroup_path(seen) == expected
    assert classify_cgroup(f"0::{seen}\n") == (expected or SYSTEM)


@pytest.mark.parametrize(
    ("agent_root", "absolute", "expected"),
    [
        # the agent's own processes: the kernel shows "/"
        (
            AGENT_SYSTEMD,
            AGENT_SYSTEMD,
            ContainerRef(AGENT_CID, AGENT_UID, "containerd", "burstable"),
        ),
        # the pause container of the agent's own pod: "/../cri-containerd-<id>.scope"
        (
            AGENT_SYSTEMD,
            AGENT_SYSTEMD.rsplit("/", 1)[0] + f"/cri-containerd-{PAUSE_CID}.scope",
            ContainerRef(PAUSE_CID, AGENT_UID, "containerd", "burstable"),
        ),
        # cgroupfs driver, a pod of the agent's QoS class: "/../../pod<uid>/<id>" hides the
        # burstable/ directory the QoS class is read from
        (
            AGENT_CGROUPFS,
            f"/kubepods/burstable/pod{UID}/{CID}",
            ContainerRef(CID, UID, "", "burstable"),
        ),
        (AGENT_CGROUPFS, "/system.slice/kubelet.service", None),
        (AGENT_CGROUPFS, "/", None),
    ],
)
def test_paths_that_need_the_namespace_root(
    agent_root: str, absolute: str, expected: ContainerRef | None
) -> None:
    """Where the hidden ancestors hold the pod or QoS, the parser alone gets it wrong; joined
    onto the namespace root's host path (exporter.host.cgroupfs.ns) the path is whole again."""
    seen = _kernel_view(absolute, agent_root)
    if expected is not None:
        assert parse_cgroup_path(seen) != expected, f"{seen} does not need the root"
    assert to_host_path(seen, agent_root) == absolute
    assert parse_cgroup_path(to_host_path(seen, agent_root)) == expected
    text = f"0::{seen}\n"
    assert classify_cgroup(to_host_file(text, agent_root)) == (expected or SYSTEM)


def test_only_the_v2_line_of_a_cgroup_file_is_rewritten() -> None:
    text = "12:pids:/\n1:name=systemd:/../x\n0::/../../other.slice/a.scope\n"
    assert to_host_file(text, "/one/two/three") == (
        "12:pids:/\n1:name=systemd:/../x\n0::/one/other.slice/a.scope\n"
    )
    assert to_host_file(text, "/") is text


def test_host_namespace_paths_are_unchanged() -> None:
    for path in ("/", AGENT_SYSTEMD, "/../../x", ""):
        assert to_host_path(path, "/") == path


segments = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.@:", min_size=1, max_size=12).filter(
        lambda s: s not in {".", ".."}
    ),
    max_size=7,
)


@given(path=segments, root=segments)
def test_resolving_the_kernel_view_gives_the_host_path_back(
    path: list[str], root: list[str]
) -> None:
    absolute = "/" + "/".join(path)
    namespace_root = "/" + "/".join(root)
    assert to_host_path(_kernel_view(absolute, namespace_root), namespace_root) == absolute


@given(seen=st.text(max_size=80), root=segments)
def test_resolution_never_leaves_the_hierarchy(seen: str, root: list[str]) -> None:
    resolved = to_host_path("/" + seen, "/" + "/".join(root))
    assert resolved.startswith("/") and not resolved.startswith("//")
    assert ".." not in resolved.split("/")
