"""Prototype: compile and attach eBPF programs in a short-lived child, keep only file descriptors.

bcc compiles with LLVM inside the process that imports it: importing bcc alone maps and touches
tens of MiB of LLVM, compiling adds more, and most of it stays resident for the life of the
process (docs/benchmarks.md). The kernel does not need the compiler once programs are loaded:
a program lives as long as something holds a reference to it, and an attached tracepoint is a
perf event file descriptor. So a child process can do all of bcc's work and hand over

- the perf event FD of every attached tracepoint (they keep the programs loaded and attached),
- the FD of every map (to read them),

through SCM_RIGHTS on a socketpair, then leave with os._exit (bcc's own clean-up would disable
the perf events, which the parent shares). The parent never imports bcc and reads the maps with
the bpf(2) syscall. This module measures that path for tests/benchmarks/bcc_memory.py with a
program of the same shape as wattprobe's (sched_switch, sched_process_exit and sys_enter_ioctl,
hash maps keyed by tgid); it is a measurement, not the exporter's loader.

    python -m tests.benchmarks.bcc_handoff            # load via a child, read the maps, print
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRAM = r"""
BPF_HASH(oncpu_ns, u32, u64, 32768);
BPF_HASH(switched_in, u32, u64, 32768);
BPF_HASH(gpu_ioctls, u32, u64, 32768);

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid, next = args->next_pid;
    u64 *since = switched_in.lookup(&prev);
    if (since) {
        u64 delta = now - *since;
        u64 *total = oncpu_ns.lookup(&prev);
        if (total) __sync_fetch_and_add(total, delta);
        else oncpu_ns.update(&prev, &delta);
    }
    switched_in.update(&next, &now);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    switched_in.delete(&pid);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_ioctl) {
    u32 type = (args->cmd >> 8) & 0xff;
    if (type != 0x46 && type != 0x64) return 0;   /* NVIDIA 'F', DRM 'd' */
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    u64 one = 1;
    u64 *n = gpu_ioctls.lookup(&pid);
    if (n) __sync_fetch_and_add(n, 1);
    else gpu_ioctls.update(&pid, &one);
    return 0;
}
"""
MAPS = ("oncpu_ns", "switched_in", "gpu_ioctls")

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_GET_NEXT_KEY = 4
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}


# -- kernel headers (bcc needs some; the running kernel's, else a generic Debian set) ---------


def header_flags() -> tuple[dict[str, str], list[str]]:
    """(environment, cflags) for bcc: none when the running kernel's headers are installed."""
    if Path(f"/lib/modules/{platform.release()}/build/include").is_dir():
        return {}, []
    common = sorted(Path("/usr/src").glob("linux-headers-*-common"))
    if not common:
        raise RuntimeError("no kernel headers: install linux-headers-amd64")
    source = common[-1]
    flavour = sorted(
        p for p in Path("/usr/src").glob(source.name.replace("-common", "-*")) if p != source
    )
    build, arch = flavour[-1], "x86" if platform.machine() == "x86_64" else "arm64"
    cflags = [
        f"-I{build}/arch/{arch}/include/generated",
        f"-I{build}/arch/{arch}/include/generated/uapi",
        f"-I{build}/include",
        f"-I{build}/include/generated/uapi",
    ]
    return {"BCC_KERNEL_SOURCE": str(source)}, cflags


def compile_in_this_process() -> Any:
    """What an exporter that loads bcc itself does; returns the bcc.BPF object."""
    env, cflags = header_flags()
    os.environ.update(env)
    import bcc  # noqa: PLC0415 (the point is when it is imported)

    return bcc.BPF(text=PROGRAM, cflags=cflags)


# -- the child ---------------------------------------------------------------------------------


def child(sock_fd: int) -> None:
    """Compile, attach, send the FDs, and leave without bcc's clean-up."""
    bpf = compile_in_this_process()
    maps = []
    fds: list[int] = []
    for name in MAPS:
        table = bpf[name.encode()]
        maps.append(
            {
                "name": name,
                "key_size": ctypes.sizeof(table.Key),
                "value_size": ctypes.sizeof(table.Leaf),
            }
        )
        fds.append(table.map_fd)
    tracepoints = sorted(bpf.tracepoint_fds)
    fds += [bpf.tracepoint_fds[tp] for tp in tracepoints]
    meta = json.dumps({"maps": maps, "tracepoints": [tp.decode() for tp in tracepoints]})
    with socket.socket(fileno=sock_fd) as sock:
        socket.send_fds(sock, [meta.encode()], fds)
    sys.stdout.flush()
    os._exit(0)  # no atexit, no BPF.cleanup(): that would disable the shared perf events


