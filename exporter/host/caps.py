"""Linux capabilities the sources check for, and this process's effective set."""

from __future__ import annotations

from pathlib import Path

# include/uapi/linux/capability.h
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39

SELF_STATUS = Path("/proc/self/status")


def effective_caps(status: str) -> int:
    """The CapEff bit mask of /proc/<pid>/status text. Raises ValueError without one."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise ValueError("no CapEff line")
