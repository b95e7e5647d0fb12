"""cgroup path -> container identity, for the container runtimes and cgroup drivers kubelet uses.

systemd driver (cgroup v1 or v2):
  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
      cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
  guaranteed pods sit directly under kubepods.slice: kubepods-pod<uid>.slice
cgroupfs driver:
  /kubepods/burstable/pod<uid>/<id>   (containerd, dockershim)   /kubepods/pod<uid>/crio-<id>
Static pods have 32-hex-digit UIDs without dashes. kubepods may sit below another root
(kubelet --cgroup-root, kind nodes), so the pod segment is searched anywhere in the path.
Processes outside any container are "system_processes"; kernel threads "kernel_processes".
"""

from __future__ import annotations

import re
from functools import lru_cache

from exporter.model.identity import KERNEL, SYSTEM, ContainerRef

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
# a pod segment: pod<uid> (cgroupfs) or <anything>-pod<uid>.slice (systemd)
_POD_SEGMENT = re.compile(rf"^(?:(.*)-)?pod({_UID})(?:\.slice)?$")
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(cri-containerd|crio-conmon|crio|docker|containerd|libpod)-)?([0-9a-f]{64})(?:\.scope)?$"
)
_QOS_NAMES = ("besteffort", "burstable")
_RUNTIMES = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "crio-conmon": "cri-o",
    "docker": "docker",
    "libpod": "podman",
}


def parse_cgroup_path(path: str) -> ContainerRef | None:
    """The container or pod a single cgroup path belongs to, or None for a host cgroup."""
    segments = [seg for seg in path.split("/") if seg]
    for i in range(len(segments) - 1, -1, -1):
        pod = _POD_SEGMENT.match(segments[i])
        if pod is not None:
            return _pod_container(segments, i, pod)
    # Not in a pod: a container of a plain runtime (docker, podman). A bare 64-hex directory
    # counts only under /docker/; elsewhere it is too weak a signal.
    for i, seg in enumerate(segments):
        m = _CONTAINER_SEGMENT.match(seg)
        if m and (m.group(1) or (i > 0 and segments[i - 1] == "docker")):
            return ContainerRef(container_id=m.group(2), runtime=_runtime(m.group(1), segments[:i]))
    return None


def _pod_container(segments: list[str], pod_index: int, pod: re.Match[str]) -> ContainerRef:
    uid = pod.group(2).replace("_", "-")
    qos = _qos(pod.group(1) or "", segments[:pod_index])
    for i in range(pod_index + 1, len(segments)):
        m = _CONTAINER_SEGMENT.match(segments[i])
        if m:
            runtime = _runtime(m.group(1), segments[:i])
            return ContainerRef(container_id=m.group(2), pod_uid=uid, runtime=runtime, qos=qos)
    return ContainerRef(pod_uid=uid, qos=qos)


def _qos(pod_prefix: str, parents: list[str]) -> str:
    # systemd: kubepods-burstable-pod<uid>.slice; cgroupfs: /kubepods/burstable/pod<uid>
    for name in _QOS_NAMES:
        if pod_prefix.endswith(name) or (
            parents and parents[-1].removesuffix(".slice").endswith(name)
        ):
            return name
    return "guaranteed"


def _runtime(prefix: str | None, parents: list[str]) -> str:
    if prefix:
        return _RUNTIMES[prefix]
    return "docker" if parents and parents[-1] == "docker" else ""


def cgroup_lines(text: str) -> list[str]:
    """Paths from /proc/<pid>/cgroup ("ID:controllers:path" lines) or a bare path."""
    paths = []
    for line in text.splitlines():
        if line.startswith("/"):
            paths.append(line)
        else:
            parts = line.split(":", 2)
            if len(parts) == 3:
                paths.append(parts[2])
    return paths


# All tasks of a container share one cgroup text, so a node has about one live text per container
# and sandbox (a few hundred at 110-250 pods). Live texts are looked up every interval and stay
# cached; under pod churn the texts of gone containers age out, so the cache stays under 0.5 MiB.
@lru_cache(maxsize=1024)
def classify_cgroup(text: str) -> ContainerRef:
    """The bucket of a non-kernel task from its cgroup file content (v1, v2 or hybrid).

    On v1 and hybrid hosts each controller has its own line; the first line that names a
    container wins, so a task is found whichever hierarchy the runtime placed it in.
    """
    for path in cgroup_lines(text):
        ref = parse_cgroup_path(path)
        if ref is not None:
            return ref
    return SYSTEM


def classify_task(cgroup: str, kernel_thread: bool) -> ContainerRef:
    return KERNEL if kernel_thread else classify_cgroup(cgroup)
