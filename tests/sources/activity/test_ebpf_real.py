"""The eBPF activity source with real probes on this machine, seen through /metrics of a real
`wattprobe serve --activity-source ebpf`.

Needs root, bcc (python3-bpfcc), a mounted tracefs, kernel headers (any: the generic Debian set
is enough) and a cgroup v2 mount; missing parts skip locally and fail in CI.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sources.activity.ebpf.load import gpu_device_nodes
from tests.support.ebpfparts import explicit_ebpf_refusal, require_ebpf
from tests.support.gpunodes import ISSUE_SCRIPT, make_gpu_nodes
from tests.support.kubecgroups import KubeContainer, empty_and_remove, kube_container, v2_root
from tests.support.realparts import require_binary, require_root
from tests.support.running import ExporterProcess, Samples, parse_samples, select, start_exporter

pytestmark = [pytest.mark.real, pytest.mark.container_series]

INTERVAL = "1s"
CPU = "wattprobe_container_cpu_seconds_total"
IOCTLS = "wattprobe_container_gpu_ioctls_total"

# Burns `seconds` of CPU time at `duty` (1: flat out; 0.5: 10 ms on, 10 ms off), says so,
# then sleeps until killed, so its run time can still be read from /proc.
BUSY = """
import signal, sys, time
seconds, duty = float(sys.argv[1]), float(sys.argv[2])
end = time.thread_time() + seconds
while time.thread_time() < end:
    burst = time.thread_time() + 0.01 * duty
    while time.thread_time() < burst:
        pass
    if duty < 1:
        time.sleep(0.01 * (1 - duty))
print("done", flush=True)
signal.pause()
"""

# Forks n children that join the container, burn `busy` seconds of CPU each and exit; prints
# the sum of their run times (rusage: user + system, which the kernel scales to the exact run
# time) once all are reaped.
SHORT_LIVED = """
import os, sys, time
procs, n, busy = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
total = 0.0
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
        end = time.thread_time() + busy
        while time.thread_time() < end:
            pass
        os._exit(0)
    _, _, usage = os.wait4(pid, 0)
    total += usage.ru_utime + usage.ru_stime
