"""Real cgroup v2 directories laid out like kubelet's, for tests that move processes into them."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.realparts import missing, require_root


def cgroup2_mount() -> Path:
    """Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts)."""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    return missing("a cgroup v2 mount")


@contextlib.contextmanager
def kubepods_container(qos: str = "burstable") -> Iterator[tuple[Path, str, str]]:
    """A systemd-driver containerd container cgroup; yields (dir, pod_uid, container_id).

    Processes moved in are moved back to the root on exit, then the directories are removed.
    """
    require_root()
    root = cgroup2_mount()
    pod_uid = str(uuid.uuid4())
    container_id = uuid.uuid4().hex + uuid.uuid4().hex
    slices = [
        "kubepods.slice",
        f"kubepods-{qos}.slice",
        f"kubepods-{qos}-pod{pod_uid.replace('-', '_')}.slice",
        f"cri-containerd-{container_id}.scope",
    ]
    created: list[Path] = []
    path = root
    try:
        for name in slices:
            path = path / name
            if not path.exists():
                path.mkdir()
                created.append(path)
    except OSError as exc:
        for p in reversed(created):
            p.rmdir()
        missing(f"a writable cgroup v2 hierarchy ({exc})")
    try:
        yield path, pod_uid, container_id
    finally:
        for p in reversed(created):
            for _ in range(50):
                procs = (p / "cgroup.procs").read_text().split()
                for pid in procs:
                    with contextlib.suppress(OSError):
                        (root / "cgroup.procs").write_text(pid)
                try:
                    p.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def move_into(cgroup: Path, pid: int) -> None:
    (cgroup / "cgroup.procs").write_text(str(pid))
    assert f"{cgroup.name}" in Path(f"/proc/{pid}/cgroup").read_text()


def on_cpu_seconds(pid: int) -> float:
    """Time on CPU of all of a process's threads, from schedstat (ns)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9
