"""Per-cgroup sums in the kernel (WATTPROBE_PER_CGROUP) against the per-process path and the
kernel's own cpu.stat, with the real probes on real cgroup v2 directories.

Both versions of the probes are loaded at once (two sets of programs on the same hooks) and see
the same churning workload: a half-busy process, short-lived processes exiting between reads, a
process that moves itself between two cgroups, and a process issuing GPU ioctls (which makes it
"tracked": its own entry in per-cgroup mode) and is killed mid-interval. Each source is read
every 0.3 s and its samples consumed as the monitor does (deltas per task key against the
previous read); the sums per cgroup must agree with each other and with each cgroup's
cpu.stat usage_usec, and the ioctl counts exactly.

Needs root, bcc, tracefs, kernel headers, kernel BTF and cgroup v2 (tests/support/ebpfparts.py): a
missing part skips locally and fails in CI.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.ebpf.source import EbpfSource
from tests.support.ebpfparts import require_ebpf
from tests.support.gpunodes import ISSUE_SCRIPT, make_gpu_nodes
from tests.support.kubecgroups import empty_and_remove, v2_root
from tests.support.running import parse_samples, select, start_exporter

pytestmark = pytest.mark.real

PROCFS = Path("/proc")
CGROUPFS = Path("/sys/fs/cgroup")
RUN_S = 2.5
READ_EVERY_S = 0.3

# argv: mode, seconds, cgroup.procs of the first cgroup, of the second (mover only).
# busy: 10 ms on, 10 ms off. churn: forks children that burn 15 ms each and exit (most of
# them live and die between two reads). threads: three threads burning 4 ms and sleeping 2 ms
# (they also hand the GIL to each other: many switches between threads of one process).
# mover: burns 30 ms, sleeps 1 ms (so the move starts a fresh slice), moves itself into the
# other cgroup, and so on.
WORKLOAD = """
import os, sys, time
mode, seconds, here = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def burn(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
stop = time.monotonic() + seconds
if mode == "busy":
    while time.monotonic() < stop:
        burn(0.01)
        time.sleep(0.01)
elif mode == "churn":
    while time.monotonic() < stop:
        pid = os.fork()
        if pid == 0:
            burn(0.015)
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.005)
elif mode == "threads":
    import threading
    def work():
        while time.monotonic() < stop:
            burn(0.004)
            time.sleep(0.002)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
elif mode == "mover":
    there = sys.argv[4]
    places = [here, there]
    i = 0
    while time.monotonic() < stop:
        burn(0.03)
        time.sleep(0.001)
        i += 1
        with open(places[i % 2], "w") as f:
            f.write(str(os.getpid()))
"""


class Consumer:
    """Sums a source's samples per cgroup the way the monitor takes deltas per task key."""

    def __init__(self) -> None:
        self.prev: dict[TaskKey, TaskSample] = {}
        self.cpu: defaultdict[str, float] = defaultdict(float)
        self.ioctls: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self.kernel_thread_keys: set[TaskKey] = set()
        self.pids: defaultdict[str, set[int]] = defaultdict(set)
        self.unplaced = 0.0  # seconds of non-kernel-thread samples without a cgroup path

    def take(self, samples: list[TaskSample]) -> None:
        for s in samples:
            before = self.prev.get(s.key)
            delta = s.cpu_seconds - (before.cpu_seconds if before else 0.0)
            self.cpu[s.cgroup] += delta
            if not s.cgroup and not s.kernel_thread:
                self.unplaced += delta
            old = dict(before.gpu_ioctls) if before else {}
            counts = self.ioctls[s.cgroup]
            for driver, n in s.gpu_ioctls:
                counts[driver] = counts.get(driver, 0) + n - old.get(driver, 0)
            if s.kernel_thread:
                self.kernel_thread_keys.add(s.key)
            if s.pid:
                self.pids[s.cgroup].add(s.pid)
        self.prev = {s.key: s for s in samples}


@contextlib.contextmanager
def cgroups(names: list[str]) -> Iterator[dict[str, Path]]:
    base = v2_root() / f"wattprobe-i22-{secrets.token_hex(4)}"
    base.mkdir()
    made = {n: base / n for n in names}
    try:
        for d in made.values():
            d.mkdir()
        yield made
    finally:
        for d in made.values():
            if d.exists():
                empty_and_remove(d)
        empty_and_remove(base)


