"""Overhead of the eBPF activity probes (bpf/activity.c). Run as root:

    .venv/bin/python -m tests.benchmarks.ebpf_bench [--rounds 7] [--trips 100000]

Measures, and prints as a Markdown table:
- bcc compile-and-attach time of the probes (what `wattprobe serve` pays once at start-up);
- a context-switch-heavy microbenchmark: two processes pinned to one CPU bounce a byte through
  pipes (every round trip is two context switches and four syscalls), with and without the probes
  attached; runs of the settings (none; empty sched_switch programs, classic and raw; the
  scheduler probes and all probes, each with the raw sched_switch program wattprobe attaches and
  with the classic one it falls back to) are interleaved in rotating order and each is compared
  with the bare run of the same round, so drift on a shared machine cancels; the pair runs
  SCHED_FIFO so other tenants' tasks do not take turns inside a run (an attached syscall
  tracepoint puts every syscall of every task on the kernel's tracing path, ioctl or not, hence
  the two probe settings);
- the mean run time per event of each program from the kernel's own BPF statistics
  (kernel.bpf_stats_enabled, run_time_ns / run_cnt in the program's fdinfo), with separate
  figures for ioctls the program filters out by type, 'F' ioctls on a file that is no NVIDIA
  device (/dev/null: the program looks the fd's device up and lets it go) and 'F' ioctls on an
  NVIDIA device node (mknod'd, tests/support/gpunodes.py: counted), and the same for empty programs
  on
  the same hooks: what the statistics and the call itself cost;
- the exporter's resident memory after start-up with the eBPF source and with procfs, and what
  one interval's read of each source costs (wattprobe_collect_duration_seconds);
- the probes summing per cgroup (the default without --collector.process) beside those keeping
  an entry per process: their per-event costs and ping-pong settings, against empty programs at
  every point the probes attach to; and what one read of the eBPF source costs user space
  (whole-process CPU) with 5,000 processes in 330 containers, in each mode (--userspace).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.host.cgroupfs.ids import find_v2_root
from exporter.sources.activity.ebpf.load import RAW, SCHED_SWITCH, Loaded, bcc_environment, load
from tests.support.gpunodes import make_gpu_nodes
from tests.support.running import parse_samples, select, start_exporter

HERE = Path(__file__).resolve().parent
RAW_SWITCH_FN = "raw_tracepoint__sched_switch"
PROGRAMS = {
    "sched:sched_switch": "tracepoint__sched__sched_switch",
    "sched:sched_process_exit": "tracepoint__sched__sched_process_exit",
    "sched:sched_process_exec": "tracepoint__sched__sched_process_exec",
    "syscalls:sys_enter_ioctl": "tracepoint__syscalls__sys_enter_ioctl",
    "cgroup:cgroup_attach_task": "tracepoint__cgroup__cgroup_attach_task",
    "cgroup:cgroup_mkdir": "tracepoint__cgroup__cgroup_mkdir",
}
SCHED_ONLY = ("sched:sched_switch", "sched:sched_process_exit", "sched:sched_process_exec")
IOCTL = "syscalls:sys_enter_ioctl"
TCGETS = 0x5401  # a terminal ioctl: the probe looks at its type and lets it go
NVIDIA_CMD = 0xC0104601  # _IOWR('F', 1, 16): the probe counts it on an NVIDIA device
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


@dataclass
class Probes:
    """The loaded programs, attached or not."""

    loaded: Loaded

    @property
    def bpf(self) -> Any:
        return self.loaded.bpf

    @property
    def raw(self) -> bool:
        return self.loaded.info.switch_probe == RAW

    def attach(self, which: tuple[str, ...] = tuple(PROGRAMS)) -> None:
        for tp in which:
            if tp not in self.loaded.info.tracepoints:
                continue
            if tp == SCHED_SWITCH and self.raw:
                if b"sched_switch" not in self.bpf.raw_tracepoint_fds:
                    self.bpf.attach_raw_tracepoint(
                        tp=b"sched_switch", fn_name=RAW_SWITCH_FN.encode()
                    )
            elif tp.encode() not in self.bpf.tracepoint_fds:
                self.bpf.attach_tracepoint(tp=tp.encode(), fn_name=PROGRAMS[tp].encode())

    def detach(self) -> None:
        for tp in list(self.bpf.tracepoint_fds):
            self.bpf.detach_tracepoint(tp)
        for tp in list(self.bpf.raw_tracepoint_fds):
            self.bpf.detach_raw_tracepoint(tp)

    def run_stats(self) -> dict[str, tuple[int, int]]:
        """(run_time_ns, run_cnt) per loaded program, from the kernel's fdinfo."""
        functions = dict(PROGRAMS)
        if self.raw:
            functions[SCHED_SWITCH] = RAW_SWITCH_FN
        return {
            tp: fd_run_stats(self.bpf, fn)
            for tp, fn in functions.items()
            if fn_loaded(self.bpf, fn)
        }


