"""Overhead of the eBPF activity probes (bpf/activity.c). Run as root:

    .venv/bin/python -m tests.benchmarks.ebpf_bench [--rounds 7] [--trips 100000]

Measures, and prints as a Markdown table:
- bcc compile-and-attach time of the probes (what `wattprobe serve` pays once at start-up);
- a context-switch-heavy microbenchmark: two processes pinned to one CPU bounce a byte through
  pipes (every round trip is two context switches and four syscalls), with and without the probes
  attached; runs of the three settings (none, scheduler probes, all) are interleaved and each is
  compared with the bare run next to it, so drift on a shared machine cancels; the pair runs
  SCHED_FIFO so other tenants' tasks do not take turns inside a run (an attached syscall
  tracepoint puts every syscall of every task on the kernel's tracing path, ioctl or not, hence
  the two probe settings);
- the mean run time per event of each program from the kernel's own BPF statistics
  (kernel.bpf_stats_enabled, run_time_ns / run_cnt in the program's fdinfo), with separate
  figures for ioctls the program filters out and those it counts;
- the exporter's resident memory after start-up with the eBPF source and with procfs, and what
  one interval's read of each source costs (wattprobe_collect_duration_seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.sources.ebpf_load import Loaded, bcc_environment, load
from exporter.workloads.cgroup_ids import find_v2_root
from tests.running import parse_samples, select, start_exporter

HERE = Path(__file__).resolve().parent
PROGRAMS = {
    "sched:sched_switch": "tracepoint__sched__sched_switch",
    "sched:sched_process_exit": "tracepoint__sched__sched_process_exit",
    "sched:sched_process_exec": "tracepoint__sched__sched_process_exec",
    "syscalls:sys_enter_ioctl": "tracepoint__syscalls__sys_enter_ioctl",
    "cgroup:cgroup_attach_task": "tracepoint__cgroup__cgroup_attach_task",
    "cgroup:cgroup_mkdir": "tracepoint__cgroup__cgroup_mkdir",
}
SCHED_ONLY = ("sched:sched_switch", "sched:sched_process_exit", "sched:sched_process_exec")
TCGETS = 0x5401  # a terminal ioctl: the probe looks at it and lets it go
NVIDIA_CMD = 0xC0104601  # _IOWR('F', 1, 16): the probe counts it
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


@dataclass
class Probes:
    """The loaded programs, attached or not."""

    loaded: Loaded

    @property
    def bpf(self) -> Any:
        return self.loaded.bpf

    def attach(self, which: tuple[str, ...] = tuple(PROGRAMS)) -> None:
        for tp in which:
            if tp in self.loaded.info.tracepoints and tp.encode() not in self.bpf.tracepoint_fds:
                self.bpf.attach_tracepoint(tp=tp.encode(), fn_name=PROGRAMS[tp].encode())

    def detach(self) -> None:
        for tp in list(self.bpf.tracepoint_fds):
            self.bpf.detach_tracepoint(tp)

    def run_stats(self) -> dict[str, tuple[int, int]]:
        """(run_time_ns, run_cnt) per attached program, from the kernel's fdinfo."""
        out = {}
        for tp, fn in PROGRAMS.items():
            func = self.bpf.funcs.get(fn.encode())
            if func is None:
                continue
            fields = {}
            for line in Path(f"/proc/self/fdinfo/{func.fd}").read_text().splitlines():
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
            out[tp] = (int(fields.get("run_time_ns", 0)), int(fields.get("run_cnt", 0)))
        return out


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
        """Median, lowest and highest per-round ratio minus one: adjacent runs are compared,
        so load from other tenants that changes between rounds cancels."""
        ratios = sorted(on / off - 1 for on, off in zip(self.runs[setting], self.bare, strict=True))
        return statistics.median(ratios), ratios[0], ratios[-1]


EMPTY_PROGRAMS = """
TRACEPOINT_PROBE(sched, sched_switch) { return 0; }
RAW_TRACEPOINT_PROBE(sched_switch) { return 0; }
"""


def empty_programs(loaded: Loaded) -> Any:
    """sched_switch programs that do nothing, as a classic and as a raw tracepoint: the floor
    each kind of attachment pays (the classic one formats the event before the program runs)."""
    import bcc  # noqa: PLC0415 (only when benchmarking)

    with bcc_environment(loaded.info.headers.environment()):
        empty = bcc.BPF(text=EMPTY_PROGRAMS, cflags=loaded.info.headers.cflags())
    empty.detach_tracepoint(b"sched:sched_switch")
    empty.detach_raw_tracepoint(b"sched_switch")
    return empty