def usage_s(cgroup: Path) -> float:
    for line in (cgroup / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise AssertionError(f"no usage_usec in {cgroup}/cpu.stat")


def start(cmd: list[str], cgroup: Path, *, stdout: int | None = None) -> subprocess.Popen[str]:
    procs = str(cgroup / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as f:
            f.write("0")  # "0": the writing process itself

    # the child joins before exec: all of its run time is inside (no threads here)
    return subprocess.Popen(cmd, preexec_fn=join, stdout=stdout, text=True)  # noqa: PLW1509


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "classic"])
def test_per_cgroup_sums_equal_per_process_sums_and_cpu_stat(raw: bool) -> None:
    """raw: the raw sched_switch program, which caches each task's key in its task-cache slot
    (taken again after any cgroup move); classic: the fallback, which takes it every switch."""
    require_ebpf()
    if not Path("/sys/kernel/btf/vmlinux").is_file():
        pytest.skip("no kernel BTF: the ioctl probe and kernel threads apart need it")
    per_process = EbpfSource.start(PROCFS, CGROUPFS, gpu_ioctls=True, per_process=True)
    try:
        per_cgroup = EbpfSource.start(
            PROCFS, CGROUPFS, gpu_ioctls=True, per_process=False, raw_switch=raw
        )
        try:
            _compare(per_process, per_cgroup)
        finally:
            per_cgroup.close()
    finally:
        per_process.close()


def _compare(per_process: EbpfSource, per_cgroup: EbpfSource) -> None:
    assert per_process.info.per_process and not per_cgroup.info.per_process
    assert per_cgroup.info.kernel_threads_apart
    a, b = Consumer(), Consumer()
    a.take(per_process.tasks())
    b.take(per_cgroup.tasks())
    names = ["busy", "churn", "threads", "move1", "move2", "gpu"]
    with cgroups(names) as cg, tempfile.TemporaryDirectory() as tmp:
        nodes = make_gpu_nodes(Path(tmp))
        py = sys.executable
        run = str(RUN_S)
        procs = [
            start([py, "-c", WORKLOAD, "busy", run, "-"], cg["busy"]),
            start([py, "-c", WORKLOAD, "churn", run, "-"], cg["churn"]),
            start([py, "-c", WORKLOAD, "threads", run, "-"], cg["threads"]),
            start(
                [
                    py,
                    "-c",
                    WORKLOAD,
                    "mover",
                    run,
                    str(cg["move1"] / "cgroup.procs"),
                    str(cg["move2"] / "cgroup.procs"),
                ],
                cg["move1"],
            ),
        ]
        gpu = start(
            [py, "-c", ISSUE_SCRIPT, str(nodes.directory), "300", "100", "5"],
            cg["gpu"],
            stdout=subprocess.PIPE,
        )
        deadline = time.monotonic() + RUN_S + 30
        gpu_killed = False
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(READ_EVERY_S)
            a.take(per_process.tasks())
            b.take(per_cgroup.tasks())
            if not gpu_killed and time.monotonic() > deadline - 30 - RUN_S / 2:
                assert gpu.stdout is not None
                gpu.stdout.readline()  # it has issued its ioctls
                gpu.kill()  # exits mid-interval
                gpu.wait(timeout=10)
                gpu_killed = True
        for p in procs:
            assert p.wait(timeout=30) == 0
        if not gpu_killed:
            gpu.kill()
            gpu.wait(timeout=10)
        # tombstones are settled one second after the exit; exited totals are read after
        for _ in range(3):
            time.sleep(1.1)
            a.take(per_process.tasks())
            b.take(per_cgroup.tasks())
        truth = {n: usage_s(d) for n, d in cg.items()}
        paths = {n: "/" + str(d.relative_to(v2_root())) for n, d in cg.items()}
        entries = {s.map: s.entries for s in per_cgroup.map_stats()}

    # time of processes whose cgroup path was not known at a read ("" is also the kernel
    # threads' bucket, which is left out here): printed, so a shortfall below says where it went
    print(f"unplaced: per-process {a.unplaced:.4f}, per-cgroup {b.unplaced:.4f} s")
    print("per-cgroup maps:", per_cgroup.map_stats())  # LRU evictions, failed inserts
    exact = per_cgroup.info.task_runtime and per_process.info.task_runtime
    assert exact == (per_cgroup.info.switch_probe == "raw"), "task runtime where the kernel has it"
    for name in names:
        got, want = b.cpu[paths[name]], truth[name]
        assert want > 0.01, (name, want)
        per_proc = a.cpu[paths[name]]
        print(f"{name}: per-cgroup {got:.4f}, per-process {per_proc:.4f}, cpu.stat {want:.4f} s")
        if not exact:
            # the classic program (kernels before 5.18) measures slices with the clock, which
            # also counts interrupts (and steal in a VM): a little above cpu.stat
            assert got == pytest.approx(want, rel=0.03, abs=0.02), (name, got, want)
            continue
        # the raw program charges the kernel's own per-task runtime (what cpu.stat sums) to the
        # cgroup the task is in when it is switched out: issue 27's goal is +-0.3 % per cgroup
        # (measured on this VM: equal to the 0.1 ms printed, the mover's two cgroups included,
        # loaded or not). One fresh-clone CI run had the fork loop 2.1 ms (0.32 %) under
        # cpu.stat while the per-process path was exact; not reproduced here (7 runs), so the
        # check allows 3 ms, and the "unplaced" line above shows whether a path lookup took it
        assert got == pytest.approx(want, rel=0.003, abs=0.003), (name, got, want)
        if name not in ("move1", "move2"):
            # per-process mode credits a process to the cgroup it is in at the read, which
            # for these is their only one, except for the child's own time between fork and
            # joining its cgroup (start(): ~1 ms of Python, run in the test's cgroup; 3.9 ms
            # seen once in a fresh CI run). Per-cgroup mode, the billing path, is held to
            # cpu.stat at 0.3 % above.
            assert per_proc == pytest.approx(want, rel=0.003, abs=0.006), (name, per_proc, want)
    # both programs see the same slices. The per-process path credits a process's work since
    # the last read to the cgroup it is in at the read, so the mover's two cgroups are compared
    # together there (per-cgroup mode is exact per cgroup: above)
    groups = [["busy"], ["churn"], ["threads"], ["gpu"], ["move1", "move2"]]
    for group in groups:
        got_a = sum(a.cpu[paths[n]] for n in group)
        got_b = sum(b.cpu[paths[n]] for n in group)
        # the per-process path differs by what it cannot place exactly: each child's time
        # before it joins its cgroup (3.0 ms of 0.85 s in a fresh CI run) and the mover's slice
        # in flight at its move (3.6 ms of 1.09 s on a loaded machine), the same 6 ms allowed
        # against cpu.stat above; per-cgroup mode is held to cpu.stat itself at 0.3 %
        assert got_b == pytest.approx(got_a, rel=0.003 if exact else 0.03, abs=0.006), group
    nv_dr = {"nvidia": 300, "drm": 100}
    assert a.ioctls[paths["gpu"]] == nv_dr
    assert b.ioctls[paths["gpu"]] == nv_dr
    # the GPU process had its own key in per-cgroup mode (its PID is what GPU attribution uses),
    # no other process of the workload did
    assert b.pids[paths["gpu"]] == {gpu.pid}
    assert all(not b.pids[paths[n]] for n in names if n != "gpu")
    assert a.pids[paths["churn"]], "the per-process path keys the churn by PID"
    # kernel threads are summed apart (PF_KTHREAD), not with the root cgroup's processes
    assert (0, 0) in b.kernel_thread_keys
    # per-cgroup mode reads a handful of task entries, not one per process
    assert entries["tasks"] <= 5, entries