# -- the parent --------------------------------------------------------------------------------


@dataclass
class BpfMap:
    name: str
    fd: int
    key_size: int
    value_size: int

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value), walking the map with BPF_MAP_GET_NEXT_KEY + LOOKUP_ELEM."""
        out: list[tuple[bytes, bytes]] = []
        key = ctypes.create_string_buffer(self.key_size)
        next_key = ctypes.create_string_buffer(self.key_size)
        value = ctypes.create_string_buffer(self.value_size)
        have_key = False  # the first GET_NEXT_KEY passes no key: the map's first one
        while True:
            if not _bpf_elem(BPF_MAP_GET_NEXT_KEY, self.fd, key if have_key else None, next_key):
                break
            ctypes.memmove(key, next_key, self.key_size)
            have_key = True
            if _bpf_elem(BPF_MAP_LOOKUP_ELEM, self.fd, key, value):
                out.append((key.raw, value.raw))
        return out


def _bpf_elem(
    cmd: int,
    map_fd: int,
    key: ctypes.Array[ctypes.c_char] | None,
    out: ctypes.Array[ctypes.c_char],
) -> bool:
    # union bpf_attr for map element commands: map_fd (u32, padded), key, value/next_key, flags
    attr = struct.pack(
        "=IIQQQ",
        map_fd,
        0,
        ctypes.addressof(key) if key is not None else 0,
        ctypes.addressof(out),
        0,
    )
    buf = ctypes.create_string_buffer(attr, 128)
    res = _libc().syscall(_BPF_SYSCALL[platform.machine()], cmd, buf, 128)
    if res == 0:
        return True
    err = ctypes.get_errno()
    if err == 2:  # ENOENT: no (next) key
        return False
    raise OSError(err, os.strerror(err))


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC  # noqa: PLW0603 (one handle per process)
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


@dataclass
class Handoff:
    maps: dict[str, BpfMap]
    perf_fds: list[int]  # the attachments: closing them detaches the programs
    tracepoints: list[str]
    child_peak_rss_mib: float  # the child's VmHWM (ru_maxrss)
    child_seconds: float

    @classmethod
    def load(cls) -> Handoff:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        start = time.monotonic()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.benchmarks.bcc_handoff",
                "child",
                str(child_sock.fileno()),
            ],
            pass_fds=[child_sock.fileno()],
            cwd=Path(__file__).resolve().parents[2],
        )
        child_sock.close()
        with parent_sock:
            msg, fds, _flags, _addr = socket.recv_fds(parent_sock, 65536, 64)
        _pid, status, usage = os.wait4(proc.pid, 0)
        if not msg or os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the compiling child failed (status {status})")
        meta = json.loads(msg)
        n = len(meta["maps"])
        maps = {
            m["name"]: BpfMap(m["name"], fd, m["key_size"], m["value_size"])
            for m, fd in zip(meta["maps"], fds[:n], strict=True)
        }
        return cls(
            maps=maps,
            perf_fds=list(fds[n:]),
            tracepoints=list(meta["tracepoints"]),
            child_peak_rss_mib=usage.ru_maxrss / 1024,
            child_seconds=time.monotonic() - start,
        )

    def close(self) -> None:
        for fd in [*self.perf_fds, *(m.fd for m in self.maps.values())]:
            os.close(fd)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        child(int(sys.argv[2]))
        return
    handoff = Handoff.load()
    try:
        time.sleep(1.0)
        oncpu = handoff.maps["oncpu_ns"].items()
        print(
            f"attached {', '.join(handoff.tracepoints)}; {len(oncpu)} tasks ran in 1 s; "
            f"child peak RSS {handoff.child_peak_rss_mib:.0f} MiB; "
            f"bcc in this process: {'bcc' in sys.modules}"
        )
    finally:
        handoff.close()


if __name__ == "__main__":
    main()
