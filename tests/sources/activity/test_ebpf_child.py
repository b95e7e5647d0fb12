"""Loading the probes in a short-lived child (exporter/sources/activity/ebpf/child.py): this
process gets
working, attached programs and readable maps, and never imports bcc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.model.readings import SourceError
from exporter.sources.activity.ebpf.child import load_in_child
from exporter.sources.activity.ebpf.kheaders import NO_HEADERS
from tests.support.ebpfparts import require_ebpf
from tests.support.running import REPO

pytestmark = pytest.mark.real

# In a fresh interpreter: load through the child, burn some CPU, read the maps by FD.
PROBE = """
import json, os, sys, time
from exporter.sources.activity.ebpf.child import load_in_child
loaded = load_in_child(ioctls=False, raw_switch=RAW)
end = time.thread_time() + 0.3
while time.thread_time() < end:
    pass
time.sleep(0.05)  # switch out: the slice in flight is only added to the tasks map then
tasks = loaded.bpf[b"tasks"].items_lookup_batch()
mine = [v.on_cpu_ns for k, v in tasks if int(k) == os.getpid()]
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
print(json.dumps({
    "bcc": any(m == "bcc" or m.startswith("bcc.") for m in sys.modules),
    "llvm": "LLVM" in open("/proc/self/maps").read(),
    "tracepoints": list(loaded.info.tracepoints),
    "handed": loaded.bpf.tracepoints,
    "switch_probe": loaded.info.switch_probe,
    "mine_ns": mine,
    "stats": [int(loaded.bpf[b"stats"].sum(i).value) for i in range(2)],
    "rss_kib": int(status["VmRSS"].split()[0]),
}))
loaded.bpf.cleanup()
"""


@pytest.mark.parametrize("raw", [True, False], ids=["raw-sched_switch", "classic-sched_switch"])
def test_programs_run_and_maps_read_without_bcc_in_the_process(raw: bool) -> None:
    """Both kinds of attachment (a raw tracepoint's FD, a classic one's perf event) keep their
    program attached after the child that made them has exited."""
    require_ebpf()
    done = subprocess.run(
        [sys.executable, "-c", f"RAW = {raw}\n" + PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert not got["bcc"] and not got["llvm"], "bcc and LLVM stay in the child"
    assert got["switch_probe"] == ("raw" if raw else "classic")
    handed = set(got["handed"])
    # with the raw program (task runtime), a cpu-clock perf event per CPU names slices in flight
    namers = {h for h in handed if h.startswith("perf:cpu-clock:")}
    assert bool(namers) == raw
    assert (
        handed - namers
        == set(got["tracepoints"])
        >= {
            "sched:sched_switch",
            "sched:sched_process_exit",
        }
    )
    # the sched_switch program, attached by the child that has exited, counted this process
    assert got["mine_ns"] and got["mine_ns"][0] >= 0.2e9, got["mine_ns"]
    assert got["stats"][0] > 0  # task inserts
    assert got["rss_kib"] < 60 * 1024


def test_a_load_failure_is_the_same_source_error_as_in_process() -> None:
    require_ebpf()
    bogus = Path("/nonexistent-kernel-headers")
    with pytest.raises(SourceError) as raised:
        load_in_child(bogus)
    assert raised.value.reason == NO_HEADERS
    assert str(bogus) in raised.value.detail