BURN = """
import signal, time
end = time.thread_time() + 0.5
while time.thread_time() < end:
    pass
print("done", flush=True)
signal.pause()
"""


@pytest.mark.parametrize("per_process", [True, False], ids=["collector.process", "default"])
def test_serve_keeps_entries_per_process_only_with_the_process_collector(
    tmp_path: Path, per_process: bool
) -> None:
    """`wattprobe serve` loads sums per cgroup by default and an entry per process with
    --collector.process, whose per-process series then name the process by its PID."""
    require_ebpf()
    args = ["--activity-source", "ebpf", "--interval", "1s"]
    if per_process:
        args += ["--collector.process"]
    exporter = start_exporter(args, tmp_path)
    try:
        exporter.wait_next_interval()
        with cgroups(["c"]) as cg:
            busy = start([sys.executable, "-c", BURN], cg["c"], stdout=subprocess.PIPE)
            try:
                assert busy.stdout is not None
                assert busy.stdout.readline().strip() == "done"
                body = ""
                for _ in range(3):
                    body = exporter.wait_next_interval()
            finally:
                busy.kill()
                busy.wait(timeout=10)
        energy = select(parse_samples(body), "wattprobe_process_energy_joules_total")
        pids = {dict(labels).get("pid") for labels in energy}
        assert (str(busy.pid) in pids) is per_process
        mode = "per-process entries" if per_process else "sums per cgroup"
        assert mode in exporter.log()
    finally:
        exporter.stop()
