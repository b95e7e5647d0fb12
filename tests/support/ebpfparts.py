"""Gate tests on what real eBPF probes need on this machine (through tests.support.realparts: a
missing
part skips locally and fails in CI)."""

from __future__ import annotations

import subprocess
import sys

from exporter.model.readings import SourceError
from exporter.sources.activity.ebpf.kheaders import find_kernel_headers
from exporter.sources.activity.ebpf.load import find_tracefs
from tests.support.kubecgroups import v2_root
from tests.support.realparts import missing, require_root
from tests.support.running import REPO


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


def explicit_ebpf_refusal(prefix: list[str]) -> str:
    """`wattprobe serve --activity-source ebpf` run under prefix (setpriv, unshare, ...) where the
    probes cannot load: it must exit 1 with one line, which is returned."""
    serve = ["serve", "--activity-source", "ebpf", "--web.listen-address", "127.0.0.1:0"]
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", *serve],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]
