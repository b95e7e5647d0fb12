"""Loaded by a `wattprobe serve` under test (PYTHONPATH=tests/stuckread): a host read that hangs.

Host files are opened non-blocking and a FIFO is refused at once (exporter/host/hostfile.py), so no
file on this machine can make a read hang any more; a wedged driver's sysfs attribute or a
/proc file behind a task in uninterruptible sleep still can. To play that, a read of the path
named in $WATTPROBE_TEST_STUCK_DIR/stuck waits, inside the open, until that file is removed.
The test's own code path is the real one: only the open of that one path is held.
"""

from __future__ import annotations

import os
import time

_DIR = os.environ.get("WATTPROBE_TEST_STUCK_DIR")

if _DIR:
    import exporter.host.hostfile as _hostfile

    _marker = os.path.join(_DIR, "stuck")
    _real_open = _hostfile.open_regular

    def _stuck_path() -> str | None:
        try:
            with open(_marker) as f:
                return f.read().strip()
        except OSError:
            return None

    def _open_regular(path: str, *, follow: bool = True) -> int:
        if _stuck_path() == path:
            while _stuck_path() == path:
                time.sleep(0.02)
        return _real_open(path, follow=follow)

    _hostfile.open_regular = _open_regular
