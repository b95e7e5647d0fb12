"""Resident memory with and without eBPF, and what keeping bcc's compiler out of the long-lived
process saves (tests/benchmarks/bcc_handoff.py).

Each variant runs in a fresh process (`python -m tests.benchmarks.bcc_memory VARIANT`) that
imports what `wattprobe serve` imports, steps a Monitor on this machine's /proc three times,
loads eBPF the variant's way, steps and reads the maps three more times, and prints its memory
(/proc/self/status) as JSON:

- procfs: no eBPF at all;
- bcc: bcc imported and the program compiled in the process (what a bcc-based loader does);
- bcc+trim: the same, then malloc_trim(0) to give freed compiler heap back;
- handoff: a child compiles and attaches, hands the FDs over and exits; this process never
  imports bcc and reads the maps with bpf(2).

When the eBPF activity source exists (exporter/sources/ebpf.py), `wattprobe serve
--activity-source ebpf` and `--activity-source procfs` are measured too, on this machine's /proc.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks.common import REPO, Figure, Section, read_proc_memory_mib
from tests.realparts import require_root
from tests.running import start_exporter

COMMAND = "python -m tests.benchmarks --only memory"
VARIANTS = ("procfs", "bcc", "bcc+trim", "handoff")


def _self_memory() -> dict[str, float]:
    return read_proc_memory_mib(int(Path("/proc/self").resolve().name))


def variant(name: str) -> dict[str, float]:
    """Runs in the measuring child process."""
    import exporter.cli  # noqa: F401, PLC0415 (everything serve imports)
    from exporter.config import ActivitySource, Config, PodSource  # noqa: PLC0415
    from exporter.wiring import build_monitor  # noqa: PLC0415

    monitor = build_monitor(
        Config(activity_source=ActivitySource.PROCFS, pod_source=PodSource.NONE)
    )
    for _ in range(3):
        monitor.step()
        time.sleep(0.3)
    before = _self_memory()
    out: dict[str, float] = {}
    read = None
    if name in ("bcc", "bcc+trim"):
        from tests.benchmarks.bcc_handoff import MAPS, compile_in_this_process  # noqa: PLC0415

        start = time.monotonic()
        bpf: Any = compile_in_this_process()
        out["load_s"] = time.monotonic() - start
        out["after_load_mib"] = _self_memory()["VmRSS"]
        if name == "bcc+trim":
            ctypes.CDLL("libc.so.6").malloc_trim(0)

        def read() -> int:
            return sum(len(list(bpf[m.encode()].items())) for m in MAPS)

    elif name == "handoff":
        from tests.benchmarks.bcc_handoff import Handoff  # noqa: PLC0415

        start = time.monotonic()
        handoff = Handoff.load()
        out["load_s"] = time.monotonic() - start
        out["child_peak_mib"] = handoff.child_peak_rss_mib
        out["bcc_imported"] = float("bcc" in sys.modules)

        def read() -> int:
            return sum(len(m.items()) for m in handoff.maps.values())

    for _ in range(3):
        monitor.step()
        if read is not None:
            out["entries"] = float(read())
        time.sleep(0.3)
    monitor.close()
    mem = _self_memory()
    out.update(
        rss_mib=mem["VmRSS"],
        anon_mib=mem["RssAnon"],
        file_mib=mem["RssFile"],
        hwm_mib=mem["VmHWM"],
        rss_before_mib=before["VmRSS"],
    )
    return out


def measure_variant(name: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bcc_memory", name],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory variant {name} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@dataclass(frozen=True)
class ServeMemory:
    rss_mib: float
    anon_mib: float
    hwm_mib: float


def serve_memory(source: str) -> ServeMemory:
    """`wattprobe serve` on this machine's /proc after three 1 s intervals."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_exporter(
            ["--activity-source", source, "--interval", "1s", "--kube.pod-source", "none"],
            log_dir=Path(tmp),
            wait="/readyz",
        )
        try:
            for _ in range(3):
                proc.wait_next_interval(timeout=120)
            mem = read_proc_memory_mib(proc.proc.pid)
        finally:
            proc.stop()
    return ServeMemory(mem["VmRSS"], mem["RssAnon"], mem["VmHWM"])


