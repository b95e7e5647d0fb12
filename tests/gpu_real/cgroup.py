"""Put the load process in a cgroup of its own, named like a podman container's scope so the
agent's cgroup classifier gives it a container_id the report can look for.

cgroup v2 (/sys/fs/cgroup with cgroup.controllers) or the hybrid layout (v2 at
/sys/fs/cgroup/unified beside v1 hierarchies): the same relative path is made in every writable
hierarchy. Where none can be made (no write access, gVisor) the load stays where it is and the
report says so."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "wattprobe-validate"


@dataclass
class Placement:
    container_id: str
    relative: str
    made: list[str] = field(default_factory=list)  # hierarchy roots the pid was moved into
    errors: list[str] = field(default_factory=list)

    @property
    def placed(self) -> bool:
        return bool(self.made)

    def as_dict(self) -> dict[str, object]:
        return {
            "placed": self.placed,
            "container_id": self.container_id,
            "path": self.relative,
            "hierarchies": self.made,
            "errors": self.errors,
        }


def hierarchies(root: Path = ROOT) -> list[Path]:
    """The cgroup hierarchy roots under root: itself on pure v2, else its mounted subfolders."""
    if (root / "cgroup.controllers").exists() or (root / "cgroup.procs").exists():
        return [root]
    if not root.is_dir():
        return []
    # v1 cpuset needs cpus and mems written before it takes a task; identity does not need it
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and p.name != "cpuset" and (p / "cgroup.procs").exists()
    )


def place(pid: int, root: Path = ROOT) -> Placement:
    container_id = secrets.token_hex(32)
    relative = f"{PARENT}/libpod-{container_id}.scope"
    placement = Placement(container_id, relative)
    found = hierarchies(root)
    if not found:
        placement.errors.append(f"no cgroup hierarchy under {root}")
    for hierarchy in found:
        path = hierarchy / relative
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "cgroup.procs").write_text(f"{pid}\n")
            placement.made.append(str(hierarchy))
        except OSError as err:
            placement.errors.append(f"{path}: {err}")
    return placement


def remove(placement: Placement) -> None:
    """rmdir the scopes (and the shared parent when empty); a cgroup with tasks left stays."""
    for hierarchy in placement.made:
        scope = Path(hierarchy) / placement.relative
        for path in (scope, scope.parent):
            with contextlib.suppress(OSError):
                path.rmdir()
