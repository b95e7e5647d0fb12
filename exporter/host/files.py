"""Small helpers for reading sysfs/procfs files the same way in every source.

Every read goes through exporter/host/hostfile.py: opened non-blocking, refused unless a regular
file, bounded. So a FIFO, a socket or a device where an attribute should be is a fault of that one
device ("not a regular file"), never a read that hangs its source.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from exporter.host.hostfile import FileTooLarge, NotRegularFile, read_bounded
from exporter.host.kernelnum import OutOfRange, parse_uint

# EnergyReading.fault values: why a domain a source knows gave no value this interval
UNREADABLE = "unreadable"  # the file could not be read (gone, permission, I/O error)
GARBAGE = "garbage"  # not a number
OUT_OF_RANGE = "out of range"  # a number, but not one the kernel writes (negative, too long)
NOT_A_FILE = "not a regular file"  # a FIFO, socket or device where an attribute should be
TOO_LARGE = "file too large"  # longer than the kernel writes there (a huge or sparse file)

# A sysfs attribute is at most a page (PAGE_SIZE, 4 KiB); text files we read whole (uevent,
# labels, osrelease) are far shorter. More is not what the kernel wrote.
MAX_ATTRIBUTE_BYTES = 4096


def short_error(exc: BaseException) -> str:
    """A one-phrase description of why a read failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_text(path: str) -> str:
    """A sysfs/procfs text attribute (at most a page), stripped. Raises OSError (NotRegularFile
    for a FIFO, socket or device) on read failure."""
    return read_bounded(path, MAX_ATTRIBUTE_BYTES, follow=False).decode("utf-8", "replace").strip()


def read_int(path: str) -> int:
    """A sysfs number. Raises ValueError on garbage, OSError on read failure."""
    # a sysfs number is a short line: read only what could hold one, so a huge file is
    # garbage at once instead of a huge string
    raw = read_bounded(path, MAX_ATTRIBUTE_BYTES, follow=False).decode("ascii", "replace")
    # sysfs writes ASCII digits and a newline; int() would also take "+5", "1_000", "-0",
    # non-ASCII digits and str.strip() control characters: in a counter, only garbage
    return parse_uint(raw.strip(" \t\r\n"), path)


def reason_for(exc: BaseException) -> str:
    """The short source_up reason for a failed read."""
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno == errno.EACCES):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "vanished"
    if isinstance(exc, NotRegularFile):
        return NOT_A_FILE
    if isinstance(exc, FileTooLarge):
        return TOO_LARGE
    if isinstance(exc, ValueError):
        return "unparsable value"
    return "read error"


def fault_for(exc: BaseException) -> str:
    """The short per-device fault of an EnergyReading for a failed read."""
    if isinstance(exc, OutOfRange):
        return OUT_OF_RANGE
    if isinstance(exc, NotRegularFile):
        return NOT_A_FILE
    if isinstance(exc, ValueError):
        return GARBAGE
    return UNREADABLE


FileStamp = tuple[object, ...]


def file_stamp(path: Path) -> FileStamp:
    """What changes when a file is replaced or rewritten (a ConfigMap's ..data swap included):
    device, inode, size, mtime and ctime; the errno while it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return (exc.errno,)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
