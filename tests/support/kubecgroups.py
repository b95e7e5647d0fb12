"""Real cgroup v2 directories laid out like kubelet's (systemd driver, containerd), for tests.

    <v2 root>/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
        cri-containerd-<64 hex>.scope

Needs root and a cgroup2 mount under /sys/fs/cgroup (unified or hybrid); through
tests.support.realparts
a missing part skips locally and fails in CI.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.host.cgroupfs.ids import find_v2_root
from tests.support.realparts import missing, require_root

CGROUPFS = Path("/sys/fs/cgroup")


def v2_root() -> Path:
    require_root()
    root = find_v2_root(CGROUPFS)
    if root is None:
        missing(f"a cgroup v2 mount at {CGROUPFS} or {CGROUPFS}/unified")
    return root


@dataclass(frozen=True)
class KubeContainer:
    root: Path  # the cgroup2 mount
    path: Path  # the container's scope directory
    pod_uid: str  # with dashes, as Kubernetes writes it
    container_id: str

    @property
    def cgroup_path(self) -> str:
        """As the "0::" line of /proc/<pid>/cgroup shows it."""
        return "/" + str(self.path.relative_to(self.root))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def join(self) -> None:
        """Move the calling process in (for subprocess preexec_fn: the child starts inside)."""
        self.add(os.getpid())

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]


@contextlib.contextmanager
def kube_container(qos: str = "burstable") -> Iterator[KubeContainer]:
    """Make the directories, yield, then kill what is left inside and remove what was made."""
    root = v2_root()
    pod_uid = str(uuid.uuid4())
    container_id = secrets.token_hex(32)
    kubepods = root / "kubepods.slice"
    qos_slice = kubepods / f"kubepods-{qos}.slice"
    pod = qos_slice / f"kubepods-{qos}-pod{pod_uid.replace('-', '_')}.slice"
    scope = pod / f"cri-containerd-{container_id}.scope"
    made: list[Path] = []
    try:
        for d in (kubepods, qos_slice, pod, scope):
            try:
                d.mkdir()
                made.append(d)
            except FileExistsError:
                pass
        yield KubeContainer(root, scope, pod_uid, container_id)
    finally:
        for d in reversed(made):
            empty_and_remove(d)


def empty_and_remove(d: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError, ValueError):
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.05)