def pingpong(probes: Probes, empty: Any, binary: Path, rounds: int, trips: int) -> PingPong:
    """Runs with no probes, empty sched_switch programs (classic and raw tracepoint), the
    scheduler probes only, and all probes, rotating the order."""
    settings: dict[str, tuple[str, ...]] = {
        "bare": (),
        "empty": (),
        "empty_raw": (),
        "sched": SCHED_ONLY,
        "all": tuple(PROGRAMS),
    }
    runs: dict[str, list[float]] = {name: [] for name in settings}
    cpu = str(min(os.sched_getaffinity(0)))
    names = list(settings)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            probes.detach()
            probes.attach(settings[name])
            if name == "empty":
                empty.attach_tracepoint(
                    tp=b"sched:sched_switch", fn_name=b"tracepoint__sched__sched_switch"
                )
            if name == "empty_raw":
                empty.attach_raw_tracepoint(
                    tp=b"sched_switch", fn_name=b"raw_tracepoint__sched_switch"
                )
            runs[name].append(run_load(binary, "pingpong", str(trips), cpu, realtime=True))
            if name == "empty":
                empty.detach_tracepoint(b"sched:sched_switch")
            if name == "empty_raw":
                empty.detach_raw_tracepoint(b"sched_switch")
    probes.detach()
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if os.geteuid() != 0:
        print("ebpf_bench: needs root (loads BPF programs, sets kernel.bpf_stats_enabled)")
        return 2

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        binary = build_load(tmp)
        start = time.perf_counter()
        loaded = load()
        load_s = time.perf_counter() - start
        probes = Probes(loaded)
        empty = empty_programs(loaded)
        try:
            pp = pingpong(probes, empty, binary, args.rounds, args.trips)
            syscall_bare, syscall_probe = syscall_cost(probes, binary, args.rounds, 200_000)
            with bpf_stats():
                probes.attach()
                s0 = probes.run_stats()
                run_load(binary, "pingpong", str(args.trips), str(min(os.sched_getaffinity(0))))
                for _ in range(100):
                    subprocess.run(["/bin/true"], check=True)
                cgroup_churn(50)
                s1 = probes.run_stats()
                filtered_call = run_load(binary, "ioctl", str(args.ioctls), hex(TCGETS))
                s2 = probes.run_stats()
                counted_call = run_load(binary, "ioctl", str(args.ioctls), hex(NVIDIA_CMD))
                s3 = probes.run_stats()
                probes.detach()
        finally:
            loaded.bpf.cleanup()
            empty.cleanup()
        sched = per_event(s0, s1)
        nan = (float("nan"), 0)
        filtered = per_event(s1, s2).get("syscalls:sys_enter_ioctl", nan)
        counted = per_event(s2, s3).get("syscalls:sys_enter_ioctl", nan)
        rss_ebpf, anon_ebpf, read_ebpf = exporter_figures("ebpf", tmp)
        rss_procfs, anon_procfs, read_procfs = exporter_figures("procfs", tmp)

    info = loaded.info
    rows = [("bcc compile + attach at start-up", f"{info.compile_s:.2f} s ({load_s:.2f} s in all)")]
    for tp in (*SCHED_ONLY, "cgroup:cgroup_attach_task", "cgroup:cgroup_mkdir"):
        if tp in sched:
            ns, n = sched[tp]
            rows.append((f"{tp} program, mean per event", f"{ns:.0f} ns ({n} events)"))
    rows += [
        (
            "syscalls:sys_enter_ioctl program, other ioctls (filtered out)",
            f"{filtered[0]:.0f} ns/call ({filtered[1]} calls)",
        ),
        (
            "syscalls:sys_enter_ioctl program, 'F' ioctls (counted)",
            f"{counted[0]:.0f} ns/call ({counted[1]} calls)",
        ),
        (
            "ioctl(2) with the probes and BPF stats on, filtered / counted",
            f"{filtered_call:.0f} / {counted_call:.0f} ns/call",
        ),
        (
            "getppid(2), no probes / ioctl probe attached (every syscall pays)",
            f"{syscall_bare:.0f} / {syscall_probe:.0f} ns/call",
        ),
        (
            f"pipe ping-pong round trip, no probes (median of {args.rounds})",
            f"{statistics.median(pp.bare):.0f} ns",
        ),
    ]
    for setting, label in (
        ("empty", "an empty sched_switch program"),
        ("empty_raw", "an empty raw sched_switch program (not used by wattprobe)"),
        ("sched", "the scheduler probes"),
        ("all", "all probes (what wattprobe attaches)"),
    ):
        mid, low, high = pp.slowdown(setting)
        rows.append(
            (
                f"pipe ping-pong, {label}: slowdown (median, range of {args.rounds} paired runs)",
                f"{100 * mid:+.1f} % ({100 * low:+.1f} .. {100 * high:+.1f} %), "
                f"{pp.median(setting):.0f} ns",
            )
        )
    rows += [
        (
            "exporter RSS after 3 intervals, eBPF / procfs (anonymous part)",
            f"{rss_ebpf:.0f} ({anon_ebpf:.0f}) / {rss_procfs:.0f} ({anon_procfs:.0f}) MiB",
        ),
        (
            "one read of the activity source per interval, eBPF / procfs",
            f"{1e3 * read_ebpf:.1f} / {1e3 * read_procfs:.1f} ms",
        ),
    ]
    print(f"kernel {platform.release()}, {os.cpu_count()} CPUs; {info.headers.describe()}\n")
    print("| measure | value |")
    print("|---|---|")
    for measure, value in rows:
        print(f"| {measure} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