def ebpf_source_exists() -> bool:
    return importlib.util.find_spec("exporter.sources.ebpf") is not None


def run() -> Section:
    require_root()
    got = {name: measure_variant(name) for name in VARIANTS}
    section = Section("Memory with and without eBPF")
    procfs, bcc, trim, handoff = (got[v] for v in VARIANTS)
    if ebpf_source_exists():
        with_ebpf = serve_memory("ebpf")
        without = serve_memory("procfs")
        section.figures.append(
            Figure(
                "RSS of `wattprobe serve` with eBPF (this machine's /proc, after 3 intervals)",
                f"{with_ebpf.rss_mib:.1f} MiB ({with_ebpf.anon_mib:.1f} MiB anonymous; peak "
                f"VmHWM {with_ebpf.hwm_mib:.1f} MiB) vs {without.rss_mib:.1f} MiB with procfs",
                target="<= 100 MiB",
                met=with_ebpf.rss_mib <= 100,
                rerun=COMMAND,
            )
        )
        proxy = ""
    else:
        proxy = " (proxy: the eBPF source is not on this branch; a program of the same shape)"
    section.figures += [
        Figure(
            f"RSS with bcc compiling in-process{proxy}, steady",
            f"{bcc['rss_mib']:.1f} MiB ({bcc['anon_mib']:.1f} anonymous + "
            f"{bcc['file_mib']:.1f} file-backed; peak {bcc['hwm_mib']:.1f} MiB; "
            f"{procfs['rss_mib']:.1f} MiB without eBPF)",
            target="<= 100 MiB",
            met=bcc["rss_mib"] <= 100,
            rerun=COMMAND,
        ),
        Figure(
            "RSS with bcc in-process + malloc_trim(0) after the compile",
            f"{trim['rss_mib']:.1f} MiB ({trim['anon_mib']:.1f} anonymous + "
            f"{trim['file_mib']:.1f} file-backed)",
            rerun=COMMAND,
        ),
        Figure(
            "RSS with the compile in a short-lived child (FDs handed over), steady",
            f"{handoff['rss_mib']:.1f} MiB ({handoff['anon_mib']:.1f} anonymous; peak "
            f"{handoff['hwm_mib']:.1f} MiB; the child peaked at {handoff['child_peak_mib']:.1f} "
            f"MiB for {handoff['load_s']:.1f} s)",
            target="<= 100 MiB",
            met=handoff["rss_mib"] <= 100,
            rerun=COMMAND,
        ),
    ]
    rows = [
        "| variant | RSS MiB | anonymous | file-backed | peak (VmHWM) | load s | map entries |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        g = got[name]
        rows.append(
            f"| {name} | {g['rss_mib']:.1f} | {g['anon_mib']:.1f} | {g['file_mib']:.1f} "
            f"| {g['hwm_mib']:.1f} | {g.get('load_s', 0):.2f} | {g.get('entries', 0):.0f} |"
        )
    section.details = "\n".join(rows)
    section.method = (
        "Each variant in a fresh process that imports what `wattprobe serve` imports and steps a "
        "Monitor on this machine's /proc; the eBPF program has wattprobe's shape (sched_switch, "
        "sched_process_exit, sys_enter_ioctl; hash maps of 32,768 entries keyed by tgid), "
        "compiled by Debian's bcc against the generic kernel headers. File-backed RSS is mostly "
        "LLVM's and clang's code pages: clean and reclaimable, but counted in RSS and charged to "
        "the container's memory cgroup."
    )
    return section


def main() -> None:
    print(json.dumps(variant(sys.argv[1])))


if __name__ == "__main__":
    main()
