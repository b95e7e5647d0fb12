"""Kernel files read every interval through descriptors kept open: one pread a read.

Opening a cgroupfs file costs the kernel a path walk and a new seq_file each time, and the
process three more syscalls (fstat, close, and the read that meets the end); a descriptor kept
open and read with pread at offset 0 regenerates the file's content (seq_read_iter restarts at
offset 0) for one syscall. Only where the files are the kernel's own (cgroupfs): a file there is
never replaced in place (a removed cgroup's file reads ENODEV, and a new cgroup at the same path
is a new file, opened again). Elsewhere (fixture trees, whose files tests replace by rename) each
read opens the file, as hostfile.read_whole does.

Every descriptor comes from hostfile.open_regular (non-blocking, regular files only), and every
read is whole and bounded (FileTooLarge beyond, as hostfile.read_whole); at most `limit`
descriptors are kept, the rest opened per read.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from exporter.host.hostfile import FileTooLarge, open_regular, read_whole

CGROUP2_SUPER_MAGIC = 0x63677270
CGROUP_SUPER_MAGIC = 0x27E0EB
_STATFS_BYTES = 256  # struct statfs is 120 bytes on 64-bit Linux; f_type is its first field


def filesystem_magic(path: str) -> int | None:
    """statfs(2)'s f_type of the filesystem holding path, or None when it cannot be told."""
    # the C library the process already has (find_library would exec ldconfig: test_no_exec)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(_STATFS_BYTES)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def is_cgroupfs(path: str) -> bool:
    return filesystem_magic(path) in (CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC)


class KeptFiles:
    """Whole, bounded reads of files under one root, through kept descriptors where the root is
    a cgroup filesystem. Not thread-safe: one reader (the source's own worker)."""

    def __init__(self, root: str, *, limit: int = 4096) -> None:
        self.keeping = is_cgroupfs(root)
        self._limit = limit
        self._fds: dict[str, int] = {}
        self.opens = 0  # files opened so far (benchmarks, tests)

    def read(self, path: str, max_bytes: int) -> bytes:
        """The whole file, at most max_bytes (FileTooLarge beyond); OSError as open and read
        raise it (a removed cgroup's kept descriptor: ENODEV, and it is dropped)."""
        if not self.keeping:
            self.opens += 1
            return read_whole(path, max_bytes)
        fd = self._fds.get(path)
        if fd is None:
            fd = open_regular(path)
            self.opens += 1
            if len(self._fds) < self._limit:
                self._fds[path] = fd
            else:
                try:
                    return _pread_whole(fd, path, max_bytes)
                finally:
                    os.close(fd)
        try:
            return _pread_whole(fd, path, max_bytes)
        except OSError:
            self.forget(path)  # gone (ENODEV), or not what the kernel writes: open it again
            raise

    def keep_only(self, paths: set[str]) -> None:
        """Close the descriptors of files no longer read (their cgroups went from the walk)."""
        for path in [p for p in self._fds if p not in paths]:
            self.forget(path)

    def forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for path in list(self._fds):
            self.forget(path)


def _pread_whole(fd: int, path: str, max_bytes: int) -> bytes:
    """The whole file from offset 0, unless it runs past the bound (FileTooLarge: a file cut
    there would be parsed as if whole)."""
    data = os.pread(fd, max_bytes + 1, 0)
    if len(data) > max_bytes:
        raise FileTooLarge(path, max_bytes)
    return data