def fn_loaded(bpf: Any, fn: str) -> bool:
    return fn.encode() in bpf.funcs


def fd_run_stats(bpf: Any, fn: str) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of one program, from the kernel's fdinfo."""
    fields = {}
    for line in Path(f"/proc/self/fdinfo/{bpf.funcs[fn.encode()].fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return int(fields.get("run_time_ns", 0)), int(fields.get("run_cnt", 0))


def build_load(tmp: Path) -> Path:
    binary = tmp / "pingpong"
    subprocess.run(
        ["gcc", "-O2", "-o", str(binary), str(HERE / "pingpong.c")], check=True, capture_output=True
    )
    return binary


def run_load(binary: Path, *args: str, realtime: bool = False) -> float:
    env = {**os.environ, "WATTPROBE_BENCH_RT": "1" if realtime else "0"}
    done = subprocess.run([str(binary), *args], check=True, capture_output=True, text=True, env=env)
    return float(done.stdout)


@contextlib.contextmanager
def bpf_stats() -> Iterator[None]:
    before = STATS_SYSCTL.read_text().strip()
    STATS_SYSCTL.write_text("1")
    try:
        yield
    finally:
        STATS_SYSCTL.write_text(before)


def per_event(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[float, int]]:
    """(mean ns per run, runs) of each program between two readings of its stats."""
    out = {}
    for tp, (ns, cnt) in after.items():
        ns0, cnt0 = before.get(tp, (0, 0))
        if cnt > cnt0:
            out[tp] = ((ns - ns0) / (cnt - cnt0), cnt - cnt0)
    return out


@dataclass
class PingPong:
    """ns per round trip in each setting, and the per-round ratios to the bare run."""

    bare: list[float]
    runs: dict[str, list[float]]

    def median(self, setting: str) -> float:
        return statistics.median(self.runs[setting])

    def slowdown(self, setting: str) -> tuple[float, float, float]:
        """Median per-round ratio minus one, with a 95 % confidence interval (distribution-free,
        from order statistics): each run is compared with the bare run of its round, so load
        from other tenants that changes between rounds cancels."""
        ratios = sorted(on / off - 1 for on, off in zip(self.runs[setting], self.bare, strict=True))
        n = len(ratios)
        half_width = 0.98 * math.sqrt(n)  # 1.96 sqrt(n) / 2 ranks either side of the middle
        low = max(0, math.floor(n / 2 - half_width))
        high = min(n - 1, math.ceil(n / 2 + half_width) - 1)
        return statistics.median(ratios), ratios[low], ratios[high]

    def quartile_slowdown(self, setting: str) -> float:
        """Ratio of the lower quartiles minus one: interference on a shared VM (steal, other
        tenants) only ever adds time, so the faster runs of each setting are the cleaner ones."""
        return lower_quartile(self.runs[setting]) / lower_quartile(self.bare) - 1


def lower_quartile(values: list[float]) -> float:
    return statistics.quantiles(values, n=4)[0] if len(values) > 1 else values[0]


EMPTY_PROGRAMS = """
TRACEPOINT_PROBE(sched, sched_switch) { return 0; }
RAW_TRACEPOINT_PROBE(sched_switch) { return 0; }
TRACEPOINT_PROBE(syscalls, sys_enter_ioctl) { return 0; }
RAW_TRACEPOINT_PROBE(sched_process_exit) { return 0; }
RAW_TRACEPOINT_PROBE(sched_process_exec) { return 0; }
RAW_TRACEPOINT_PROBE(cgroup_attach_task) { return 0; }
RAW_TRACEPOINT_PROBE(cgroup_mkdir) { return 0; }
"""
EMPTY_CLASSIC = ("tracepoint", b"sched:sched_switch", b"tracepoint__sched__sched_switch")
EMPTY_RAW = ("raw", b"sched_switch", b"raw_tracepoint__sched_switch")
EMPTY_IOCTL = ("tracepoint", b"syscalls:sys_enter_ioctl", b"tracepoint__syscalls__sys_enter_ioctl")
EMPTY_EXIT = ("raw", b"sched_process_exit", b"raw_tracepoint__sched_process_exit")
EMPTY_EXEC = ("raw", b"sched_process_exec", b"raw_tracepoint__sched_process_exec")
EMPTY_ATTACH = ("raw", b"cgroup_attach_task", b"raw_tracepoint__cgroup_attach_task")
EMPTY_MKDIR = ("raw", b"cgroup_mkdir", b"raw_tracepoint__cgroup_mkdir")
# Empty programs at the points the probes attach to, raw tracepoints where one exists (the
# syscall tracepoint has no raw form per syscall: an empty classic one), the floor any eBPF tool
# watching the same events pays
EMPTY_SCHED_POINTS = (EMPTY_RAW, EMPTY_EXIT, EMPTY_EXEC)
EMPTY_ALL_POINTS = (*EMPTY_SCHED_POINTS, EMPTY_IOCTL, EMPTY_ATTACH, EMPTY_MKDIR)


class EmptyPrograms:
    """Programs that do nothing on the hooks wattprobe uses: the floor each kind of attachment
    pays (a classic tracepoint formats the event before the program runs, a raw one does not),
    and what the BPF statistics add to a program's measured run time."""

    def __init__(self, loaded: Loaded) -> None:
        import bcc  # noqa: PLC0415 (only when benchmarking)

        with bcc_environment(loaded.info.headers.environment()):
            self.bpf = bcc.BPF(text=EMPTY_PROGRAMS, cflags=loaded.info.headers.cflags())
        for empty in (EMPTY_CLASSIC, *EMPTY_ALL_POINTS):
            self.detach(empty)

    def attach(self, empty: tuple[str, bytes, bytes]) -> None:
        kind, tp, fn = empty
        if kind == "raw":
            self.bpf.attach_raw_tracepoint(tp=tp, fn_name=fn)
        else:
            self.bpf.attach_tracepoint(tp=tp, fn_name=fn)

    def detach(self, empty: tuple[str, bytes, bytes]) -> None:
        kind, tp, _ = empty
        if kind == "raw":
            self.bpf.detach_raw_tracepoint(tp)
        else:
            self.bpf.detach_tracepoint(tp)

    def run_stats(self, empty: tuple[str, bytes, bytes]) -> tuple[int, int]:
        return fd_run_stats(self.bpf, empty[2].decode())


# ping-pong settings, besides "bare" (no probes), and what each attaches
SETTINGS = {
    "empty": "an empty classic sched_switch program",
    "empty_raw": "an empty raw sched_switch program",
    "empty_sched_points": "empty programs at the scheduler probes' points (raw)",
    "empty_all_points": "empty programs at all probes' points (raw; classic sys_enter_ioctl)",
    "sched": "the scheduler probes (raw sched_switch)",
    "sched_cgroup": "the scheduler probes, sums per cgroup (the default without "
    "--collector.process)",
    "sched_classic": "the scheduler probes (classic sched_switch)",
    "all": "all probes, raw sched_switch (what wattprobe attaches)",
    "all_classic": "all probes, classic sched_switch (the fallback)",
    "all_cgroup": "all probes, sums per cgroup (GPU nodes without --collector.process)",
    "sched_baseline": "the scheduler probes of the baseline",
    "all_baseline": "all probes of the baseline",
}


def pingpong(
    raw: Probes,
    classic: Probes,
    empty: EmptyPrograms,
    binary: Path,
    *,
    rounds: int,
    trips: int,
    baseline: Probes | None = None,
    per_cgroup: Probes | None = None,
    only: tuple[str, ...] = tuple(SETTINGS),
) -> PingPong:
    """Runs with no probes and with each setting in `only` (SETTINGS; the baseline ones only
    with a baseline), rotating the order every round."""
    known: dict[
        str, tuple[Probes | None, tuple[str, ...], tuple[tuple[str, bytes, bytes], ...]]
    ] = {
        "bare": (None, (), ()),
        "empty": (None, (), (EMPTY_CLASSIC,)),
        "empty_raw": (None, (), (EMPTY_RAW,)),
        "empty_sched_points": (None, (), EMPTY_SCHED_POINTS),
        "empty_all_points": (None, (), EMPTY_ALL_POINTS),
        "sched": (raw, SCHED_ONLY, ()),
        "sched_classic": (classic, SCHED_ONLY, ()),
        "all": (raw, tuple(PROGRAMS), ()),
        "all_classic": (classic, tuple(PROGRAMS), ()),
    }
    if baseline is not None:
        known["sched_baseline"] = (baseline, SCHED_ONLY, ())
        known["all_baseline"] = (baseline, tuple(PROGRAMS), ())
    if per_cgroup is not None:
        known["sched_cgroup"] = (per_cgroup, SCHED_ONLY, ())
        known["all_cgroup"] = (per_cgroup, tuple(PROGRAMS), ())
    settings = {name: known[name] for name in ("bare", *only) if name in known}
    runs: dict[str, list[float]] = {name: [] for name in settings}
    cpu = str(min(os.sched_getaffinity(0)))
    names = list(settings)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            probes, which, empty_progs = settings[name]
            if probes is not None:
                probes.attach(which)
            for prog in empty_progs:
                empty.attach(prog)
            runs[name].append(run_load(binary, "pingpong", str(trips), cpu, realtime=True))
            if probes is not None:
                probes.detach()
            for prog in empty_progs:
                empty.detach(prog)
    return PingPong(runs.pop("bare"), runs)


def syscall_cost(probes: Probes, binary: Path, rounds: int, calls: int) -> tuple[float, float]:
    """Median ns per getppid() without probes and with only the ioctl probe attached: what an
    attached syscall tracepoint costs every syscall of every task."""
    bare: list[float] = []
    with_probe: list[float] = []
    for r in range(rounds):
        for attached in (False, True) if r % 2 == 0 else (True, False):
            probes.detach()
            if attached:
                probes.attach(("syscalls:sys_enter_ioctl",))
            (with_probe if attached else bare).append(
                run_load(binary, "syscall", str(calls), realtime=True)
            )
    probes.detach()
    return statistics.median(bare), statistics.median(with_probe)


def cgroup_churn(times: int) -> None:
    """Make a cgroup v2 directory, move this process in and out, remove it: rare events (the
    cgroup_mkdir and cgroup_attach_task probes), timed only so the table has them."""
    root = find_v2_root(Path("/sys/fs/cgroup"))
    if root is None:
        return
    me = str(os.getpid())
    home = root / next(
        ln[3:] for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")
    ).lstrip("/")
    for i in range(times):
        d = root / f"wattprobe-bench-{os.getpid()}-{i}"
        d.mkdir()
        try:
            (d / "cgroup.procs").write_text(me)
            (home / "cgroup.procs").write_text(me)
        finally:
            d.rmdir()


def exporter_figures(source: str, log_dir: Path) -> tuple[float, float, float]:
    """(RSS and its anonymous part in MiB after three intervals, seconds one read of the
    activity source took)."""
    proc = start_exporter(["--activity-source", source, "--interval", "1s"], log_dir)
    try:
        body = ""
        for _ in range(3):
            body = proc.wait_next_interval(timeout=60)
        status = Path(f"/proc/{proc.proc.pid}/status").read_text()
        kib = {ln.split(":")[0]: int(ln.split()[1]) for ln in status.splitlines() if "kB" in ln}
        samples = parse_samples(body)
        took = select(samples, "wattprobe_collect_duration_seconds", source=source)
        return kib["VmRSS"] / 1024, kib["RssAnon"] / 1024, sum(took.values())
    finally:
        proc.stop()


def program_costs(
    probes: Probes, binary: Path, trips: int, ioctls: int, nvidia: Path
) -> dict[str, tuple[float, int]]:
    """Mean ns per event of each program, from the kernel's BPF statistics: context switches
    (a ping-pong run), exec and exit (/bin/true), cgroup events, then ioctls whose type the
    program lets go ("ioctl filtered"), 'F' ioctls on /dev/null ("ioctl other device": counted
    before ioctls were told by their device, looked up and let go since) and 'F' ioctls on the
    NVIDIA device node `nvidia` ("ioctl counted")."""
    cpu = str(min(os.sched_getaffinity(0)))
    with bpf_stats():
        probes.attach()
        stats = [probes.run_stats()]
        run_load(binary, "pingpong", str(trips), cpu)
        for _ in range(100):
            subprocess.run(["/bin/true"], check=True)
        cgroup_churn(50)
        stats.append(probes.run_stats())
        for cmd, path in ((TCGETS, "/dev/null"), (NVIDIA_CMD, "/dev/null"), (NVIDIA_CMD, nvidia)):
            run_load(binary, "ioctl", str(ioctls), hex(cmd), str(path))
            stats.append(probes.run_stats())
        probes.detach()
    out = per_event(stats[0], stats[1])
    for i, name in enumerate(IOCTL_PHASES):
        if IOCTL in (phase := per_event(stats[i + 1], stats[i + 2])):
            out[name] = phase[IOCTL]
    return out


IOCTL_PHASES = ("ioctl filtered", "ioctl other device", "ioctl counted")


def slices_with_ioctls(
    probes: Probes, rounds: int, trips: int, nvidia: Path
) -> tuple[float, float]:
    """Mean ns per event of the sched_switch program when no slice carries GPU ioctls and when
    every slice does (each side of a ping-pong issues one 'F' ioctl per trip): the counted
    ioctl's deferred part, added to the process when its thread leaves the CPU."""
    fn = RAW_SWITCH_FN if probes.raw else PROGRAMS[SCHED_SWITCH]
    results: dict[bool, list[float]] = {False: [], True: []}
    with bpf_stats():
        probes.attach((SCHED_SWITCH, IOCTL))
        for r in range(rounds):
            for ioctl in (False, True) if r % 2 else (True, False):
                ns0, n0 = fd_run_stats(probes.bpf, fn)
                python_pingpong(trips, nvidia if ioctl else None)
                ns1, n1 = fd_run_stats(probes.bpf, fn)
                results[ioctl].append((ns1 - ns0) / max(1, n1 - n0))
        probes.detach()
    return statistics.median(results[False]), statistics.median(results[True])


def python_pingpong(trips: int, nvidia: Path | None) -> None:
    """Two processes on one CPU bounce a byte; with an NVIDIA device node, each issues an 'F'
    ioctl on it per trip."""
    ab, ba = os.pipe(), os.pipe()
    cpu = {min(os.sched_getaffinity(0))}
    child = os.fork()
    if child == 0:
        os.sched_setaffinity(0, cpu)
        node = os.open(nvidia, os.O_PATH) if nvidia else -1
        for _ in range(trips):
            os.read(ab[0], 1)
            if node >= 0:
                with contextlib.suppress(OSError):
                    fcntl.ioctl(node, NVIDIA_CMD, bytes(16))
            os.write(ba[1], b"x")
        os._exit(0)
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpu)
    node = os.open(nvidia, os.O_PATH) if nvidia else -1
    try:
        for _ in range(trips):
            if node >= 0:
                with contextlib.suppress(OSError):
                    fcntl.ioctl(node, NVIDIA_CMD, bytes(16))
            os.write(ab[1], b"x")
            os.read(ba[0], 1)
        os.waitpid(child, 0)
    finally:
        os.sched_setaffinity(0, saved)
        for fd in (*ab, *ba, *([node] if node >= 0 else [])):
            os.close(fd)


