"""Hostile files where the /proc source reads /proc and cgroupfs (issue 41).

A FIFO, a character device (/dev/zero) or a 1 GiB sparse file as a root-cgroup process's
/proc/<pid>/stat, as the root cgroup.procs or as a pod's cgroup.procs: every read returns at
once (each call runs on a thread joined with a generous bound, so a regression fails instead of
hanging the suite), memory stays bounded, the fault is logged once per episode, and once the
file is back the kernel's time counts again.
"""

from __future__ import annotations

import logging
import os
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from exporter.host.procstat import CLOCK_TICKS, PF_KTHREAD, parse_stat
from exporter.model.identity import KERNEL, SYSTEM
from exporter.model.readings import TaskSample
from exporter.sources.activity.procfs.hostwork import KernelWork
from exporter.sources.activity.procfs.scan import ProcScanner
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.sources.activity.test_procfs_cgrouptree import Credit, approx, simple_node
from tests.support.cgroupnode import CgroupNode

T = TypeVar("T")
HANG_GUARD_S = 60.0  # not a timing assertion: a read that blocks would never return
MEMORY_BOUND = 16 << 20  # bytes allocated at peak by one read, whatever is in the file
KINDS = ("fifo", "chardev", "sparse")


def returns(fn: Callable[[], T]) -> T:
    """fn's result, run on a thread: a blocked read fails the test instead of hanging it."""
    box: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_GUARD_S)
    assert not t.is_alive(), "the read blocked"
    if errors:
        raise errors[0]
    return box[0]


def make_hostile(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        path.symlink_to("/dev/zero")
    else:
        with path.open("wb") as f:
            f.truncate(1 << 30)  # sparse: no disk used, 1 GiB of zeros to a reader


def bounded_tasks(source: ProcfsSource) -> list[TaskSample]:
    tracemalloc.start()
    try:
        tasks = returns(source.tasks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND
    return tasks


def kernel_node(tmp_path: Path) -> tuple[CgroupNode, ProcfsSource, Credit]:
    node, _pod, (a, _b) = simple_node(tmp_path)
    node.start(a)
    node.start("", kernel=True)
    node.write()
    source = ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, per_process=False)
    credit = Credit()
    credit.take(returns(source.tasks))
    return node, source, credit


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", ["pid stat", "root cgroup.procs"])
def test_hostile_kernel_work_files_are_refused_and_recovered(
    tmp_path: Path, kind: str, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    node, source, credit = kernel_node(tmp_path)
    kthread = next(p for p in node.procs.values() if p.kernel)
    path = (
        node.procfs / str(kthread.pid) / "stat"
        if target == "pid stat"
        else node.v2 / "cgroup.procs"
    )
    caplog.set_level(logging.INFO, logger="exporter.sources.activity.procfs.hostwork")
    for _ in range(3):  # one episode: one warning, however many intervals it lasts
        node.run(kthread, 5)
        node.write()
        make_hostile(path, kind)
        credit.take(bounded_tasks(source))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0].getMessage()
    # the kernel's time the source could not tell apart stays in the node's work, never lost
    assert sum(credit.nonzero().values()) == pytest.approx(0.15)

    path.unlink()
    node.write()  # the file is back
    credit.take(bounded_tasks(source))
    before = dict(credit.total)
    node.run(kthread, 7)
    node.write()
    credit.take(bounded_tasks(source))
    assert credit.total[KERNEL] - before.get(KERNEL, 0.0) == pytest.approx(0.07)
    assert credit.total.get(SYSTEM, 0.0) == pytest.approx(before.get(SYSTEM, 0.0))
    assert any("readable again" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_pod_cgroup_procs_never_blocks(tmp_path: Path, kind: str) -> None:
    node, pod, (a, _b) = simple_node(tmp_path)
    p = node.start(a)
    node.write()
    source = ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, per_process=False)
    credit = Credit()
    credit.take(returns(source.tasks))
    for _ in range(2):
        node.run(p, 10)
        node.write()
        make_hostile(node.v2 / pod.lstrip("/") / "cgroup.procs", kind)
        credit.take(bounded_tasks(source))
    assert credit.nonzero() == approx(node.truth_s())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["stat", "cgroup"])
def test_hostile_process_files_per_process(tmp_path: Path, kind: str, name: str) -> None:
    """Per process, a hostile stat or cgroup file skips that process; the others count."""
    node, _pod, (a, b) = simple_node(tmp_path)
    good, bad = node.start(a), node.start(b)
    node.write()
    scanner = ProcScanner(
        str(node.procfs),
        parse_stat=parse_stat,
        kthread_flag=PF_KTHREAD,
        ticks_per_second=CLOCK_TICKS,
        recheck_every=1,
    )
    make_hostile(node.procfs / str(bad.pid) / name, kind)
    tracemalloc.start()
    try:
        samples = returns(scanner.scan)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND
    assert {s.pid for s in samples} == {good.pid}
    (node.procfs / str(bad.pid) / name).unlink()
    node.write()
    (node.procfs / str(bad.pid) / "cgroup").write_text(f"0::{b}\n")
    assert {s.pid for s in returns(scanner.scan)} == {good.pid, bad.pid}


def test_kernel_work_refuses_an_oversized_cgroup_procs(tmp_path: Path) -> None:
    """A list longer than its bound is refused whole, not cut into half a PID."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    cgroup.mkdir()
    (proc / "stat").write_text("cpu  1 0 0 100 0 2 3 0 0 0\n")
    (cgroup / "cgroup.procs").write_text("1\n" * (5 << 20))
    work = KernelWork(str(proc), parse_stat, PF_KTHREAD, CLOCK_TICKS)
    with pytest.raises(OSError, match="larger than"):
        returns(lambda: work.total_ns(str(cgroup)))


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_cpu_stat_is_said_once_per_episode(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A container's cpu.stat (read per process for exited processes' time) as a FIFO, a
    device or a huge sparse file: refused at once, one warning while it lasts, one line when
    it is a file again (before issue 41: a debug line per read, silent at the default level)."""
    node, _pod, (a, _b) = simple_node(tmp_path)
    p = node.start(a)
    node.write()
    source = ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, recheck_every=1, per_process=True)
    caplog.set_level(logging.INFO, logger="exporter.sources.activity.procfs.exited")
    returns(source.tasks)
    cpu_stat = node.v2 / a.lstrip("/") / "cpu.stat"
    for _ in range(3):
        node.run(p, 10)
        node.write()
        make_hostile(cpu_stat, kind)
        bounded_tasks(source)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(cpu_stat) in warnings[0], warnings
    cpu_stat.unlink()
    node.write()
    returns(source.tasks)
    assert any("readable again" in r.getMessage() for r in caplog.records)
