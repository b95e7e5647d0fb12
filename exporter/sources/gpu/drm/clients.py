"""DRM clients per process from /proc/<pid>/fdinfo, scanned incrementally, and their engine time
per interval.

Walking every process's /proc/<pid>/fd is the cost of this source (docs/benchmarks-drm.md).
Per read, DrmClientScanner lists the fds of:
- the processes that held a DRM fd (a link to /dev/dri/*) at the last read;
- processes it has not seen before (new PIDs);
- a rotating 1/recheck_every of the others, by PID, so a long-running process that opens a GPU
  later is found within recheck_every reads (its engine time before that is not counted).
Only fds that link to /dev/dri/ have their fdinfo read.

EngineDeltas turns the cumulative per-client values into per-interval ones. Clients are keyed
by (drm-pdev, drm-client-id): fds dup'ed or inherited from one open share the id and count once,
for the lowest PID holding them. A client seen at the previous read adds what its counters grew;
a client first seen in a process that did not exist at the previous read started since then, so
all of its counters are this interval's; any other client first seen (the first read, a process
found by the rotation) only sets its baseline. A client that vanished (its fds closed or its
process exited) takes the time it used after the previous read with it: the kernel keeps no
record of closed clients.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.host.hostfile import read_text_bounded
from exporter.sources.gpu.drm.fdinfo import DrmClient, parse_fdinfo

log = logging.getLogger(__name__)

# an fdinfo is a few hundred bytes (a line per engine and memory region); more is not the kernel's
MAX_FDINFO_BYTES = 65536

RECHECK_EVERY = 10  # reads between fd walks of a process that held no DRM fd
DRI_PREFIX = "/dev/dri/"

ClientKey = tuple[str, int]  # (pdev, client id)


@dataclass(frozen=True)
class ClientScan:
    """One read's DRM clients, deduplicated: (pdev, client id) -> (lowest PID, client)."""

    clients: Mapping[ClientKey, tuple[int, DrmClient]]
    pids: frozenset[int]  # every PID listed in /proc at this read
    walked: int  # processes whose fd directory was listed


class DrmClientScanner:
    def __init__(self, procfs: Path, recheck_every: int = RECHECK_EVERY) -> None:
        self._proc = str(procfs)
        self._recheck = max(1, recheck_every)
        self._drm_pids: set[int] = set()  # held a DRM fd at the last read
        self._known: set[int] = set()
        self._round = 0

    def scan(self) -> ClientScan:
        try:
            names = os.listdir(self._proc)
        except OSError as exc:
            raise FileNotFoundError(f"cannot list {self._proc}: {exc}") from exc
        pids = frozenset(int(n) for n in names if n.isdigit())
        self._round += 1
        clients: dict[ClientKey, tuple[int, DrmClient]] = {}
        drm_pids: set[int] = set()
        walked = 0
        for pid in sorted(pids):
            if not (
                pid in self._drm_pids
                or pid not in self._known
                or (pid + self._round) % self._recheck == 0
            ):
                continue
            walked += 1
            found = self._process(pid)
            if found:
                drm_pids.add(pid)
            for client in found:
                key = (client.pdev, client.client_id)
                if key not in clients:  # sorted PIDs: the lowest holder keeps it
                    clients[key] = (pid, client)
        self._known = set(pids)
        self._drm_pids = drm_pids
        return ClientScan(clients, pids, walked)

    def _process(self, pid: int) -> list[DrmClient]:
        fd_dir = f"{self._proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # exited, or not ours to read (hidepid, another user without root)
            return []
        out: list[DrmClient] = []
        seen: set[ClientKey] = set()
        for fd in fds:
            try:
                if not os.readlink(f"{fd_dir}/{fd}").startswith(DRI_PREFIX):
                    continue
                text = read_text_bounded(f"{self._proc}/{pid}/fdinfo/{fd}", MAX_FDINFO_BYTES)
            except OSError:  # closed in between
                continue
            client = parse_fdinfo(text)
            if client is None:  # a DRM fd on a kernel without usage stats, or garbage
                continue
            key = (client.pdev, client.client_id)
            if key not in seen:
                seen.add(key)
                out.append(client)
        return out


@dataclass
class ClientUsage:
    """One PID's use of one GPU over the interval."""

    busy_ns: int = 0
    busy_cycles: int = 0
    memory_bytes: int | None = None  # device-local memory held now
    engine_ns: dict[str, int] = field(default_factory=dict)  # per engine class, for utilization
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)


class EngineDeltas:
    """Per-interval engine time per (pdev, PID) from successive ClientScans."""

    def __init__(self) -> None:
        self._prev: dict[ClientKey, DrmClient] = {}
        self._prev_pids: frozenset[int] | None = None

    def update(self, scan: ClientScan) -> dict[str, dict[int, ClientUsage]]:
        out: dict[str, dict[int, ClientUsage]] = {}
        for key, (pid, client) in scan.clients.items():
            prev = self._prev.get(key)
            if prev is None and not (self._prev_pids is not None and pid not in self._prev_pids):
                prev = client  # baseline only
            usage = out.setdefault(client.pdev, {}).setdefault(pid, ClientUsage())
            _add_deltas(usage.engine_ns, client.engine_ns, prev.engine_ns if prev else {})
            _add_deltas(usage.cycles, client.cycles, prev.cycles if prev else {})
            _add_deltas(
                usage.total_cycles, client.total_cycles, prev.total_cycles if prev else {}, True
            )
            for engine, n in client.capacity.items():
                usage.capacity[engine] = max(usage.capacity.get(engine, 1), n)
            usage.busy_ns = sum(usage.engine_ns.values())
            usage.busy_cycles = sum(usage.cycles.values())
            local = client.local_memory_bytes
            if local is not None:
                usage.memory_bytes = (usage.memory_bytes or 0) + local
        self._prev = {key: client for key, (_pid, client) in scan.clients.items()}
        self._prev_pids = scan.pids
        return out


def _add_deltas(
    into: dict[str, int], now: Mapping[str, int], before: Mapping[str, int], keep_max: bool = False
) -> None:
    """Add now - before per engine (0 when a counter went backwards: not a counter any more).
    keep_max: the GPU's own cycle count, the same for every client: keep the largest delta."""
    for engine, value in now.items():
        delta = value - before.get(engine, 0)
        if delta <= 0:
            continue
        into[engine] = max(into.get(engine, 0), delta) if keep_max else into.get(engine, 0) + delta


def busy_ratio(usages: Iterable[ClientUsage], dt_ns: float) -> float | None:
    """The busiest engine class's use of the GPU over the interval, from the clients' deltas:
    cycles / GPU cycles where the driver counts cycles, else ns / (interval x engines)."""
    ns: dict[str, int] = {}
    cycles: dict[str, int] = {}
    total: dict[str, int] = {}
    capacity: dict[str, int] = {}
    for u in usages:
        for e, v in u.engine_ns.items():
            ns[e] = ns.get(e, 0) + v
        for e, v in u.cycles.items():
            cycles[e] = cycles.get(e, 0) + v
        for e, v in u.total_cycles.items():
            total[e] = max(total.get(e, 0), v)
        for e, v in u.capacity.items():
            capacity[e] = max(capacity.get(e, 1), v)
    ratios = [cycles.get(e, 0) / (t * capacity.get(e, 1)) for e, t in total.items() if t > 0] or [
        v / (dt_ns * capacity.get(e, 1)) for e, v in ns.items() if dt_ns > 0
    ]
    if not ratios:  # nobody busy: idle, unless this is the first read (no interval yet)
        return 0.0 if dt_ns > 0 else None
    return min(1.0, max(ratios))
