"""The eBPF activity source on real cgroup v2 directories laid out like the kubelet's, against
the kernel's own ground truth: each cgroup's cpu.stat usage_usec and each process's schedstat.

- The default (no program on sched_switch): per-container CPU is the cgroups' own totals, read
  beside the probes' GPU ioctls (exporter/app/wiring.py KernelTotals), through the monitor:
  a steady process, a fork loop, three threads, a process moving itself between two containers
  and a GPU process killed mid-interval, each container equal to its cpu.stat within 0.1 % or
  1 ms, and the ioctls exact.
- Per-process mode (--collector.process, the sched_switch program): every process equal to its
  schedstat within 1 %, each cgroup to its cpu.stat.
- Long slices: a SCHED_FIFO spinner that never blocks (only RT throttling takes it off its CPU,
  every ~0.95 s), running since before the probes load, read mid-slice and after.

Needs root, bcc, tracefs, kernel headers, kernel BTF and cgroup v2 (tests/support/ebpfparts.py): a
missing part skips locally and fails in CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.app.wiring import KernelTotals, build
from exporter.model.config import ActivitySource, Config, GpuIoctls, PodSource
from exporter.model.readings import TaskKey, TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.activity.ebpf.source import EbpfSource
from tests.support.ebpfparts import require_ebpf
from tests.support.gpunodes import ISSUE_SCRIPT, make_gpu_nodes
from tests.support.kubecgroups import KubeContainer, kube_container
from tests.support.realparts import missing
from tests.support.running import parse_samples, select, start_exporter

pytestmark = pytest.mark.real

PROCFS = Path("/proc")
CGROUPFS = Path("/sys/fs/cgroup")
RUN_S = 2.5
READ_EVERY_S = 0.3
EXACT_REL, EXACT_ABS = 0.001, 0.001  # issue 37's goal: cpu.stat within 0.1 % or 1 ms

# argv: mode, seconds, then for the mover the cgroup.procs files of its two containers.
# busy: 10 ms on, 10 ms off. churn: forks children that burn 15 ms each and exit (most of
# them live and die between two reads). threads: three threads burning 4 ms and sleeping 2 ms.
# mover: burns 30 ms, sleeps 1 ms, moves itself into the other container, and so on.
WORKLOAD = """
import os, sys, time
mode, seconds = sys.argv[1], float(sys.argv[2])
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
    places = [sys.argv[3], sys.argv[4]]
    i = 0
    while time.monotonic() < stop:
        burn(0.03)
        time.sleep(0.001)
        i += 1
        with open(places[i % 2], "w") as f:
            f.write(str(os.getpid()))
"""


def usage_s(c: KubeContainer) -> float:
    for line in (c.path / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise AssertionError(f"no usage_usec in {c.path}/cpu.stat")


def node_busy_s() -> float:
    """/proc/stat's busy time (user, nice, system, irq, softirq; steal is another guest's)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = sum(int(fields[i]) for i in (0, 1, 2, 5, 6))
    return ticks / os.sysconf("SC_CLK_TCK")


