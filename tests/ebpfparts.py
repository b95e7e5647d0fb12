"""Gate tests on what real eBPF probes need on this machine (through tests.realparts: a missing
part skips locally and fails in CI)."""

from __future__ import annotations

from exporter.readings import SourceError
from exporter.sources.ebpf_load import find_tracefs
from exporter.sources.kheaders import find_kernel_headers
from tests.kubecgroups import v2_root
from tests.realparts import missing, require_root


def require_ebpf() -> None:
    """Root, bcc, a mounted tracefs, kernel headers (any) and a cgroup v2 mount."""
    require_root()
    try:
        import bcc  # noqa: F401, PLC0415
    except ImportError:
        missing("bcc (Debian's python3-bpfcc, bridged into the venv by scripts/setup-debian.sh)")
    try:
        find_tracefs()
        find_kernel_headers()
    except SourceError as exc:
        missing(f"{exc.reason}: {exc.detail}")
    v2_root()
