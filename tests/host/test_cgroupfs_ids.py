"""cgroup v2 id -> path (exporter.host.cgroupfs.ids) on a directory tree in tmp_path, whose
inode numbers stand in for cgroup ids exactly as they do on cgroup2."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.cgroupfs.ids import CgroupIdIndex, find_v2_root

POD = "kubepods-burstable-pod0b5ec1a4_7d3e_4c55_9a8b_2f4d6e8a1c3b.slice"
CID = "a" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tree(root: Path) -> Path:
    scope = root / "kubepods.slice/kubepods-burstable.slice" / POD / f"cri-containerd-{CID}.scope"
    scope.mkdir(parents=True)
    (root / "system.slice/ssh.service").mkdir(parents=True)
    return scope


def test_ids_map_to_paths_that_classify_as_containers(tmp_path: Path) -> None:
    scope = tree(tmp_path)
    clock = Clock()
    index = CgroupIdIndex(tmp_path, clock=clock)
    path = index.path(os.stat(scope).st_ino, clock())
    assert path == f"/kubepods.slice/kubepods-burstable.slice/{POD}/cri-containerd-{CID}.scope"
    ref = classify_cgroup(path)
    assert (ref.container_id, ref.pod_uid) == (CID, "0b5ec1a4-7d3e-4c55-9a8b-2f4d6e8a1c3b")
    assert index.path(os.stat(tmp_path).st_ino, clock()) == "/"
    assert index.path(os.stat(tmp_path / "system.slice/ssh.service").st_ino, clock()) == (
        "/system.slice/ssh.service"
    )
    assert index.walks == 1


def test_new_cgroup_found_by_walking_again_at_most_once_a_second(tmp_path: Path) -> None:
    tree(tmp_path)
    clock = Clock()
    index = CgroupIdIndex(tmp_path, clock=clock)
    index.walk()
    new = tmp_path / "kubepods.slice/new"
    new.mkdir()
    ino = os.stat(new).st_ino
    assert index.path(ino, clock()) is None  # walked this very second: not again
    assert not index.gone(ino)  # seen after the last walk: not known to be gone
    clock.now += 1.0
    assert index.path(ino, clock()) == "/kubepods.slice/new"
    assert index.walks == 2


def test_removed_cgroup_keeps_its_path_and_unknown_ids_are_remembered_gone(
    tmp_path: Path,
) -> None:
    scope = tree(tmp_path)
    clock = Clock()
    index = CgroupIdIndex(tmp_path, clock=clock)
    ino = os.stat(scope).st_ino
    expected = index.path(ino, clock())
    scope.rmdir()
    clock.now += 5
    index.walk()
    # the last work of a terminated container is read after its cgroup is gone
    assert index.path(ino, clock()) == expected
    assert index.gone(ino)
    clock.now += 1
    seen = clock()  # after the last walk: asking for it walks again, which does not find it
    clock.now += 1
    assert index.path(999_999_999, seen) is None
    assert index.gone(999_999_999)
    walks = index.walks
    assert index.path(999_999_999, clock()) is None
    assert index.walks == walks  # no walk for an id known to be gone


def test_find_v2_root(tmp_path: Path) -> None:
    assert find_v2_root(tmp_path) is None
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified/cgroup.controllers").write_text("")
    assert find_v2_root(tmp_path) == tmp_path / "unified"  # hybrid
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert find_v2_root(tmp_path) == tmp_path  # unified
