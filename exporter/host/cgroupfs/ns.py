"""cgroup paths as a process in a private cgroup namespace reads them, turned into host paths.

The kernel shows the paths in /proc/<pid>/cgroup relative to the *reader's* cgroup namespace
root. containerd and CRI-O give every non-privileged container its own cgroup namespace on
cgroup v2, so the agent, reading the host's /proc through a hostPath mount, sees
"/../../kubepods-burstable.slice/..." for another pod, "/../cri-containerd-<id>.scope" for a
container of its own pod and "/" for itself: the ancestors the paths share with the agent's own
cgroup are hidden. Joining the paths onto the host path of the namespace root restores them.

That host path is found without privileges: the container's own cgroup2 mount (the runtime
mounts /sys/fs/cgroup inside the namespace) has the namespace root as its root directory, whose
inode number is that cgroup's id; the host's cgroup2 mount (--path.cgroupfs) is walked for the
directory with the same inode number.
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from pathlib import Path

from exporter.host.cgroupfs.ids import CgroupIdIndex, find_v2_root

log = logging.getLogger(__name__)

HOST_ROOT = "/"
OWN_CGROUPFS = Path("/sys/fs/cgroup")  # where the runtime mounts the container's own cgroupfs


def to_host_path(path: str, namespace_root: str) -> str:
    """A cgroup path read inside a namespace rooted at namespace_root, as the host sees it."""
    if namespace_root == HOST_ROOT or not path.startswith("/"):
        return path
    joined = posixpath.normpath(f"{namespace_root}/{path}")
    return "/" + joined.lstrip("/")  # normpath keeps a leading "//"; ".." stops at "/"


def to_host_file(text: str, namespace_root: str) -> str:
    """/proc/<pid>/cgroup content with its cgroup v2 ("0::") path made a host path.

    Only the v2 line: runtimes use cgroup namespaces on cgroup v2 hosts only, and each v1
    hierarchy would have a namespace root of its own.
    """
    if namespace_root == HOST_ROOT or "0::/" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("0::"):
            lines[i] = "0::" + to_host_path(line[3:], namespace_root)
    return "\n".join(lines)


def namespace_root(host_cgroupfs: Path, own_cgroupfs: Path = OWN_CGROUPFS) -> str:
    """Host path of this process's cgroup namespace root; "/" for the host's own namespace or
    when it cannot be told (then paths keep their "/.." form, which the classifier still
    reads, minus the hidden ancestors)."""
    host = find_v2_root(host_cgroupfs)
    own = find_v2_root(own_cgroupfs)
    if host is None or own is None:
        return HOST_ROOT
    try:
        host_stat, own_stat = os.stat(host), os.stat(own)
    except OSError:
        return HOST_ROOT
    if own_stat.st_dev != host_stat.st_dev:
        # not the same cgroup2 hierarchy (e.g. --path.cgroupfs is a copy of a host's tree)
        return HOST_ROOT
    if own_stat.st_ino == host_stat.st_ino:
        return HOST_ROOT
    index = CgroupIdIndex(host)
    index.walk()
    found = index.path(own_stat.st_ino, seen_at=time.monotonic())
    if found is None:
        log.warning(
            "this process is in a private cgroup namespace whose root (cgroup id %d) is not "
            "under %s: cgroup paths from /proc stay relative to it",
            own_stat.st_ino,
            host,
        )
        return HOST_ROOT
    log.info("private cgroup namespace rooted at %s: /proc cgroup paths read relative to it", found)
    return found
