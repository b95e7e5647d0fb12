"""eBPF with tracefs missing at start: the real exporter in a mount namespace where tracefs is
hidden under an empty tmpfs (as on a node that never mounted it, or a pod without the host's
/sys/kernel/tracing). auto falls back to /proc and says why on every scrape; an explicit
--activity-source ebpf refuses to start with one line naming the fix.

Load failures are not retried while running (docs/reliability.md): a compile costs seconds of
CPU and a memory peak, and a node without tracefs does not grow one; /proc keeps attribution
going meanwhile. (Load failure for want of capabilities and map evictions:
tests/sources/activity/test_ebpf_real.py; the reasons and fixes:
tests/sources/activity/test_ebpf_plumbing.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.ebpfparts import explicit_ebpf_refusal, require_ebpf
from tests.support.faults_support import CounterWatch, source_up
from tests.support.realparts import require_binary
from tests.support.running import REPO, select, start_exporter

HIDE_TRACEFS = (
    "mount -t tmpfs no-tracefs /sys/kernel/tracing && "
    "if [ -d /sys/kernel/debug/tracing ]; then mount -t tmpfs no-debugfs /sys/kernel/debug; fi && "
    'exec "$@"'
)


def without_tracefs() -> list[str]:
    require_ebpf()  # root, bcc, and a tracefs to hide
    unshare = require_binary("unshare")
    return [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", HIDE_TRACEFS, "sh"]


def test_auto_falls_back_to_procfs_and_says_why(tmp_path: Path) -> None:
    prefix = without_tracefs()
    proc = start_exporter(["--interval", "0.3s"], tmp_path, prefix=prefix)
    try:
        watch = CounterWatch(proc)
        for _ in range(3):
            samples = watch.next()
            assert source_up(samples, "ebpf") == (0.0, "no tracefs")
            assert source_up(samples, "procfs") == (1.0, "")
            # /proc attributes meanwhile: host processes to system_processes, or, in its
            # default per-cgroup mode, those in the root cgroup (all of them on a machine
            # without systemd slices) with the kernel's rest to kernel_processes
            cpu = [
                v
                for pseudo in ("system_processes", "kernel_processes")
                for v in select(
                    samples, "wattprobe_container_cpu_seconds_total", container=pseudo
                ).values()
            ]
            assert sum(cpu) > 0, cpu
            assert proc.get("/healthz")[0] == 200
        log = proc.log()
        warnings = [ln for ln in log.splitlines() if "eBPF activity source unavailable" in ln]
        assert len(warnings) == 1, log
        assert "no tracefs" in warnings[0] and "mount -t tracefs" in warnings[0]
        assert "Traceback" not in log
    finally:
        proc.stop()


def test_explicit_ebpf_and_check_name_the_fix() -> None:
    prefix = without_tracefs()
    line = explicit_ebpf_refusal(prefix)
    assert line.startswith("wattprobe: error: --activity.source ebpf: no tracefs")
    assert "fix: mount tracefs" in line
    check = subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", "check", "--json"],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ebpf = next(s for s in json.loads(check.stdout)["sources"] if s["source"] == "ebpf")
    assert ebpf["ok"] is False
    assert str(ebpf["reason"]).startswith("no tracefs"), ebpf
    assert "mount -t tracefs" in str(ebpf["fix"])