def empty_costs(
    empty: EmptyPrograms, binary: Path, trips: int, ioctls: int
) -> dict[str, tuple[float, int]]:
    """Mean ns per event of programs that do nothing: the BPF statistics' own cost (two clock
    reads per run) and the call, the floor under every figure above."""
    cpu = str(min(os.sched_getaffinity(0)))
    hooks = {
        "classic sched_switch": EMPTY_CLASSIC,
        "raw sched_switch": EMPTY_RAW,
        "sys_enter_ioctl": EMPTY_IOCTL,
        "raw sched_process_exit": EMPTY_EXIT,
        "raw sched_process_exec": EMPTY_EXEC,
    }
    with bpf_stats():
        for hook in hooks.values():
            empty.attach(hook)
        before = {name: empty.run_stats(hook) for name, hook in hooks.items()}
        run_load(binary, "pingpong", str(trips), cpu)
        run_load(binary, "ioctl", str(ioctls), hex(TCGETS))
        for _ in range(100):
            subprocess.run(["/bin/true"], check=True)
        after = {name: empty.run_stats(hook) for name, hook in hooks.items()}
        for hook in hooks.values():
            empty.detach(hook)
    return per_event(before, after)


# What a raw sched_switch program's parts cost: each variant does one more thing than "empty"
BREAKDOWN = {
    "empty": "return 0;",
    "clock read (bpf_ktime_get_ns)": "return bpf_ktime_get_ns() & 1;",
    "helper call (bpf_get_current_pid_tgid)": "return bpf_get_current_pid_tgid() & 1;",
    "helper call + hash look-up by tgid": (
        "u32 tgid = bpf_get_current_pid_tgid() >> 32; return tasks.lookup(&tgid) != 0;"
    ),
}
BREAKDOWN_MAPS = 'BPF_TABLE("lru_hash", u32, u64, tasks, 32768);\n'


