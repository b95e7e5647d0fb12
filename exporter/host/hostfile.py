"""Opening a host file so that no read can block: non-blocking, regular files only, bounded.

Every file the agent reads from the host (sysfs attributes, procfs and cgroupfs files, CDI specs)
is a regular file when the host is sane: sysfs attributes and procfs files both stat as regular
files. A FIFO, a socket or a device in their place (a hostile or broken node, a fixture tree) must
not hang the reader: open() of a FIFO blocks until a writer appears and read() until it writes.
So files are opened with O_NONBLOCK (a FIFO then opens at once and reads EOF or EAGAIN, never
waits), checked with fstat, and refused with a short reason when they are not regular files.
Reads are bounded, so a huge or endless file costs at most the bound.

This sits at the bottom of the layers (beside kernelnum) because sources and the Kubernetes side
(CDI specs) both read host files.
"""

from __future__ import annotations

import errno
import os
import stat

# O_NONBLOCK: a FIFO opens without waiting for a writer; O_NOCTTY: a tty never becomes ours
OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_CHUNK = 65536


class FileTooLarge(OSError):
    """A file longer than the bound set for it: not what the kernel writes there (a sparse
    file, an endless one), refused rather than read in part and parsed as if whole."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit} bytes", path)
        self.limit = limit


class NotRegularFile(OSError):
    """A path that is not a regular file where one must be (a FIFO, a socket, a device...)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", path)
        self.kind = kind


_KINDS = {
    stat.S_IFREG: "file",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFDIR: "directory",
    stat.S_IFLNK: "symlink",
}


def file_kind(mode: int) -> str:
    """What an st_mode is, in a word, for reasons and logs."""
    return _KINDS.get(stat.S_IFMT(mode), "unknown file type")


def open_regular(path: str, *, follow: bool = True) -> int:
    """An fd of path opened read-only and non-blocking; NotRegularFile unless a regular file.

    follow=False adds O_NOFOLLOW: a symlink as the last component is refused (ELOOP). sysfs
    attributes are never symlinks themselves (their directories may be).
    """
    fd = os.open(path, OPEN_FLAGS if follow else OPEN_FLAGS | os.O_NOFOLLOW)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, file_kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str, limit: int, *, follow: bool = True) -> bytes:
    """At most limit bytes of a regular file (procfs and sysfs report size 0, so read until EOF
    or the bound). Raises NotRegularFile, or OSError as open/read do."""
    fd = open_regular(path, follow=follow)
    try:
        return _read_fd(fd, limit)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes:
    parts: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_whole(path: str, limit: int, *, follow: bool = True) -> bytes:
    """The whole of a regular file of at most limit bytes; FileTooLarge when it holds more (a
    list such as cgroup.procs cut at the bound would end in half a number). One byte past the
    bound is read to tell the two apart, so the cost stays bounded."""
    fd = open_regular(path, follow=follow)
    try:
        # procfs and cgroupfs files stat as size 0 (sysfs as a page): a larger size is a file
        # the kernel did not write (a sparse or huge one), refused before a byte is read
        if os.fstat(fd).st_size > max(limit, 4096):
            raise FileTooLarge(path, limit)
        data = _read_fd(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data


def read_text_bounded(path: str, limit: int, *, follow: bool = True) -> str:
    """read_bounded, decoded as UTF-8 with undecodable bytes replaced (host text is mostly
    ASCII; a stray byte must not make a whole file unreadable)."""
    return read_bounded(path, limit, follow=follow).decode("utf-8", "replace")
