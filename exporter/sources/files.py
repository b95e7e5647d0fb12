"""Small helpers for reading sysfs/procfs files the same way in every source."""

from __future__ import annotations

import errno


def short_error(exc: BaseException) -> str:
    """A one-phrase description of why a read failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def read_int(path: str) -> int:
    """A sysfs number. Raises ValueError on garbage, OSError on read failure."""
    text = read_text(path)
    value = int(text)
    if value < 0:
        raise ValueError(f"negative value {value} in {path}")
    return value


def reason_for(exc: BaseException) -> str:
    """The short source_up reason for a failed read."""
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno == errno.EACCES):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "vanished"
    if isinstance(exc, ValueError):
        return "unparsable value"
    return "read error"