def breakdown(loaded: Loaded, binary: Path, rounds: int, trips: int) -> dict[str, float]:
    """Median ns per event of each BREAKDOWN variant over ping-pong runs, interleaved."""
    import bcc  # noqa: PLC0415 (only when benchmarking)

    variants = {}
    for name, body in BREAKDOWN.items():
        text = f"{BREAKDOWN_MAPS}RAW_TRACEPOINT_PROBE(sched_switch) {{ {body} }}"
        with bcc_environment(loaded.info.headers.environment()):
            bpf = bcc.BPF(text=text, cflags=loaded.info.headers.cflags())
        bpf.detach_raw_tracepoint(b"sched_switch")
        variants[name] = bpf
    per_event: dict[str, list[float]] = {name: [] for name in variants}
    cpu = str(min(os.sched_getaffinity(0)))
    try:
        with bpf_stats():
            for _ in range(rounds):
                for name, bpf in variants.items():
                    bpf.attach_raw_tracepoint(tp=b"sched_switch", fn_name=RAW_SWITCH_FN.encode())
                    ns0, n0 = fd_run_stats(bpf, RAW_SWITCH_FN)
                    run_load(binary, "pingpong", str(trips), cpu, realtime=True)
                    ns1, n1 = fd_run_stats(bpf, RAW_SWITCH_FN)
                    bpf.detach_raw_tracepoint(b"sched_switch")
                    per_event[name].append((ns1 - ns0) / max(1, n1 - n0))
    finally:
        for bpf in variants.values():
            bpf.cleanup()
    return {name: statistics.median(values) for name, values in per_event.items()}