def schedstat_s(pid: int) -> float:
    """The kernel's runtime of every thread of a live process (se.sum_exec_runtime)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


def start(c: KubeContainer, argv: list[str], stdout: int | None = None) -> subprocess.Popen[str]:
    # the child joins before exec: all of its run time is inside (the test starts no threads)
    return subprocess.Popen(argv, preexec_fn=c.join, text=True, stdout=stdout)  # noqa: PLW1509


@contextlib.contextmanager
def containers(n: int) -> Iterator[list[KubeContainer]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(kube_container()) for _ in range(n)]


def container_cpu(snap: Snapshot, cid: str) -> float:
    return sum(c.cpu_seconds for c in snap.containers if c.container_id == cid)


def container_ioctls(snap: Snapshot, cid: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in snap.containers:
        if c.container_id == cid:
            for driver, n in c.gpu_ioctls:
                out[driver] += n
    return dict(out)


def test_default_bills_each_container_its_cpu_stat() -> None:
    """The default: no sched_switch program; each container exactly what its cgroup's cpu.stat
    says, whatever its processes do; GPU ioctls per container exact and by PID."""
    require_ebpf()
    if not Path("/sys/kernel/btf/vmlinux").is_file():
        missing("kernel BTF (the ioctl probe needs it)")
    config = Config(
        activity_source=ActivitySource.EBPF,
        pod_source=PodSource.NONE,
        ebpf_gpu_ioctls=GpuIoctls.ON,  # this machine has no GPU device nodes (auto: off)
    )
    parts = build(config)
    try:
        assert isinstance(parts.activity, KernelTotals)
        probes = parts.activity.probes
        assert probes.info.switch_probe == "none" and not probes.info.per_process
        assert "sched:sched_switch" not in probes.info.tracepoints
        seen: list[TaskSample] = []
        read = parts.activity.tasks

        def recorded() -> list[TaskSample]:
            samples = read()
            seen.extend(samples)
            return samples

        parts.activity.tasks = recorded  # type: ignore[method-assign]
        gpu_pid = _default_run(parts.monitor.step)
        # the GPU process had its own key (its PID is what GPU attribution uses), no other
        assert {s.pid for s in seen if s.gpu_ioctls and s.pid} == {gpu_pid}
    finally:
        parts.close()


def _default_run(step: Callable[[], Snapshot]) -> int:
    """Runs the workload, checks each container against cpu.stat; returns the GPU process's
    PID."""
    names = ["busy", "churn", "threads", "move1", "move2", "gpu"]
    with containers(len(names)) as made, tempfile.TemporaryDirectory() as tmp:
        cg = dict(zip(names, made, strict=True))
        busy_before = node_busy_s()
        first = step()  # the baseline: every container is empty
        busy_after_baseline = node_busy_s()
        nodes = make_gpu_nodes(Path(tmp))
        py, run = sys.executable, str(RUN_S)
        procs = [
            start(cg["busy"], [py, "-c", WORKLOAD, "busy", run]),
            start(cg["churn"], [py, "-c", WORKLOAD, "churn", run]),
            start(cg["threads"], [py, "-c", WORKLOAD, "threads", run]),
            start(
                cg["move1"],
                [
                    py,
                    "-c",
                    WORKLOAD,
                    "mover",
                    run,
                    str(cg["move1"].path / "cgroup.procs"),
                    str(cg["move2"].path / "cgroup.procs"),
                ],
            ),
        ]
        gpu = start(
            cg["gpu"],
            [py, "-c", ISSUE_SCRIPT, str(nodes.directory), "300", "100", "5"],
            stdout=subprocess.PIPE,
        )
        deadline = time.monotonic() + RUN_S + 30
        gpu_killed = False
        snap: Snapshot | None = None
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(READ_EVERY_S)
            snap = step()
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
        # the containers are empty and still there: the next reads take in the last work
        for _ in range(3):
            time.sleep(1.1)
            busy_lo = node_busy_s()
            snap = step()
            busy_hi = node_busy_s()
        truth = {n: usage_s(c) for n, c in cg.items()}
    assert snap is not None
    for name, c in cg.items():
        got, want = container_cpu(snap, c.container_id), truth[name]
        print(f"{name}: billed {got:.6f} s, cpu.stat {want:.6f} s")
        assert want > 0.005, (name, want)
        assert got == pytest.approx(want, rel=EXACT_REL, abs=EXACT_ABS), (name, got, want)
    # every bucket (containers, system_processes, kernel_processes) adds up to the node's busy
    # time (/proc/stat, read on both sides of the first and of the last step)
    billed = sum(c.cpu_seconds for c in snap.containers) - sum(
        c.cpu_seconds for c in first.containers
    )
    low, high = busy_lo - busy_after_baseline, busy_hi - busy_before
    print(f"all buckets {billed:.4f} s, node busy between {low:.4f} and {high:.4f} s")
    assert low - 0.05 <= billed <= high + 0.05, (low, billed, high)
    assert container_ioctls(snap, cg["gpu"].container_id) == {"nvidia": 300, "drm": 100}
    assert all(not container_ioctls(snap, c.container_id) for n, c in cg.items() if n != "gpu")
    return gpu.pid


def test_per_process_mode_matches_schedstat_and_cpu_stat() -> None:
    """--collector.process: the sched_switch program's per-process sums against each process's
    schedstat (read while it lives) and each cgroup's cpu.stat."""
    require_ebpf()
    source = EbpfSource.start(PROCFS, CGROUPFS, gpu_ioctls=False, per_process=True)
    try:
        assert source.info.per_process and source.info.switch_probe in ("raw", "classic")
        exact = source.info.task_runtime
        with containers(2) as (steady, threads):
            prev: dict[TaskKey, TaskSample] = {s.key: s for s in source.tasks()}
            per_pid: defaultdict[int, float] = defaultdict(float)
            py = sys.executable
            long = str(RUN_S + 1.5)
            procs = [
                start(steady, [py, "-c", WORKLOAD, "busy", long]),
                start(threads, [py, "-c", WORKLOAD, "threads", long]),
            ]
            wanted = {p.pid for p in procs}
            end = time.monotonic() + RUN_S
            while time.monotonic() < end:
                time.sleep(READ_EVERY_S)
                samples = source.tasks()
                truth = {pid: schedstat_s(pid) for pid in wanted}  # read right after the maps
                for s in samples:
                    before = prev.get(s.key)
                    per_pid[s.pid] += s.cpu_seconds - (before.cpu_seconds if before else 0.0)
                prev = {s.key: s for s in samples}
            for p in procs:
                got, want = per_pid[p.pid], truth[p.pid]
                print(f"pid {p.pid}: counted {got:.4f} s, schedstat {want:.4f} s")
                assert want > 0.2, want
                # a slice in flight is counted up to the last read (the runtime the kernel
                # keeps lags by up to a tick): within 1 % (issue 37's goal) or 10 ms
                tolerance = 0.01 if exact else 0.03
                assert got == pytest.approx(want, rel=tolerance, abs=0.01), (p.pid, got, want)
                assert got <= want + 0.001, "never ahead of the kernel"
            for p in procs:
                p.kill()
                p.wait(timeout=10)
    finally:
        source.close()


