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
    with open(path) as f:
        # sysfs writes ASCII digits and a newline; int() would also take "+5", "1_000", "-0",
        # non-ASCII digits and str.strip() control characters: in a counter, only garbage
        text = f.read().strip(" \t\r\n")
    if not text.isascii() or not text.isdigit():
        if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
            raise ValueError(f"negative value {text} in {path}")
        raise ValueError(f"not a number: {text[:32]!r} in {path}")
    return int(text)


def reason_for(exc: BaseException) -> str:
    """The short source_up reason for a failed read."""
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno == errno.EACCES):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "vanished"
    if isinstance(exc, ValueError):
        return "unparsable value"
    return "read error"
