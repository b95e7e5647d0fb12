"""The /proc activity source on real cgroup v2 directories: a container whose work is
short-lived processes gets the CPU time the kernel's own cpu.stat counted, and a neighbour's
stays its own. Ground truth is the cgroups' usage_usec, read from the kernel here.

Needs root and a cgroup v2 mount (tests/support/kubecgroups.py); missing parts skip locally and fail
in CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.app.wiring import build_monitor
from exporter.model.config import ActivitySource, Config, PodSource
from exporter.model.snapshot import Snapshot
from tests.support.kubecgroups import KubeContainer, kube_container
from tests.support.running import parse_samples, select, start_exporter

pytestmark = [pytest.mark.real, pytest.mark.container_series]

RUN_S = 6.0
ENOUGH_S = 1.0  # CPU seconds a container runs before its share is compared to the per cent
# A shell that forks a short shell after another, each counting to 3000 and exiting: nearly
# all of the container's CPU time is in processes that live a few milliseconds.
SHORT_LIVED = 'while :; do sh -c "i=0; while [ \\$i -lt 3000 ]; do i=\\$((i+1)); done"; done'
BUSY = "while True: pass"
# the cgroup tree reads the kernel's own totals: issue 37's 0.1 % or 1 ms
EXACT_REL, EXACT_ABS = 0.001, 0.001


def usage_s(container: KubeContainer) -> float:
    """The kernel's CPU time of the cgroup since it was made (cgroup v2 cpu.stat)."""
    for line in (container.path / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise AssertionError("no usage_usec in cpu.stat")


def start(container: KubeContainer, argv: list[str]) -> subprocess.Popen[bytes]:
    # the child joins the container before exec, as runc places a container's processes (the
    # test process starts no threads, so a preexec_fn is safe here)
    return subprocess.Popen(argv, preexec_fn=container.join)  # noqa: PLW1509


def stop_all(container: KubeContainer, timeout_s: float = 10.0) -> None:
    """SIGKILL everything in the cgroup until it is empty (the cgroup itself stays)."""
    deadline = time.monotonic() + timeout_s
    while pids := container.pids():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"{container.path} did not empty"
        time.sleep(0.05)


@contextlib.contextmanager
def workload() -> Iterator[tuple[KubeContainer, KubeContainer, list[subprocess.Popen[bytes]]]]:
    """Two kubepods containers: short-lived processes, and a busy neighbour (started by the
    caller once the exporter has its baseline)."""
    with kube_container() as short, kube_container() as neighbour:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            yield short, neighbour, procs
        finally:
            for c in (short, neighbour):
                stop_all(c)
            for p in procs:
                p.wait(timeout=10)


def run_both(short: KubeContainer, neighbour: KubeContainer) -> list[subprocess.Popen[bytes]]:
    return [
        start(short, ["sh", "-c", SHORT_LIVED]),
        start(neighbour, [sys.executable, "-c", BUSY]),
    ]


def container_cpu(snap: Snapshot, cid: str) -> float:
    return sum(c.cpu_seconds for c in snap.containers if c.container_id == cid)


def test_short_lived_processes_through_the_monitor() -> None:
    with workload() as (short, neighbour, procs):
        monitor = build_monitor(
            Config(activity_source=ActivitySource.PROCFS, pod_source=PodSource.NONE)
        )
        try:
            monitor.step()  # the baseline: both cgroups are empty
            procs.extend(run_both(short, neighbour))
            deadline = time.monotonic() + RUN_S
            while time.monotonic() < deadline:
                time.sleep(0.5)
                monitor.step()
            for c in (short, neighbour):
                stop_all(c)
            # the cgroups are empty and still there: the next reads take in the last work
            snap = monitor.step()
            snap = monitor.step()
            truth = {c.container_id: usage_s(c) for c in (short, neighbour)}
        finally:
            monitor.close()
    got = {cid: container_cpu(snap, cid) for cid in truth}
    assert truth[short.container_id] > 0.5 and truth[neighbour.container_id] > 0.5
    for cid, expected in truth.items():
        assert got[cid] == pytest.approx(expected, rel=EXACT_REL, abs=EXACT_ABS), (got, truth)


def test_short_lived_processes_through_wattprobe_serve(tmp_path: Path) -> None:
    """`wattprobe serve --activity-source procfs`, default flags otherwise."""
    exporter = start_exporter(["--activity-source", "procfs", "--interval", "1s"], tmp_path)
    try:
        with workload() as (short, neighbour, procs):
            exporter.wait_next_interval()
            exporter.wait_next_interval()  # the containers are empty: nothing to count yet
            procs.extend(run_both(short, neighbour))
            time.sleep(RUN_S)
            for c in (short, neighbour):
                stop_all(c)
            truth = {c.container_id: usage_s(c) for c in (short, neighbour)}
            body = ""
            for _ in range(3):  # the cgroups stay until the reads after the last process
                body = exporter.wait_next_interval()
        samples = parse_samples(body)
    finally:
        exporter.stop()
    for cid, expected in truth.items():
        found = select(samples, "wattprobe_container_cpu_seconds_total", container_id=cid)
        assert len(found) == 1, found
        got = next(iter(found.values()))
        assert got == pytest.approx(expected, rel=EXACT_REL, abs=EXACT_ABS), (cid, got, truth)


def test_per_cgroup_default_with_a_process_moved_between_containers() -> None:
    """The default /proc path (per cgroup, no --collector.process): a busy process runs in one
    container, is moved into another without exec'ing, and exits mid-interval; the other
    container's work is short-lived processes. Each container gets what the kernel's cpu.stat
    charged it, to the per cent."""
    with workload() as (first, second, procs):
        monitor = build_monitor(
            Config(activity_source=ActivitySource.PROCFS, pod_source=PodSource.NONE)
        )
        try:
            monitor.step()
            busy = start(first, [sys.executable, "-c", BUSY])
            procs.append(busy)
            procs.append(start(second, ["sh", "-c", SHORT_LIVED]))
            # the move comes once the busy process has run ENOUGH_S in the first container and
            # the run ends once the second has too (each to the per cent of 10 ms ticks), by
            # the CPU time they got, not the wall clock: on a loaded machine half of RUN_S gave
            # the first container 0.44 s
            deadline = time.monotonic() + 4 * RUN_S
            moved = False
            while time.monotonic() < deadline:
                time.sleep(0.5)
                if not moved and usage_s(first) > ENOUGH_S:
                    second.add(busy.pid)  # echo PID > cgroup.procs: no exec, no new process
                    moved = True
                monitor.step()
                if moved and usage_s(second) > 2 * ENOUGH_S:
                    break
            time.sleep(0.25)
            busy.kill()  # exits between two reads
            busy.wait(5)
            for c in (first, second):
                stop_all(c)
            snap = monitor.step()
            snap = monitor.step()
            truth = {c.container_id: usage_s(c) for c in (first, second)}
        finally:
            monitor.close()
    got = {cid: container_cpu(snap, cid) for cid in truth}
    assert truth[first.container_id] > ENOUGH_S and truth[second.container_id] > ENOUGH_S
    for cid, expected in truth.items():
        assert got[cid] == pytest.approx(expected, rel=EXACT_REL, abs=EXACT_ABS), (got, truth)
