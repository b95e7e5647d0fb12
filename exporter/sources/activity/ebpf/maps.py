"""BPF maps through the bpf(2) syscall, for a process that holds map FDs but never imports bcc.

Importing bcc maps LLVM into the process (tens of MiB that stay resident); reading a map needs
none of it. MapTable offers the part of bcc's table API the eBPF source uses (items,
items_lookup_batch, items_lookup_and_delete_batch, getitem/delitem, per-CPU getvalue and sum,
Key and Leaf ctypes types), over a map FD that exporter/sources/activity/ebpf/child.py received
from the
short-lived process that compiled the programs. The ctypes types travel as layouts
(ctype_layout / ctype_from_layout) built from bcc's own, so the C source stays their only
definition.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exporter.host.hostfile import read_text_bounded

# bpf(2) commands and flags (include/uapi/linux/bpf.h)
LOOKUP_ELEM = 1
UPDATE_ELEM = 2
DELETE_ELEM = 3
GET_NEXT_KEY = 4
LOOKUP_BATCH = 24
LOOKUP_AND_DELETE_BATCH = 25
BPF_ANY = 0
BPF_NOEXIST = 1
# map types whose values are one per possible CPU
PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH = 5, 6, 10
PERCPU_TYPES = frozenset({PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH})

_SYSCALL_NR = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}
_ATTR_SIZE = 128  # larger than every bpf_attr variant used here; the kernel checks the tail


class _Libc:
    """The syscall entry point, loaded on first use (one per process)."""

    handle: ctypes.CDLL | None = None

    @classmethod
    def bpf_raw(cls, cmd: int, buf: Any) -> int:
        """bpf(2) on a caller-owned attr buffer (batch commands write results back into it);
        returns the result or -errno."""
        if cls.handle is None:
            cls.handle = ctypes.CDLL(None, use_errno=True)
        nr = _SYSCALL_NR.get(platform.machine())
        if nr is None:
            raise OSError(errno.ENOSYS, f"bpf(2) number unknown on {platform.machine()}")
        res: int = cls.handle.syscall(nr, cmd, buf, _ATTR_SIZE)
        return -ctypes.get_errno() if res < 0 else res

    @classmethod
    def bpf(cls, cmd: int, attr: bytes) -> int:
        return cls.bpf_raw(cmd, ctypes.create_string_buffer(attr, _ATTR_SIZE))


def _addr(obj: Any) -> int:
    return 0 if obj is None else ctypes.addressof(obj)


def _elem(cmd: int, fd: int, key: Any, value: Any = None, flags: int = 0) -> int:
    """A map element command; 0 or -errno. bpf_attr: map_fd, key, value/next_key, flags."""
    return _Libc.bpf(cmd, struct.pack("=IIQQQ", fd, 0, _addr(key), _addr(value), flags))


def update(fd: int, key: Any, value: Any, flags: int = BPF_ANY) -> bool:
    """Write one element; False when BPF_NOEXIST found it there. Works on any map FD, bcc's
    included."""
    res = _elem(UPDATE_ELEM, fd, key, value, flags)
    if res == -errno.EEXIST and flags == BPF_NOEXIST:
        return False
    if res < 0:
        raise OSError(-res, f"BPF_MAP_UPDATE_ELEM: {os.strerror(-res)}")
    return True


def possible_cpus(path: Path = Path("/sys/devices/system/cpu/possible")) -> int:
    """How many values a per-CPU map holds per key: the possible CPUs ("0-63", "0,2-3")."""
    count = 0
    for part in read_text_bounded(str(path), 4096).strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


# -- ctypes layouts -------------------------------------------------------------------------------

_SCALARS: dict[str, Any] = {
    t.__name__: t
    for t in (
        ctypes.c_char,
        ctypes.c_byte,
        ctypes.c_ubyte,
        ctypes.c_short,
        ctypes.c_ushort,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_long,
        ctypes.c_ulong,
        ctypes.c_longlong,
        ctypes.c_ulonglong,
        ctypes.c_bool,
        ctypes.c_float,
        ctypes.c_double,
    )
}
Layout = dict[str, Any]


def ctype_layout(ctype: Any) -> Layout:
    """A JSON-able description of a ctypes type (scalars, arrays, structs, unions)."""
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        return {"array": ctype_layout(ctype._type_), "length": ctype._length_}
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure | ctypes.Union):
        fields = []
        for field in ctype._fields_:
            entry: list[Any] = [field[0], ctype_layout(field[1])]
            if len(field) == 3:
                entry.append(field[2])  # a bit field's width
            fields.append(entry)
        return {
            "struct" if issubclass(ctype, ctypes.Structure) else "union": fields,
            "pack": getattr(ctype, "_pack_", 0),
            "anonymous": list(getattr(ctype, "_anonymous_", ())),
        }
    for name, scalar in _SCALARS.items():
        if ctype is scalar:
            return {"scalar": name}
    raise TypeError(f"cannot describe ctypes type {ctype!r}")


def ctype_from_layout(layout: Layout) -> Any:
    if "scalar" in layout:
        return _SCALARS[layout["scalar"]]
    if "array" in layout:
        return ctype_from_layout(layout["array"]) * int(layout["length"])
    kind = "struct" if "struct" in layout else "union"
    base = ctypes.Structure if kind == "struct" else ctypes.Union
    namespace: dict[str, Any] = {
        "_fields_": [
            (f[0], ctype_from_layout(f[1]), *([int(f[2])] if len(f) == 3 else []))
            for f in layout[kind]
        ]
    }
    if layout.get("pack"):
        namespace["_pack_"] = int(layout["pack"])
    if layout.get("anonymous"):
        namespace["_anonymous_"] = tuple(layout["anonymous"])
    return type(f"bpf_{kind}", (base,), namespace)


# -- a map --------------------------------------------------------------------------------------


class MapTable:
    """One BPF map by FD, shaped like the bcc table of the same map."""

    def __init__(
        self,
        name: str,
        fd: int,
        *,
        map_type: int,
        key: Any,
        leaf: Any,
        max_entries: int,
        cpus: int | None = None,
    ) -> None:
        self.name = name
        self.map_fd = fd
        self.map_type = map_type
        self.Key = key
        self.Leaf = leaf  # one value; per-CPU maps hold `cpus` of them per key
        self.max_entries = max_entries
        self.percpu = map_type in PERCPU_TYPES
        self.cpus = (cpus or possible_cpus()) if self.percpu else 1
        # the kernel lays per-CPU values out 8-byte aligned
        self._stride = (ctypes.sizeof(leaf) + 7) // 8 * 8 if self.percpu else ctypes.sizeof(leaf)

    def close(self) -> None:
        if self.map_fd >= 0:
            os.close(self.map_fd)
            self.map_fd = -1

    # -- single elements --------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        if self.percpu:
            raise TypeError(f"{self.name} is per-CPU: use getvalue()")
        leaf = self.Leaf()
        res = _elem(LOOKUP_ELEM, self.map_fd, key, leaf)
        if res == -errno.ENOENT:
            raise KeyError(key)
        if res < 0:
            raise OSError(-res, f"BPF_MAP_LOOKUP_ELEM {self.name}: {os.strerror(-res)}")
        return leaf

    def __delitem__(self, key: Any) -> None:
        res = _elem(DELETE_ELEM, self.map_fd, key)
        if res == -errno.ENOENT:
            raise KeyError(key)
        if res < 0:
            raise OSError(-res, f"BPF_MAP_DELETE_ELEM {self.name}: {os.strerror(-res)}")

    def getvalue(self, key: Any) -> list[Any]:
        """A per-CPU map's values of one key, one per possible CPU."""
        raw = ctypes.create_string_buffer(self._stride * self.cpus)
        if not isinstance(key, ctypes._SimpleCData | ctypes.Structure | ctypes.Array):
            key = self.Key(key)
        res = _elem(LOOKUP_ELEM, self.map_fd, key, raw)
        if res == -errno.ENOENT:
            raise KeyError(key)
        if res < 0:
            raise OSError(-res, f"BPF_MAP_LOOKUP_ELEM {self.name}: {os.strerror(-res)}")
        return [self.Leaf.from_buffer_copy(raw, i * self._stride) for i in range(self.cpus)]

    def sum(self, key: Any) -> Any:
        """A per-CPU integer's total over the CPUs, as its Leaf type (bcc's PerCpuArray.sum)."""
        return self.Leaf(sum(v.value for v in self.getvalue(key)))

    # -- whole maps -------------------------------------------------------------------------

    def _keys(self) -> Iterator[Any]:
        key: Any = None
        while True:
            next_key = self.Key()
            res = _elem(GET_NEXT_KEY, self.map_fd, key, next_key)
            if res == -errno.ENOENT:
                return
            if res < 0:
                raise OSError(-res, f"BPF_MAP_GET_NEXT_KEY {self.name}: {os.strerror(-res)}")
            yield next_key
            key = next_key

    def items(self) -> list[tuple[Any, Any]]:
        """Entry by entry (kernels without batch operations); gone entries are skipped."""
        out = []
        for key in self._keys():
            try:
                out.append((key, self[key]))
            except KeyError:
                continue
        return out

    def items_lookup_batch(self) -> list[tuple[Any, Any]]:
        return self._batch(LOOKUP_BATCH)

    def items_lookup_and_delete_batch(self) -> list[tuple[Any, Any]]:
        return self._batch(LOOKUP_AND_DELETE_BATCH)

    def values_batch(self) -> list[list[Any]]:
        """A per-CPU array's values, key by key (0, 1, ...), one list of per-CPU values each, in
        as few syscalls as the kernel allows (5.6+); OSError where it cannot."""
        if not self.percpu:
            raise TypeError(f"{self.name} is not per-CPU")
        capacity, per_key = self.max_entries, self._stride * self.cpus
        keys = (self.Key * capacity)()
        raw = ctypes.create_string_buffer(per_key * capacity)
        total = self._batch_into(LOOKUP_BATCH, keys, ctypes.addressof(raw), per_key)
        return [
            [
                self.Leaf.from_buffer_copy(raw, k * per_key + i * self._stride)
                for i in range(self.cpus)
            ]
            for k in range(total)
        ]

    def _batch(self, cmd: int) -> list[tuple[Any, Any]]:
        """Every entry in as few syscalls as the kernel allows (5.6+); OSError where it cannot.

        bpf_attr.batch: in_batch, out_batch, keys, values, count, map_fd, elem_flags, flags.
        """
        if self.percpu:
            raise TypeError(f"{self.name} is per-CPU: batch reads are not supported here")
        keys = (self.Key * self.max_entries)()
        values = (self.Leaf * self.max_entries)()
        total = self._batch_into(cmd, keys, ctypes.addressof(values), ctypes.sizeof(self.Leaf))
        return [(keys[i], values[i]) for i in range(total)]

    def _batch_into(self, cmd: int, keys: Any, values_at: int, value_size: int) -> int:
        """Fills keys and the values buffer at values_at; returns how many entries came."""
        capacity = self.max_entries
        token = ctypes.c_uint64(0)  # opaque position; the kernel writes out_batch
        key_size = ctypes.sizeof(self.Key)
        total = 0
        while total < capacity:
            count = capacity - total
            attr = struct.pack(
                "=QQQQIIQQ",
                0 if total == 0 else ctypes.addressof(token),
                ctypes.addressof(token),
                ctypes.addressof(keys) + key_size * total,
                values_at + value_size * total,
                count,
                self.map_fd,
                0,
                0,
            )
            buf = ctypes.create_string_buffer(attr, _ATTR_SIZE)
            res = _Libc.bpf_raw(cmd, buf)
            got = struct.unpack_from("=I", buf, 32)[0]  # the kernel writes back count
            total += got
            if res == -errno.ENOENT:
                break  # the end of the map
            if res < 0:
                raise OSError(-res, f"batch read of {self.name}: {os.strerror(-res)}")
            if got == 0:
                break  # no progress (concurrent updates filled one bucket): take what we have
        return total
