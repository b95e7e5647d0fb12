"""Give the heap that a connection flood freed back to the system.

glibc's malloc keeps freed memory in its arenas: after a flood of TLS handshakes had closed,
RSS stayed at the flood's peak although the objects were gone (issue 28: 649 MiB, and 49 MiB
after gc.collect() and malloc_trim(0)). The server calls Trimmer.tick() every few seconds; it
trims only when enough connections closed since the last trim, so a quiet server never pays
for it (malloc_trim walks the heap: milliseconds on a 100 MiB heap).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_AFTER_CLOSED = 256


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl). Looked up in the
    process's own symbols: ctypes.util.find_library would run ldconfig, and the agent never
    starts another program (tests/system/test_no_exec.py)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Trimmer:
    def __init__(self, trim: Callable[[int], int] | None = None) -> None:
        self._trim = trim if trim is not None else _malloc_trim()
        self.closed = 0  # connections closed since the last trim
        self.trims = 0
        self._tail = False  # a flood was trimmed: trim once more for its last connections

    def closed_one(self) -> None:
        self.closed += 1

    def tick(self) -> bool:
        """Trim if a flood's worth of connections closed since the last trim, or if some closed
        since a flood's trim (its last connections, often its largest); True if it did."""
        if self._trim is None:
            return False
        if self.closed >= TRIM_AFTER_CLOSED:
            self._tail = True
        elif not (self._tail and self.closed > 0):
            self._tail = False
            return False
        self.closed = 0
        self._trim(0)
        self.trims += 1
        return True
