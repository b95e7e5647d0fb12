"""Compile and attach the eBPF programs in a short-lived child process; keep only the FDs.

bcc compiles with LLVM inside the process that imports it, and what LLVM maps and allocates
stays: the exporter measured about 120 MiB resident with the programs loaded in-process against
under 40 MiB without (docs/benchmarks.md, docs/performance.md). The kernel needs none of it once
the programs are loaded: a program lives while something references it, and an attached
tracepoint is a perf-event FD. So `load_in_child` runs ebpf_load.load() (every check, the compile,
the attach) in `python -m exporter.sources.activity.ebpf.child`, which sends back over a
SOCK_SEQPACKET
socketpair, with SCM_RIGHTS:

- the FD of every attached tracepoint, the perf event of a classic one or the
  bpf_raw_tracepoint_open FD of a raw one (holding them keeps the programs attached; closing
  them detaches),
- the FD, type, size and Key/Leaf layouts of every map the eBPF source reads,
- the LoadInfo, or the SourceError that stopped it,

and leaves with os._exit: bcc's clean-up would disable the perf events the parent now shares.
The exporter reads the maps with bpf(2) (exporter/sources/activity/ebpf/maps.py) and never imports
bcc.
The compile's memory peak is the child's, for the second or two it runs.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from exporter.model.readings import SourceError
from exporter.sources.activity.ebpf.kheaders import KernelHeaders
from exporter.sources.activity.ebpf.load import (
    LOAD_FAILED,
    LOADER_KILLED,
    MAX_CGROUPS,
    MAX_TASKS,
    PROC_DEVICES,
    Loaded,
    LoadInfo,
)
from exporter.sources.activity.ebpf.maps import MapTable, ctype_from_layout, ctype_layout

log = logging.getLogger(__name__)

MAPS = (
    "tasks",
    "exited",
    "running",
    "stats",
    "cgroup_paths",
    "dev_class",
    "baseline_read",
)  # what EbpfSource uses
TIMEOUT_S = 300.0  # the compile takes seconds; a child that hangs must not hang start-up
_MAX_MESSAGE = 1 << 20


@dataclass
class HandedOver:
    """The programs' attachments and maps, held by FD; shaped like the bcc.BPF parts the eBPF
    source uses (tables by name, cleanup)."""

    tables: dict[str, MapTable]
    perf_fds: list[int]
    tracepoints: list[str]

    def __getitem__(self, name: bytes) -> MapTable:
        return self.tables[name.decode()]

    def cleanup(self) -> None:
        """Detach (closing the perf events) and drop the maps."""
        for fd in self.perf_fds:
            os.close(fd)
        self.perf_fds = []
        for table in self.tables.values():
            table.close()


# -- the parent ---------------------------------------------------------------------------------


def load_in_child(
    kernel_headers: Path | None = None,
    *,
    ioctls: bool = True,
    max_tasks: int = MAX_TASKS,
    max_cgroups: int = MAX_CGROUPS,
    raw_switch: bool | None = None,
    proc_devices: Path = PROC_DEVICES,
    per_process: bool = True,
) -> Loaded:
    """What ebpf_load.load() returns, with the compile done in a child process."""
    request = {
        "kernel_headers": str(kernel_headers) if kernel_headers else None,
        "ioctls": ioctls,
        "raw_switch": raw_switch,
        "max_tasks": max_tasks,
        "max_cgroups": max_cgroups,
        "proc_devices": str(proc_devices),
        "per_process": per_process,
    }
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours:
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "exporter.sources.activity.ebpf.child",
                    str(theirs.fileno()),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.PIPE,
            )
        finally:
            theirs.close()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
            ours.settimeout(TIMEOUT_S)
            msg, fds, _flags, _addr = socket.recv_fds(ours, _MAX_MESSAGE, 64)
        except (OSError, TimeoutError) as exc:
            proc.kill()
            proc.wait()
            raise SourceError(LOAD_FAILED, f"eBPF loader process: {exc}") from exc
        status = proc.wait(timeout=TIMEOUT_S)
    if not msg:
        if status < 0:  # killed mid-compile: not the kernel's refusal, and not hung either
            raise SourceError(
                LOADER_KILLED, f"eBPF loader process killed by signal {-status} while compiling"
            )
        raise SourceError(LOAD_FAILED, f"eBPF loader process exited with status {status}")
    reply = json.loads(msg)
    if "error" in reply:
        for fd in fds:
            os.close(fd)
        reason, detail = reply["error"]
        raise SourceError(reason, detail)
    return Loaded(_handed_over(reply, fds), _info_from_json(reply["info"]))


def _handed_over(reply: dict[str, Any], fds: list[int]) -> HandedOver:
    maps = reply["maps"]
    tables = {
        m["name"]: MapTable(
            m["name"],
            fd,
            map_type=m["type"],
            key=ctype_from_layout(m["key"]),
            leaf=ctype_from_layout(m["leaf"]),
            max_entries=m["max_entries"],
        )
        for m, fd in zip(maps, fds[: len(maps)], strict=True)
    }
    for m in maps:  # the layouts must describe what the kernel holds
        table = tables[m["name"]]
        if (ctypes.sizeof(table.Key), ctypes.sizeof(table.Leaf)) != (m["key_size"], m["leaf_size"]):
            raise SourceError(LOAD_FAILED, f"map {m['name']}: layout does not match its sizes")
    return HandedOver(tables, list(fds[len(maps) :]), list(reply["tracepoints"]))


def _info_to_json(info: LoadInfo) -> dict[str, Any]:
    data = asdict(info)
    data["headers"] = {
        k: str(v) if isinstance(v, Path) else v for k, v in asdict(info.headers).items()
    }
    data["tracefs"] = str(info.tracefs)
    return data


def _info_from_json(data: dict[str, Any]) -> LoadInfo:
    h = dict(data["headers"])
    h["source"] = Path(h["source"])
    h["build"] = Path(h["build"]) if h["build"] else None
    fields = dict(data)
    fields["headers"] = KernelHeaders(**h)
    fields["tracefs"] = Path(data["tracefs"])
    for key in ("tracepoints", "missing_optional", "switched_off"):
        fields[key] = tuple(data[key])
    return LoadInfo(**fields)


# -- the child ----------------------------------------------------------------------------------


def _map_meta(name: str, table: Any) -> dict[str, Any]:
    leaf = getattr(table, "sLeaf", table.Leaf)  # per-CPU tables: the per-CPU value's type
    return {
        "name": name,
        "type": int(table.ttype),
        "key": ctype_layout(table.Key),
        "leaf": ctype_layout(leaf),
        "key_size": ctypes.sizeof(table.Key),
        "leaf_size": ctypes.sizeof(leaf),
        "max_entries": int(table.max_entries),
    }


def child(sock_fd: int) -> None:
    """Load, send, and leave without bcc's clean-up."""
    from exporter.sources.activity.ebpf.load import load  # noqa: PLC0415 (only the child needs bcc)

    request = json.loads(sys.stdin.read())
    fds: list[int] = []
    try:
        loaded = load(
            Path(request["kernel_headers"]) if request["kernel_headers"] else None,
            ioctls=request["ioctls"],
            max_tasks=request["max_tasks"],
            max_cgroups=request["max_cgroups"],
            raw_switch=request["raw_switch"],
            proc_devices=Path(request["proc_devices"]),
            per_process=request["per_process"],
        )
        maps = []
        for name in MAPS:
            try:
                table = loaded.bpf[name.encode()]
            except KeyError:
                continue  # compiled out (an optional tracepoint is missing)
            maps.append(_map_meta(name, table))
            fds.append(table.map_fd)
        # classic tracepoints are perf-event FDs, raw ones bpf_raw_tracepoint_open FDs: holding
        # either keeps its program attached
        attachments = {tp.decode(): fd for tp, fd in loaded.bpf.tracepoint_fds.items()}
        for event, fd in loaded.bpf.raw_tracepoint_fds.items():  # keyed by event alone
            name = next(t for t in loaded.info.tracepoints if t.endswith(f":{event.decode()}"))
            attachments[name] = fd
        # the slice namer's cpu-clock perf events (task runtime): one per CPU
        for (_type, _config), per_cpu in getattr(loaded.bpf, "open_perf_events", {}).items():
            for cpu, fd in per_cpu.items():
                attachments[f"perf:cpu-clock:{cpu}"] = fd
        names = sorted(attachments)
        fds += [attachments[name] for name in names]
        reply: dict[str, Any] = {
            "info": _info_to_json(loaded.info),
            "maps": maps,
            "tracepoints": names,
        }
    except SourceError as exc:
        reply, fds = {"error": [exc.reason, exc.detail]}, []
    except Exception as exc:  # the parent turns it into a SourceError either way
        log.exception("eBPF load failed")
        reply, fds = {"error": [LOAD_FAILED, repr(exc)]}, []
    with socket.socket(fileno=sock_fd) as sock:
        socket.send_fds(sock, [json.dumps(reply).encode()], fds)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no atexit, no BPF.cleanup(): that would disable the shared perf events


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    child(int(sys.argv[1]))


if __name__ == "__main__":
    main()
