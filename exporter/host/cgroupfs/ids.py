"""cgroup v2 id -> cgroup path, for the ids that eBPF's bpf_get_current_cgroup_id returns.

A cgroup v2 id is the inode number of the cgroup's directory on the cgroup2 mount. The index walks
that mount once, caches id -> path, and walks again when an unknown id turns up (at most once per
refresh window). Ids are never reused, so an id still unknown after a walk that started after it
was seen is remembered as gone; the paths of cgroups removed since an earlier walk are kept (a
bounded number), because the last work of a terminated container is read after its cgroup is gone.

Paths are relative to the v2 root, as the "0::" line of /proc/<pid>/cgroup shows them, so
exporter.host.cgroupfs.classify.classify_cgroup reads them directly.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_DEPTH = 32  # kubepods trees are 4-6 deep; a deeper tree is not walked further
MAX_DIRS = 200_000  # a walk stops here rather than take unbounded time
MAX_GONE = 65536  # ids remembered as removed, with or without their path (oldest forgotten first)


def find_v2_root(cgroupfs: Path) -> Path | None:
    """The cgroup2 mount under cgroupfs: cgroupfs itself (unified) or cgroupfs/unified (hybrid)."""
    for candidate in (cgroupfs, cgroupfs / "unified"):
        # cgroup.controllers exists only on cgroup2, even when no controller is enabled
        if (candidate / "cgroup.controllers").is_file():
            return candidate
    return None


class CgroupIdIndex:
    """Maps cgroup v2 ids to paths like "/kubepods.slice/.../cri-containerd-<id>.scope"."""

    def __init__(
        self,
        root: Path,
        *,
        min_walk_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self._min_walk_interval_s = min_walk_interval_s
        self._clock = clock
        self._paths: dict[int, str] = {}  # as of the last walk
        self._gone: dict[int, str | None] = {}  # removed: last known path (None if never seen)
        self._last_walk_start = -float("inf")
        self.walks = 0

    def path(self, cgroup_id: int, seen_at: float) -> str | None:
        """The cgroup's path, or None if it is unknown.

        seen_at is when the id was read (on this index's clock). An id that a walk begun after
        seen_at did not find belongs to a removed cgroup and is remembered as gone.
        """
        found = self._paths.get(cgroup_id)
        if found is not None:
            return found
        if cgroup_id in self._gone:
            return self._gone[cgroup_id]
        if seen_at > self._last_walk_start and self._walk_allowed():
            self.walk()
            found = self._paths.get(cgroup_id)
            if found is not None:
                return found
        if seen_at < self._last_walk_start:
            self._forget(cgroup_id, None)
        return None

    def _forget(self, cgroup_id: int, path: str | None) -> None:
        self._gone[cgroup_id] = path
        while len(self._gone) > MAX_GONE:
            del self._gone[next(iter(self._gone))]

    def _walk_allowed(self) -> bool:
        return self._clock() - self._last_walk_start >= self._min_walk_interval_s

    def learn(self, cgroup_id: int, path: str) -> None:
        """A path the kernel reported when the cgroup was made (eBPF's cgroup_mkdir probe):
        known even if the cgroup is removed before the next walk."""
        if cgroup_id in self._gone or cgroup_id not in self._paths:
            if cgroup_id in self._gone:
                del self._gone[cgroup_id]
            # a later walk that misses it files it under gone with this path
            self._paths[cgroup_id] = path

    def gone(self, cgroup_id: int) -> bool:
        """True if the cgroup is known to have been removed."""
        return cgroup_id in self._gone

    def walk(self) -> None:
        """Rebuild the whole map from the mount (removed cgroups drop out of it)."""
        start = self._clock()
        self._last_walk_start = start
        self.walks += 1
        paths: dict[int, str] = {}
        try:
            paths[os.stat(self.root).st_ino] = "/"
        except OSError as exc:
            log.warning("cannot stat cgroup2 root %s: %s", self.root, exc)
            return
        stack: list[tuple[str, str, int]] = [(str(self.root), "", 0)]
        dirs = 0
        while stack and dirs < MAX_DIRS:
            fs_path, rel, depth = stack.pop()
            try:
                entries = list(os.scandir(fs_path))
            except OSError:
                continue  # removed while walking
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    # readdir's d_ino on kernfs is the node id, i.e. the cgroup id
                    ino = entry.inode()
                except OSError:
                    continue
                child = f"{rel}/{entry.name}"
                paths[ino] = child
                dirs += 1
                if depth + 1 < MAX_DEPTH:
                    stack.append((entry.path, child, depth + 1))
        if dirs >= MAX_DIRS:
            log.warning("cgroup walk of %s stopped after %d directories", self.root, dirs)
        for cgroup_id, old in self._paths.items():
            if cgroup_id not in paths:
                self._forget(cgroup_id, old)
        self._paths = paths
        log.debug("walked %s: %d cgroups in %.3fs", self.root, len(paths), self._clock() - start)