def userspace_cost(
    processes: int, intervals: int, interval_s: float, scratch: Path
) -> list[tuple[str, str]]:
    """CPU of the whole process (getrusage: every thread, user + system) per read of the eBPF
    source, with an entry per process and with sums per cgroup, on this machine made as busy as
    the benchmark node: `processes` processes in all, the added ones in 110 pods x 3 containers
    of real cgroup v2 directories, each waking about once per interval. Both sources are loaded
    at once and read in alternating order every interval."""
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415
    from tests.benchmarks.livenode import kube_pods, processes_now, sleepers  # noqa: PLC0415

    proc, cgroupfs = Path("/proc"), Path("/sys/fs/cgroup")
    sources = {
        "per process": EbpfSource.start(proc, cgroupfs, gpu_ioctls=False, per_process=True),
        "default (no sched_switch)": EbpfSource.start(
            proc, cgroupfs, gpu_ioctls=False, per_process=False
        ),
    }
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    samples: dict[str, list[int]] = {name: [] for name in sources}
    added = max(processes - processes_now(), 0)
    period_ms = int(interval_s * 1000)
    try:
        with (
            kube_pods(110, 3) as scopes,
            sleepers(added, scratch, period_ms=period_ms, spin_us=200, cgroups=scopes),
        ):
            total = processes_now()
            for _ in range(2):  # the first read looks every new entry up in /proc
                time.sleep(interval_s)
                for source in sources.values():
                    source.tasks()
            names = list(sources)
            for i in range(intervals):
                time.sleep(interval_s)
                for name in names[i % 2 :] + names[: i % 2]:
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    got = sources[name].tasks()
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    cpu[name].append(
                        after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                    )
                    samples[name].append(len(got))
            entries = {
                name: {s.map: s.entries for s in source.map_stats()}
                for name, source in sources.items()
            }
    finally:
        for source in sources.values():
            source.close()
    rows = []
    for name in sources:
        ms = 1e3 * statistics.median(cpu[name])
        rows.append(
            (
                f"one read of the eBPF source, {name}, {total} processes in 330 containers "
                f"(whole-process CPU, median of {intervals} intervals of {interval_s:g} s)",
                f"{ms:.1f} ms ({100 * ms / 1e3 / interval_s:.2f} % of a core at this interval; "
                f"{statistics.median(samples[name]):.0f} samples, map entries "
                f"tasks {entries[name]['tasks']}, exited {entries[name]['exited']})",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="ping-pong runs per setting")
    parser.add_argument(
        "--trips",
        type=int,
        default=30_000,
        help="round trips per run (keep a run well under "
        "the 0.95 s a real-time task may run per second)",
    )
    parser.add_argument("--ioctls", type=int, default=500_000, help="ioctl calls per phase")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another bpf/activity.c (e.g. `git show main:bpf/activity.c > old.c`) to measure "
        "alongside, with the classic sched_switch tracepoint, in the same interleaved rounds",
    )
    parser.add_argument(
        "--settings",
        help="comma-separated ping-pong settings to run besides bare (default: all of "
        f"{', '.join(SETTINGS)})",
    )
    parser.add_argument(
        "--pingpong-only", action="store_true", help="only the ping-pong, none of the rest"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also measure what the parts of a raw sched_switch program cost (clock, helper "
        "call, hash look-up)",
    )
    parser.add_argument(
        "--userspace",
        type=int,
        default=5000,
        metavar="PROCESSES",
        help="the CPU one read of the eBPF source costs, per process and per cgroup, with this "
        "many processes on the machine (livenode's sleepers in 110 pods x 3 containers); 0: skip",
    )
    parser.add_argument(
        "--userspace-only", action="store_true", help="only the --userspace measurement"
    )
    parser.add_argument("--userspace-intervals", type=int, default=10)
    parser.add_argument("--userspace-interval", type=float, default=1.0, help="seconds")
    args = parser.parse_args(argv)
    only = tuple(args.settings.split(",")) if args.settings else tuple(SETTINGS)
    if unknown := set(only) - set(SETTINGS):
        parser.error(f"unknown settings: {', '.join(sorted(unknown))}")
    logging.basicConfig(level=logging.WARNING)
    if os.geteuid() != 0:
        print("ebpf_bench: needs root (loads BPF programs, sets kernel.bpf_stats_enabled)")
        return 2

    rows: list[tuple[str, str]] = []
    if args.userspace_only:
        with tempfile.TemporaryDirectory() as tmpdir:
            rows = userspace_cost(
                args.userspace, args.userspace_intervals, args.userspace_interval, Path(tmpdir)
            )
        print(f"kernel {platform.release()}, {os.cpu_count()} CPUs\n")
        print("| measure | value |")
        print("|---|---|")
        for measure, value in rows:
            print(f"| {measure} | {value} |")
        return 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        binary = build_load(tmp)
        start = time.perf_counter()
        loaded = load()  # what serve does: the raw sched_switch program where the kernel has it
        load_s = time.perf_counter() - start
        loaded_classic = load(raw_switch=False)
        loaded_cgroup = load(per_process=False)
        raw, classic = Probes(loaded), Probes(loaded_classic)
        per_cgroup = Probes(loaded_cgroup)
        baseline = Probes(load(raw_switch=False, source=args.baseline)) if args.baseline else None
        empty = EmptyPrograms(loaded)
        info = loaded.info
        rows.append(
            (
                "bcc compile + attach at start-up",
                f"{info.compile_s:.2f} s ({load_s:.2f} s in all); sched_switch: "
                f"{info.switch_probe} tracepoint",
            )
        )
        try:
            for probes in (raw, classic, baseline, per_cgroup):
                if probes is not None:
                    probes.detach()
            pp = pingpong(
                raw,
                classic,
                empty,
                binary,
                rounds=args.rounds,
                trips=args.trips,
                baseline=baseline,
                per_cgroup=per_cgroup,
                only=only,
            )
            if not args.pingpong_only:
                nvidia = make_gpu_nodes(tmp / "gpu").nvidia0
                rows += kernel_rows(
                    raw,
                    classic,
                    baseline,
                    empty,
                    binary=binary,
                    args=args,
                    nvidia=nvidia,
                    per_cgroup=per_cgroup,
                )
        finally:
            loaded.bpf.cleanup()
            loaded_classic.bpf.cleanup()
            loaded_cgroup.bpf.cleanup()
            if baseline is not None:
                baseline.bpf.cleanup()
            empty.bpf.cleanup()
        rows += pingpong_rows(pp, args.rounds)
        if not args.pingpong_only:
            rows += exporter_rows(tmp)
            if args.userspace:
                rows += userspace_cost(
                    args.userspace, args.userspace_intervals, args.userspace_interval, tmp
                )

    print(f"kernel {platform.release()}, {os.cpu_count()} CPUs; {info.headers.describe()}\n")
    print("| measure | value |")
    print("|---|---|")
    for measure, value in rows:
        print(f"| {measure} | {value} |")
    return 0


def kernel_rows(
    raw: Probes,
    classic: Probes,
    baseline: Probes | None,
    empty: EmptyPrograms,
    *,
    binary: Path,
    args: argparse.Namespace,
    nvidia: Path,
    per_cgroup: Probes,
) -> list[tuple[str, str]]:
    """Per-event costs of the programs, and what the ioctl probe costs every syscall."""
    syscall_bare, syscall_probe = syscall_cost(raw, binary, args.rounds, 200_000)
    costs = {
        "raw": program_costs(raw, binary, args.trips, args.ioctls, nvidia),
        "classic": program_costs(classic, binary, args.trips, args.ioctls, nvidia),
        "default": program_costs(per_cgroup, binary, args.trips, args.ioctls, nvidia),
    }
    if baseline is not None:
        costs["baseline"] = program_costs(baseline, binary, args.trips, args.ioctls, nvidia)
    floors = empty_costs(empty, binary, args.trips, args.ioctls)
    plain_slice, ioctl_slice = slices_with_ioctls(raw, rounds=9, trips=5000, nvidia=nvidia)
    parts = breakdown(raw.loaded, binary, 9, args.trips) if args.breakdown else {}

    rows = []
    for kind, cost in costs.items():
        ns, n = cost.get(SCHED_SWITCH, (float("nan"), 0))
        rows.append((f"sched_switch program ({kind}), mean per event", f"{ns:.0f} ns ({n} events)"))
    for tp in (*SCHED_ONLY[1:], "cgroup:cgroup_attach_task", "cgroup:cgroup_mkdir"):
        for version in ("raw", "default"):
            if tp in costs[version]:
                ns, n = costs[version][tp]
                which = "" if version == "raw" else " (default build)"
                rows.append((f"{tp} program{which}, mean per event", f"{ns:.0f} ns ({n} events)"))
    labels = {
        "ioctl filtered": "other ioctl types (filtered out)",
        "ioctl other device": "'F' ioctls on /dev/null (device looked up, not NVIDIA's)",
        "ioctl counted": "'F' ioctls on an NVIDIA device node (counted)",
    }
    for phase, label in labels.items():
        for version in [v for v in ("raw", "raw, per cgroup", "baseline") if v in costs]:
            ns, n = costs[version].get(phase, (float("nan"), 0))
            which = "" if version == "raw" else f" ({version})"
            rows.append(
                (
                    f"syscalls:sys_enter_ioctl program{which}, {label}",
                    f"{ns:.0f} ns/call ({n} calls)",
                )
            )
    rows.append(
        (
            "sched_switch program (raw), no slice / every slice with an 'F' ioctl to add",
            f"{plain_slice:.0f} / {ioctl_slice:.0f} ns",
        )
    )
    for what, ns in parts.items():
        rows.append((f"raw sched_switch program part: {what}, mean per event", f"{ns:.0f} ns"))
    for what, (ns, n) in floors.items():
        rows.append((f"empty program, {what}, mean per event", f"{ns:.0f} ns ({n} events)"))
    rows.append(
        (
            "getppid(2), no probes / ioctl probe attached (every syscall pays)",
            f"{syscall_bare:.0f} / {syscall_probe:.0f} ns/call",
        )
    )
    return rows


def pingpong_rows(pp: PingPong, rounds: int) -> list[tuple[str, str]]:
    rows = [
        (
            f"pipe ping-pong round trip, no probes (median of {rounds})",
            f"{statistics.median(pp.bare):.0f} ns",
        )
    ]
    for setting, label in SETTINGS.items():
        if setting not in pp.runs:
            continue
        mid, low, high = pp.slowdown(setting)
        rows.append(
            (
                f"pipe ping-pong, {label}: slowdown (median of {rounds} paired runs, 95 % "
                "CI; ratio of lower quartiles), median round trip",
                f"{100 * mid:+.1f} % ({100 * low:+.1f} .. {100 * high:+.1f} %; "
                f"{100 * pp.quartile_slowdown(setting):+.1f} %), {pp.median(setting):.0f} ns",
            )
        )
    return rows


def exporter_rows(tmp: Path) -> list[tuple[str, str]]:
    rss_ebpf, anon_ebpf, read_ebpf = exporter_figures("ebpf", tmp)
    rss_procfs, anon_procfs, read_procfs = exporter_figures("procfs", tmp)
    return [
        (
            "exporter RSS after 3 intervals, eBPF / procfs (anonymous part)",
            f"{rss_ebpf:.0f} ({anon_ebpf:.0f}) / {rss_procfs:.0f} ({anon_procfs:.0f}) MiB",
        ),
        (
            "one read of the activity source per interval, eBPF / procfs",
            f"{1e3 * read_ebpf:.1f} / {1e3 * read_procfs:.1f} ms",
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