# A running task's runtime (schedstat, and cpu.stat's share of it) is brought up to date at
# scheduler ticks: each of two readings may lag by a tick (10 ms at HZ=100, 4 ms at HZ=250)
TICKS_LAG_S = 0.02

SPIN = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
print("spinning", flush=True)
while True:
    pass
"""


def growth_of(
    pid: int, prev: dict[TaskKey, TaskSample], samples: list[TaskSample]
) -> tuple[float, dict[TaskKey, TaskSample]]:
    """pid's CPU seconds since the previous read, as the monitor takes them (a key not seen
    before counts whole), and the samples to compare the next read with."""
    grown = 0.0
    for s in samples:
        if s.pid == pid:
            before = prev.get(s.key)
            grown += s.cpu_seconds - (before.cpu_seconds if before else 0.0)
    return grown, {s.key: s for s in samples}


def test_a_long_slice_running_since_before_the_load_is_not_overcounted() -> None:
    """A SCHED_FIFO spinner on one CPU that never blocks (only RT throttling takes it off, after
    ~0.95 s), running before the probes load: its cgroup is credited exactly what cpu.stat
    charged after the first read, mid-slice and after (no time from before the load: issue
    37's +4 to +8 % in fresh agents)."""
    require_ebpf()
    cpu = max(os.sched_getaffinity(0))
    with kube_container() as c:
        spinner = start(c, [sys.executable, "-c", SPIN, str(cpu)], stdout=subprocess.PIPE)
        try:
            assert spinner.stdout is not None
            assert spinner.stdout.readline().strip() == "spinning"
            source = EbpfSource.start(PROCFS, CGROUPFS, gpu_ioctls=False, per_process=True)
            try:
                if not source.info.task_runtime:
                    pytest.skip("the clock version (no BTF task runtime) has no slots to open")
                # the baseline is the first read; cpu.stat is read on both sides of it
                base_lo = usage_s(c)
                prev = {s.key: s for s in source.tasks()}
                base_hi = usage_s(c)
                counted = 0.0
                for _ in range(8):  # reads mid-slice and across the throttling switches
                    time.sleep(0.37)
                    grown, prev = growth_of(spinner.pid, prev, source.tasks())
                    counted += grown
                    now = usage_s(c)
                    print(f"counted {counted:.4f} s, cpu.stat {now - base_hi:.4f} s")
                    # never ahead of the kernel, and never more than a slice behind
                    assert counted <= now - base_lo + TICKS_LAG_S, (counted, now - base_lo)
                    assert counted >= now - base_hi - 1.0, (counted, now - base_hi)
                spinner.send_signal(signal.SIGSTOP)  # the slice ends: everything is counted
                time.sleep(0.3)
                counted += growth_of(spinner.pid, prev, source.tasks())[0]
                now = usage_s(c)
                assert now - base_hi > 1.5, now - base_hi
                # never ahead of the kernel; behind by at most one slice: a slice whose start no
                # program saw is charged at most 20 ms (bpf/activity.c MISMATCH_CAP_NS; on this
                # VM's 6.18 kernel some thread's switches out are never traced, and the spinner
                # taking its CPU is then seen as a mismatch)
                low, high = now - base_hi - 1.0, now - base_lo + TICKS_LAG_S
                assert low <= counted <= high, (low, counted, high)
            finally:
                source.close()
        finally:
            spinner.kill()
            spinner.wait(timeout=10)


BURN = """
import signal, time
end = time.thread_time() + 0.5
while time.thread_time() < end:
    pass
print("done", flush=True)
signal.pause()
"""


@pytest.mark.parametrize("per_process", [True, False], ids=["collector.process", "default"])
def test_serve_attaches_sched_switch_only_with_the_process_collector(
    tmp_path: Path, per_process: bool
) -> None:
    """`wattprobe serve` attaches no sched_switch program by default, and one with
    --collector.process, whose per-process series then name the process by its PID."""
    require_ebpf()
    args = ["--activity-source", "ebpf", "--interval", "1s"]
    if per_process:
        args += ["--collector.process"]
    exporter = start_exporter(args, tmp_path)
    try:
        exporter.wait_next_interval()
        with kube_container() as c:
            busy = start(c, [sys.executable, "-c", BURN], stdout=subprocess.PIPE)
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
        log = exporter.log()
        if per_process:
            assert "per-process entries" in log and "sched:sched_switch" in log
        else:
            assert "no sched_switch program" in log and "sched:sched_switch" not in log
    finally:
        exporter.stop()
