"""Small helpers for reading sysfs/procfs files the same way in every source."""

from __future__ import annotations

import errno

# The kernel writes u64/s64 values in at most 20 characters (18446744073709551615): anything
# longer is garbage, and must be refused before int() (Python's int is unbounded, and a number
# of 309+ digits overflows float arithmetic later) rather than become an exception elsewhere.
MAX_DIGITS = 20

# EnergyReading.fault values: why a domain a source knows gave no value this interval
UNREADABLE = "unreadable"  # the file could not be read (gone, permission, I/O error)
GARBAGE = "garbage"  # not a number
OUT_OF_RANGE = "out of range"  # a number, but not one the kernel writes (negative, too long)


class OutOfRange(ValueError):
    """A number the kernel cannot have written: negative where unsigned, or too long."""


def short_error(exc: BaseException) -> str:
    """A one-phrase description of why a read failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def parse_uint(text: str, where: str = "") -> int:
    """An unsigned decimal as the kernel writes it: 1-20 ASCII digits, nothing else.

    Raises ValueError for anything else (sign, '+5', '1_000', non-ASCII digits, too long).
    """
    suffix = f" in {where}" if where else ""
    if not text.isascii() or not text.isdigit():
        if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
            raise OutOfRange(f"negative value {text[:24]}{suffix}")
        raise ValueError(f"not a number: {text[:32]!r}{suffix}")
    if len(text) > MAX_DIGITS:
        raise OutOfRange(f"number too long ({len(text)} digits){suffix}")
    return int(text)


def read_int(path: str) -> int:
    """A sysfs number. Raises ValueError on garbage, OSError on read failure."""
    with open(path) as f:
        # a sysfs number is a short line: read only what could hold one, so a huge file is
        # garbage at once instead of a huge string
        raw = f.read(4096)
    # sysfs writes ASCII digits and a newline; int() would also take "+5", "1_000", "-0",
    # non-ASCII digits and str.strip() control characters: in a counter, only garbage
    return parse_uint(raw.strip(" \t\r\n"), path)


def reason_for(exc: BaseException) -> str:
    """The short source_up reason for a failed read."""
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno == errno.EACCES):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "vanished"
    if isinstance(exc, ValueError):
        return "unparsable value"
    return "read error"


def fault_for(exc: BaseException) -> str:
    """The short per-device fault of an EnergyReading for a failed read."""
    if isinstance(exc, OutOfRange):
        return OUT_OF_RANGE
    if isinstance(exc, ValueError):
        return GARBAGE
    return UNREADABLE
