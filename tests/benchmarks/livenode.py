"""This machine made to look like a busy Kubernetes GPU node, for what the synthetic trees cannot
show: the real /proc (the kernel formats every stat file it is asked for) and the eBPF probes
(they only see real processes).

- sleepers(): N processes of tests/benchmarks/sleepers.c, optionally waking every few seconds
  to run briefly, each placed into one of the given cgroups;
- live_node(): 110 pods x 3 containers as real cgroup v2 directories laid out like kubelet's
  (systemd driver, containerd; tests/support/kubecgroups.py has one container per pod, this has
  pods),
  the sleepers spread over them with a tenth left outside as host processes, and the 8 x H100
  fake NVML scenario naming nine of them as GPU processes.

Everything made is removed after: the processes killed with their process group, the cgroup
directories emptied and removed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.synthetic import HostShape, gpu_scenario
from tests.support.kubecgroups import empty_and_remove, v2_root
from tests.support.realparts import require_binary

QOS = ("guaranteed", "burstable", "besteffort")
HOST_SHARE = 0.1  # of the added processes, left in the benchmark's own cgroup


@contextlib.contextmanager
def sleepers(
    count: int,
    scratch: Path,
    *,
    period_ms: int = 0,
    spin_us: int = 0,
    cgroups: Sequence[Path] = (),
) -> Iterator[list[int]]:
    """Start `count` processes; yield their PIDs; kill them all after."""
    gcc = require_binary("gcc")
    binary = scratch / "sleepers"
    if not binary.exists():
        source = Path(__file__).with_name("sleepers.c")
        subprocess.run(
            [gcc, "-O2", "-o", str(binary), str(source)], check=True, capture_output=True
        )
    argv = [str(binary), str(count), str(period_ms), str(spin_us)]
    argv += [str(c / "cgroup.procs") for c in cgroups]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        if not words or words[0] != b"ready":
            raise RuntimeError(f"sleepers exited with {proc.wait()}")
        pids = [int(w) for w in words[1:]]
        yield pids
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _wait_gone(pids)


def _wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    """Until the killed children are reaped (thousands take a moment), within a bound."""
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        time.sleep(0.1)


@dataclass(frozen=True)
class LiveNode:
    pids: list[int]  # the added processes
    containers: list[Path]  # their container cgroups
    scenario: Path  # the fake NVML scenario naming some of them


@contextlib.contextmanager
def kube_pods(pods: int, containers: int) -> Iterator[list[Path]]:
    """pods x containers container scopes under kubepods.slice; yields the scopes."""
    root = v2_root()
    kubepods = root / "kubepods.slice"
    made: list[Path] = []
    scopes: list[Path] = []

    def mkdir(d: Path) -> None:
        try:
            d.mkdir()
            made.append(d)
        except FileExistsError:
            pass

    try:
        mkdir(kubepods)
        for i in range(pods):
            qos = QOS[i % len(QOS)]
            uid = str(uuid.uuid4()).replace("-", "_")
            if qos == "guaranteed":
                pod = kubepods / f"kubepods-pod{uid}.slice"
            else:
                mkdir(kubepods / f"kubepods-{qos}.slice")
                pod = kubepods / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{uid}.slice"
            mkdir(pod)
            for _ in range(containers):
                scope = pod / f"cri-containerd-{secrets.token_hex(32)}.scope"
                mkdir(scope)
                scopes.append(scope)
        yield scopes
    finally:
        for d in reversed(made):
            empty_and_remove(d)


def processes_now() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


@contextlib.contextmanager
def live_node(
    shape: HostShape, scratch: Path, *, period_ms: int, spin_us: int
) -> Iterator[LiveNode]:
    """This machine with as many processes as `shape` says, in its pods and containers."""
    added = max(shape.processes - processes_now(), 0)
    in_pods = added - round(added * HOST_SHARE)
    with (
        kube_pods(shape.pods, shape.containers) as scopes,
        sleepers(
            in_pods, scratch, period_ms=period_ms, spin_us=spin_us, cgroups=scopes
        ) as pod_pids,
        sleepers(added - in_pods, scratch, period_ms=period_ms, spin_us=spin_us) as host,
    ):
        scenario = scratch / "live-nvml.scenario"
        # child i joined scope i % len(scopes): the first container of pods 0..8
        gpu_scenario(scenario, [pod_pids[p * shape.containers] for p in range(9)])
        yield LiveNode([*pod_pids, *host], scopes, scenario)