print(total, flush=True)
"""


@pytest.fixture(scope="module")
def ebpf_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExporterProcess]:
    require_ebpf()
    proc = start_exporter(
        # this machine has no GPU device nodes: ask for the ioctl probe explicitly
        ["--activity-source", "ebpf", "--interval", INTERVAL, "--ebpf.gpu-ioctls", "on"],
        log_dir=tmp_path_factory.mktemp("ebpf-exporter"),
    )
    try:
        proc.wait_next_interval()
        yield proc
    finally:
        proc.stop()


def spawn(container: KubeContainer, script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        text=True,
        # the child joins the container before exec: all of its run time is inside (the test
        # process starts no threads, so a preexec_fn is safe here)
        preexec_fn=container.join,  # noqa: PLW1509
    )


def wait_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The child's first stdout line, within timeout (the machine is shared: be generous)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None and proc.returncode != 0:
            raise AssertionError(f"child exited with {proc.returncode}")
        line = proc.stdout.readline()
        if line:
            return line.strip()
    raise AssertionError("child said nothing in time")


def settle(exporter: ExporterProcess, intervals: int = 3) -> Samples:
    """Samples after a few more intervals: tombstones are read and exited totals folded in."""
    body = ""
    for _ in range(intervals):
        body = exporter.wait_next_interval()
    return parse_samples(body)


def one(samples: Samples, name: str, **labels: str) -> float:
    found = select(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return next(iter(found.values()))


def run_time_s(pid: int) -> float:
    """Nanoseconds on a CPU, first field of /proc/<pid>/schedstat (the scheduler's own count)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=10)


def test_busy_process_in_kubepods_cgroup(ebpf_exporter: ExporterProcess) -> None:
    with kube_container() as container:
        busy = spawn(container, BUSY, "2.5", "1")
        try:
            assert wait_line(busy) == "done"
            samples = settle(ebpf_exporter)
            expected = run_time_s(busy.pid)
            got = one(samples, CPU, container_id=container.container_id)
            assert got == pytest.approx(expected, rel=0.003)  # issue 27: +-0.3 %
            # the pod is found from the same cgroup path: its uid labels the pod's energy
            pod = select(samples, "wattprobe_pod_energy_joules_total", pod_uid=container.pod_uid)
            assert pod and sum(pod.values()) > 0
            # kernel threads are told apart (PF_KTHREAD), not lumped with host processes
            assert one(samples, CPU, container="kernel_processes") > 0
        finally:
            kill(busy)
        # the exit folds the process into its cgroup's exited total: nothing is counted twice
        after = one(settle(ebpf_exporter), CPU, container_id=container.container_id)
        assert after == pytest.approx(expected, rel=0.003)


def test_running_process_moved_into_a_container_is_followed(
    ebpf_exporter: ExporterProcess,
) -> None:
    """A move without exec (cgroup:cgroup_attach_task keeps the process's cgroup current)."""
    with kube_container() as container:
        busy = subprocess.Popen(
            [sys.executable, "-c", BUSY, "2.5", "1"], stdout=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 30
            while run_time_s(busy.pid) < 0.5 and time.monotonic() < deadline:
                time.sleep(0.02)
            before_move = run_time_s(busy.pid)
            container.add(busy.pid)
            assert wait_line(busy) == "done"
            samples = settle(ebpf_exporter)
            total = run_time_s(busy.pid)
        finally:
            kill(busy)
    got = one(samples, CPU, container_id=container.container_id)
    # what ran after the move, and at most the rest of the interval the move fell in (the
    # monitor gives an interval's work to where the process is at its end)
    assert (total - before_move) * 0.98 <= got <= total * 1.02


def test_container_made_and_removed_between_two_reads_is_its_pods(
    ebpf_exporter: ExporterProcess,
) -> None:
    """No read saw the container: the kernel left its time in its pod's total (cpu.stat), and
    the pod keeps it (the default has no per-switch program to name it; docs/ebpf.md)."""
    del ebpf_exporter  # the module's exporter is running beside this monitor: no interference
    from exporter.app.wiring import build  # noqa: PLC0415
    from exporter.model.config import ActivitySource, Config, PodSource  # noqa: PLC0415

    parts = build(Config(activity_source=ActivitySource.EBPF, pod_source=PodSource.NONE))
    try:
        with kube_container() as kept:
            parts.monitor.step()
            parts.monitor.step()
            brief = kept.path.parent / f"cri-containerd-{'ab' * 32}.scope"
            brief.mkdir()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [sys.executable, "-c", "import time\nwhile time.process_time() < 0.2: pass"],
                preexec_fn=lambda: (brief / "cgroup.procs").write_text("0"),
                check=True,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            empty_and_remove(brief)
            snap = parts.monitor.step()
        expected = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        (pod,) = [p for p in snap.pods if p.pod_uid == kept.pod_uid]
        assert pod.cpu_seconds == pytest.approx(expected, rel=0.10)
        assert not any(c.container_id == "ab" * 32 for c in snap.containers)
    finally:
        parts.close()


def test_short_lived_processes_are_counted(ebpf_exporter: ExporterProcess) -> None:
    with kube_container() as container:
        launcher = subprocess.run(
            [
                sys.executable,
                "-c",
                SHORT_LIVED,
                str(container.path / "cgroup.procs"),
                "200",
                "0.02",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        expected = float(launcher.stdout)
        got = one(settle(ebpf_exporter), CPU, container_id=container.container_id)
    assert expected > 200 * 0.02
    assert got == pytest.approx(expected, rel=0.10)


def test_nvidia_ioctls_counted_exactly(ebpf_exporter: ExporterProcess, tmp_path: Path) -> None:
    """'F' ioctls on NVIDIA character devices and 'd' ones on DRM devices, exactly; none of
    the decoys (the same types on /dev/null, a framebuffer, a block device, each other's
    device; other types on an NVIDIA device)."""
    n, m, k = 1234, 321, 777
    nodes = make_gpu_nodes(tmp_path)
    with kube_container() as container:
        caller = spawn(container, ISSUE_SCRIPT, str(nodes.directory), str(n), str(m), str(k))
        try:
            assert wait_line(caller) == "done"
            samples = settle(ebpf_exporter)
            ids = {"container_id": container.container_id}
            assert one(samples, IOCTLS, driver="nvidia", **ids) == n
            assert one(samples, IOCTLS, driver="drm", **ids) == m
            assert set(dict(lbl)["driver"] for lbl in select(samples, IOCTLS, **ids)) == {
                "nvidia",
                "drm",
            }
        finally:
            kill(caller)
        # through the exit path the counts stay exact
        samples = settle(ebpf_exporter)
        assert one(samples, IOCTLS, driver="nvidia", **ids) == n
        assert one(samples, IOCTLS, driver="drm", **ids) == m


def test_ebpf_and_procfs_agree(ebpf_exporter: ExporterProcess, tmp_path: Path) -> None:
    procfs = start_exporter(["--activity-source", "procfs", "--interval", INTERVAL], tmp_path)
    try:
        procfs.wait_next_interval()
        with kube_container() as flat_out, kube_container() as half:
            workers = [spawn(flat_out, BUSY, "2", "1"), spawn(half, BUSY, "1", "0.5")]
            try:
                for w in workers:
                    assert wait_line(w) == "done"
                by_ebpf = settle(ebpf_exporter)
                by_procfs = settle(procfs)
            finally:
                for w in workers:
                    kill(w)
            for container in (flat_out, half):
                ids = {"container_id": container.container_id}
                assert one(by_ebpf, CPU, **ids) == pytest.approx(
                    one(by_procfs, CPU, **ids), rel=0.05
                )
    finally:
        procfs.stop()


def test_auto_falls_back_to_procfs_without_privileges(tmp_path: Path) -> None:
    require_root()
    setpriv = require_binary("setpriv")
    no_bpf = [setpriv, "--bounding-set", "-sys_admin,-bpf,-perfmon", "--"]
    proc = start_exporter(["--interval", INTERVAL], tmp_path, prefix=no_bpf)
    try:
        samples = parse_samples(proc.wait_next_interval())
        ebpf = select(samples, "wattprobe_source_up", source="ebpf")
        assert ebpf == {frozenset({("source", "ebpf"), ("reason", "permission denied")}): 0.0}
        assert one(samples, "wattprobe_source_up", source="procfs") == 1.0
        assert one(samples, CPU, container="system_processes") >= 0
        warnings = [
            ln for ln in proc.log().splitlines() if "eBPF activity source unavailable" in ln
        ]
        assert len(warnings) == 1 and "using procfs" in warnings[0]
    finally:
        proc.stop()


def test_explicit_ebpf_without_privileges_exits_with_one_line() -> None:
    require_root()
    setpriv = require_binary("setpriv")
    line = explicit_ebpf_refusal([setpriv, "--bounding-set", "-sys_admin,-bpf,-perfmon", "--"])
    assert line.startswith("wattprobe: error: --activity.source ebpf: permission denied")
    # root, but without the capabilities: say which, and the fix the shipped manifests use
    assert "uid 0 (root) without CAP_BPF and CAP_PERFMON" in line
    assert "deploy/'s DaemonSet adds BPF, PERFMON" in line


def test_check_reports_ebpf_and_its_headers() -> None:
    require_ebpf()
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "check", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    ebpf = next(s for s in result["sources"] if s["source"] == "ebpf")
    assert ebpf["ok"], ebpf
    assert "headers" in ebpf["found"] and "compiled in" in ebpf["found"]
    # the default attaches nothing to sched_switch, and says why each program it attaches is there
    assert "sched:sched_switch" not in ebpf["found"]
    assert "no sched_switch program: CPU time from the cgroups' own totals" in ebpf["found"]
    assert any(i.startswith("sched:sched_process_exit: an ended") for i in ebpf["items"])
    # auto: the ioctl probe only where there are GPU device nodes to issue ioctls to
    ioctl_probe = "syscalls:sys_enter_ioctl"
    if gpu_device_nodes():
        assert f"{ioctl_probe}," in ebpf["found"]
    else:
        assert f"off: {ioctl_probe} (GPU ioctls)" in ebpf["found"]


# Busy for 0.8 s as a real-time task pinned to one CPU: nothing preempts it and it never blocks,
# so the scheduler never switches it out (RT throttling would, after 0.95 s).
NEVER_SWITCHED = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
end = time.monotonic() + 2.8
while time.monotonic() < end:
    pass
"""


def test_time_on_a_cpu_is_counted_before_the_task_is_switched_out() -> None:
    require_ebpf()
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415

    source = EbpfSource.start(Path("/proc"), Path("/sys/fs/cgroup"), None, False)
    cpu = max(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", NEVER_SWITCHED, str(cpu)])
    try:
        # a slice in flight is named by a once-a-second sample of its CPU (bpf/activity.c), then
        # credited with its runtime so far: never above schedstat read after, and behind it only
        # by what it ran since (tasks() returning on a loaded machine: 20 ms allowed). RT
        # throttling switches the task out about once a second (sched_rt_runtime_us), so the
        # name lasts until then.
        deadline = time.monotonic() + 2.5
        caught_up = False
        while time.monotonic() < deadline and not caught_up:
            counted = [s.cpu_seconds for s in source.tasks() if s.pid == busy.pid]
            ran = run_time_s(busy.pid)
            assert not counted or counted[0] <= ran, (counted, ran)
            caught_up = bool(counted) and counted[0] >= ran - 0.02 and counted[0] > 0.3
            time.sleep(0.05)
        assert caught_up, (counted, ran)
    finally:
        busy.wait(timeout=30)
        source.close()


SIXTY_PROCESSES = """
import os
for _ in range(60):
    os.waitpid(os.spawnv(os.P_NOWAIT, "/bin/true", ["true"]), 0)
"""


def test_evictions_of_a_full_map_are_counted() -> None:
    require_ebpf()
    from exporter.host.cgroupfs.ids import CgroupIdIndex  # noqa: PLC0415
    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415

    small = 64  # far fewer entries than the processes below
    source = EbpfSource(
        load(ioctls=False, max_tasks=small), Path("/proc"), CgroupIdIndex(v2_root())
    )
    try:
        source.tasks()
        for _ in range(3):
            subprocess.run([sys.executable, "-c", SIXTY_PROCESSES], check=True)
            source.tasks()
        tasks = next(m for m in source.map_stats() if m.map == "tasks")
        assert tasks.max_entries == small and tasks.entries <= small
        assert tasks.evictions > 0
    finally:
        source.close()


def anon_inode_fds() -> int:
    """Open BPF program, map and perf event fds of this process."""
    fd_dir = Path("/proc/self/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd).startswith("anon_inode:")
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
    return count


@pytest.mark.parametrize("raw_switch", [True, False], ids=["raw", "classic"])
def test_both_sched_switch_programs_count_time_and_ioctls(raw_switch: bool, tmp_path: Path) -> None:
    """The raw sched_switch program (what auto attaches on 5.18+) and the classic one it falls
    back to: run time within 2 % of schedstat, ioctls exact (they reach the process at its
    switch-out)."""
    require_ebpf()
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415

    source = EbpfSource.start(
        Path("/proc"), Path("/sys/fs/cgroup"), None, True, raw_switch=raw_switch
    )
    n, m, k = 2345, 123, 456
    nodes = make_gpu_nodes(tmp_path)
    try:
        assert source.info.switch_probe == ("raw" if raw_switch else "classic")
        assert f"sched:sched_switch ({source.info.switch_probe} tracepoint)" in (
            source.info.describe()
        )
        source.tasks()
        busy = subprocess.Popen(
            [
                sys.executable,
                "-c",
                BUSY_THEN_IOCTLS,
                "1.0",
                str(nodes.directory),
                str(n),
                str(m),
                str(k),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_line(busy) == "done"
            time.sleep(0.2)
            mine = [s for s in source.tasks() if s.pid == busy.pid]
            ran = run_time_s(busy.pid)
        finally:
            kill(busy)
        assert len(mine) == 1, mine
        # the raw program charges the kernel's own runtime; the classic one, the clock
        assert mine[0].cpu_seconds == pytest.approx(ran, rel=0.003 if raw_switch else 0.02)
        assert mine[0].gpu_ioctls == (("nvidia", n), ("drm", m))
    finally:
        source.close()


# Burns `seconds` of CPU, then runs ISSUE_SCRIPT (tests/support/gpunodes.py) with the rest of argv.
BUSY_THEN_IOCTLS = (
    """
import sys, time
seconds = float(sys.argv.pop(1))
end = time.thread_time() + seconds
while time.thread_time() < end:
    pass
"""
    + ISSUE_SCRIPT
)


def test_refused_raw_tracepoint_falls_back_to_the_classic_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As on a kernel without raw tracepoints (before 4.17) or without sched_switch's
    prev_state argument (before 5.18): one warning, the classic program, nothing left behind
    by the refused attempt."""
    require_ebpf()
    import bcc  # noqa: PLC0415

    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415

    def refuse(self: object, tp: bytes = b"", fn_name: bytes = b"") -> None:
        raise Exception("Failed to attach BPF to raw tracepoint")  # bcc's own words

    monkeypatch.setattr(bcc.BPF, "attach_raw_tracepoint", refuse)
    before = anon_inode_fds()
    loaded = load(ioctls=False)
    try:
        assert loaded.info.switch_probe == "classic"
        assert b"sched:sched_switch" in loaded.bpf.tracepoint_fds
        assert not loaded.bpf.raw_tracepoint_fds
        warnings = [r.getMessage() for r in caplog.records if "raw tracepoint" in r.getMessage()]
        assert len(warnings) == 1 and "using the classic" in warnings[0]
        time.sleep(0.1)
        assert len(loaded.bpf[b"tasks"]) > 0  # it counts
    finally:
        loaded.bpf.cleanup()
    assert anon_inode_fds() == before  # the refused attempt's programs were detached too


def test_interrupt_time_is_reported_as_a_kernel_task_where_it_is_outside_task_runtime() -> None:
    """The real source with the loader's irq_time_apart set (this CI kernel is tick-accounted,
    so the loader leaves it off here: test_ebpf_btf.py checks that against /proc/config.gz):
    its samples carry one [irq] kernel task whose time is /proc/stat's irq + softirq growth."""
    require_ebpf()
    from dataclasses import replace  # noqa: PLC0415

    from exporter.host.cgroupfs.ids import CgroupIdIndex  # noqa: PLC0415
    from exporter.host.procstat import CLOCK_TICKS, irq_ticks  # noqa: PLC0415
    from exporter.sources.activity.ebpf.interrupts import IRQ_KEY  # noqa: PLC0415
    from exporter.sources.activity.ebpf.load import Loaded, load  # noqa: PLC0415
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415

    loaded = load(ioctls=False)
    assert loaded.info.irq_time_apart is False  # tick-based accounting on this kernel
    forced = Loaded(loaded.bpf, replace(loaded.info, irq_time_apart=True))
    source = EbpfSource(forced, Path("/proc"), CgroupIdIndex(v2_root()))
    try:
        first = irq_ticks(Path("/proc/stat").read_text())
        before = {t.key: t for t in source.tasks()}
        subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)
        after = {t.key: t for t in source.tasks()}
        last = irq_ticks(Path("/proc/stat").read_text())
        irq = after[IRQ_KEY]
        assert irq.kernel_thread and irq.comm == "[irq]" and irq.cgroup == ""
        assert before[IRQ_KEY].cpu_seconds == 0.0  # from the source's first read, not boot
        # the growth between the source's two reads lies within the growth around them
        assert 0.0 <= irq.cpu_seconds <= (last - first) / CLOCK_TICKS
    finally:
        source.close()
