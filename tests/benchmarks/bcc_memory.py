"""Resident memory with and without eBPF, with the compile in the exporter's process or in a
short-lived child (exporter/sources/activity/ebpf/child.py).

Each variant runs in a fresh process (`python -m tests.benchmarks.bcc_memory VARIANT`) that
imports what `wattprobe serve` imports, steps a Monitor on this machine's /proc three times,
loads the probes the variant's way, reads them through EbpfSource three more times, and prints
its memory (/proc/self/status) as JSON:

- procfs: no eBPF at all;
- in-process: ebpf_load.load() in this process (bcc and LLVM compile here; load() hands freed
  compiler heap back with malloc_trim);
- child: ebpf_child.load_in_child(), what `wattprobe serve` does: the child compiles, attaches,
  hands the FDs over and exits; its peak is getrusage(RUSAGE_CHILDREN).ru_maxrss.

Then `wattprobe serve --activity-source ebpf` and `--activity-source procfs` themselves, on this
machine's /proc after three intervals.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import REPO, Figure, Section, machine_load, read_proc_memory_mib
from tests.support.realparts import require_root
from tests.support.running import start_exporter

COMMAND = "python -m tests.benchmarks --only memory"
VARIANTS = ("procfs", "in-process", "child")


def _self_memory() -> dict[str, float]:
    return read_proc_memory_mib(int(Path("/proc/self").resolve().name))


def variant(name: str) -> dict[str, float]:
    """Runs in the measuring child process."""
    import exporter.app.cli  # noqa: F401, PLC0415 (everything serve imports)
    from exporter.app.wiring import build_monitor  # noqa: PLC0415
    from exporter.host.cgroupfs.ids import CgroupIdIndex, find_v2_root  # noqa: PLC0415
    from exporter.model.config import ActivitySource, Config, PodSource  # noqa: PLC0415
    from exporter.sources.activity.ebpf.child import load_in_child  # noqa: PLC0415
    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415
    from exporter.sources.activity.ebpf.source import EbpfSource  # noqa: PLC0415

    monitor = build_monitor(
        Config(activity_source=ActivitySource.PROCFS, pod_source=PodSource.NONE)
    )
    for _ in range(3):
        monitor.step()
        time.sleep(0.3)
    out: dict[str, float] = {"rss_before_mib": _self_memory()["VmRSS"]}
    source = None
    if name != "procfs":
        start = time.monotonic()
        loaded = load(ioctls=True) if name == "in-process" else load_in_child(ioctls=True)
        out["load_s"] = time.monotonic() - start
        out["child_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        root = find_v2_root(Path("/sys/fs/cgroup"))
        assert root is not None
        source = EbpfSource(loaded, Path("/proc"), CgroupIdIndex(root))
    for _ in range(3):
        monitor.step()
        if source is not None:
            out["tasks"] = float(len(source.tasks()))
        time.sleep(0.3)
    monitor.close()
    mem = _self_memory()
    out.update(
        rss_mib=mem["VmRSS"],
        anon_mib=mem["RssAnon"],
        file_mib=mem["RssFile"],
        hwm_mib=mem["VmHWM"],
        bcc_imported=float("bcc" in sys.modules),
    )
    if source is not None:
        source.close()
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


def run() -> Section:
    require_root()
    with machine_load() as load:
        got = {name: measure_variant(name) for name in VARIANTS}
        with_ebpf = serve_memory("ebpf")
        without = serve_memory("procfs")
    section = Section("Memory with and without eBPF", load=load[0])
    procfs, inproc, child = (got[v] for v in VARIANTS)
    section.figures += [
        Figure(
            "RSS of `wattprobe serve` with eBPF (this machine's /proc, after 3 intervals)",
            f"{with_ebpf.rss_mib:.1f} MiB ({with_ebpf.anon_mib:.1f} MiB anonymous, peak "
            f"{with_ebpf.hwm_mib:.1f} MiB); with procfs: {without.rss_mib:.1f} MiB",
            target="<= 100 MiB",
            met=with_ebpf.rss_mib <= 100,
            rerun=COMMAND,
        ),
        Figure(
            "RSS with the probes compiled in a child (what serve does), steady",
            f"{child['rss_mib']:.1f} MiB ({child['anon_mib']:.1f} anonymous + "
            f"{child['file_mib']:.1f} file-backed); the child peaked at "
            f"{child['child_peak_mib']:.1f} MiB RSS for {child['load_s']:.1f} s",
            rerun=COMMAND,
        ),
        Figure(
            "RSS with the probes compiled in-process by bcc (before), steady",
            f"{inproc['rss_mib']:.1f} MiB ({inproc['anon_mib']:.1f} anonymous + "
            f"{inproc['file_mib']:.1f} file-backed, after malloc_trim); peak "
            f"{inproc['hwm_mib']:.1f} MiB RSS",
            rerun=COMMAND,
        ),
    ]
    rows = [
        "| variant | RSS MiB | anonymous | file-backed | peak (VmHWM) | bcc imported | load s "
        "| tasks read |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        g = got[name]
        rows.append(
            f"| {name} | {g['rss_mib']:.1f} | {g['anon_mib']:.1f} | {g['file_mib']:.1f} "
            f"| {g['hwm_mib']:.1f} | {'yes' if g['bcc_imported'] else 'no'} "
            f"| {g.get('load_s', 0):.2f} | {g.get('tasks', 0):.0f} |"
        )
    section.details = "\n".join(rows)
    section.method = (
        "Each variant in a fresh process that imports what `wattprobe serve` imports, steps a "
        "Monitor on this machine's /proc, loads bpf/activity.c (every tracepoint, GPU ioctls "
        "on) and reads it through EbpfSource; Debian's bcc against the generic kernel headers. "
        f"The procfs variant for comparison: {procfs['rss_mib']:.1f} MiB. File-backed RSS is "
        "mostly LLVM's and clang's code pages: clean and reclaimable, but counted in RSS and "
        "charged to the container's memory cgroup while mapped."
    )
    return section


def main() -> None:
    print(json.dumps(variant(sys.argv[1])))


if __name__ == "__main__":
    main()
