"""Struct member offsets from the running kernel's BTF (/sys/kernel/btf/vmlinux).

bcc compiles bpf/activity.c against whatever kernel headers it finds, often a generic set of
another kernel (docs/ebpf.md): their struct layouts need not be the running kernel's. The ioctl
probe has to follow a file descriptor to its device number (task -> files -> fdt -> fd[] -> file
-> inode), so it reads those fields at offsets taken from here, which describe the kernel that
runs, and never from the headers.

The format (Documentation/bpf/btf.rst): a header, a type section (records of 12 bytes, each
followed by data whose size its kind and vlen fix) and a string section. Only what finding a
member's offset and its type's size needs is decoded.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.host.hostfile import read_bounded

VMLINUX = Path("/sys/kernel/btf/vmlinux")

MAGIC = 0xEB9F
_HEADER = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, type/str off+len
_TYPE = struct.Struct("<III")  # name_off, info, size or type
_MEMBER = struct.Struct("<III")  # name_off, type, offset

# kinds (include/uapi/linux/btf.h)
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF = 1, 2, 3, 4, 5, 6, 7, 8
VOLATILE, CONST, RESTRICT, FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT = 9, 10, 11, 12, 13, 14, 15, 16
DECL_TAG, TYPE_TAG, ENUM64 = 17, 18, 19
# bytes of kind-specific data after the 12-byte record: fixed, and per vlen item
_EXTRA = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ITEM = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}
_MODIFIERS = frozenset({TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG})
POINTER_SIZE = 8  # the probes only run on 64-bit kernels
_MAX_NESTING = 16  # anonymous unions in structs: a handful deep; more is corrupt BTF


class BtfError(ValueError):
    """The BTF cannot be read, or lacks what was asked for."""


@dataclass(frozen=True, slots=True)
class _Type:
    name: str
    kind: int
    kind_flag: bool
    vlen: int
    size_or_type: int  # size (INT, STRUCT, UNION, ENUM, ...) or referred type id
    data: int  # offset of the kind-specific data in the type section


@dataclass(frozen=True, slots=True)
class Member:
    """A member as reached from its outer struct: byte offset there and its type's size."""

    offset: int
    size: int


class Btf:
    """The parsed type section of one BTF blob; types are decoded when asked for."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < _HEADER.size:
            raise BtfError("BTF blob shorter than its header")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = (
            _HEADER.unpack_from(blob)
        )
        if magic != MAGIC:
            raise BtfError(f"not little-endian BTF (magic {magic:#x})")
        types_at, strings_at = hdr_len + type_off, hdr_len + str_off
        if types_at + type_len > len(blob) or strings_at + str_len > len(blob):
            raise BtfError("BTF sections run past the end of the blob")
        self._types = blob[types_at : types_at + type_len]
        self._strings = blob[strings_at : strings_at + str_len]
        self._offsets = self._index()

    @classmethod
    def read(cls, path: Path = VMLINUX) -> Btf:
        try:
            # vmlinux BTF is a few MiB; the bound only keeps a hostile file from costing more
            return cls(read_bounded(str(path), 256 << 20))
        except OSError as exc:
            raise BtfError(f"cannot read {path}: {exc}") from exc

    def _index(self) -> list[int]:
        """Where each type's record starts; type id i is at index i - 1 (id 0 is void)."""
        offsets = []
        at, end, data = 0, len(self._types), self._types
        while at < end:
            if at + _TYPE.size > end:
                raise BtfError("truncated type record")
            info = _TYPE.unpack_from(data, at)[1]
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            offsets.append(at)
            at += _TYPE.size + _EXTRA.get(kind, 0) + _PER_ITEM.get(kind, 0) * vlen
        if at != end:
            raise BtfError("type section does not end on a record")
        return offsets

    def _name(self, offset: int) -> str:
        if offset >= len(self._strings):
            raise BtfError(f"string offset {offset} out of range")
        end = self._strings.find(b"\0", offset)
        return self._strings[offset : end if end >= 0 else None].decode(errors="replace")

    def _type(self, type_id: int) -> _Type:
        if not 0 < type_id <= len(self._offsets):
            raise BtfError(f"type id {type_id} out of range")
        at = self._offsets[type_id - 1]
        name_off, info, size_or_type = _TYPE.unpack_from(self._types, at)
        return _Type(
            name=self._name(name_off),
            kind=(info >> 24) & 0x1F,
            kind_flag=bool(info >> 31),
            vlen=info & 0xFFFF,
            size_or_type=size_or_type,
            data=at + _TYPE.size,
        )

    def struct_id(self, name: str) -> int:
        """The id of the struct called name (a definition, not a forward declaration)."""
        wanted = name.encode() + b"\0"
        for i, at in enumerate(self._offsets):
            name_off, info, _ = _TYPE.unpack_from(self._types, at)
            if (info >> 24) & 0x1F == STRUCT and self._strings.startswith(wanted, name_off):
                return i + 1
        raise BtfError(f"no struct {name} in the kernel's BTF")

    def size_of(self, type_id: int) -> int:
        """Bytes of the type, through typedefs, qualifiers and arrays."""
        count = 1
        for _ in range(32):  # chains are short; a longer one (or a loop) is corrupt BTF
            t = self._type(type_id)
            if t.kind in _MODIFIERS:
                type_id = t.size_or_type
            elif t.kind == ARRAY:
                elem, _index, n = struct.unpack_from("<III", self._types, t.data)
                type_id, count = int(elem), count * int(n)
            elif t.kind == PTR:
                return POINTER_SIZE * count
            elif t.kind in (INT, STRUCT, UNION, ENUM, ENUM64, FLOAT):
                return t.size_or_type * count
            else:
                raise BtfError(f"type {type_id} (kind {t.kind}) has no size")
        raise BtfError(f"type {type_id}: type chain too long")

    def member(self, struct_name: str, member: str) -> Member:
        """Offset and size of a member of struct struct_name, looking into anonymous unions
        and structs as C does."""
        found = self._find_member(self.struct_id(struct_name), member, 0, 0)
        if found is None:
            raise BtfError(f"struct {struct_name} has no member {member}")
        return found

    def _find_member(self, type_id: int, member: str, base: int, depth: int) -> Member | None:
        if depth > _MAX_NESTING:
            raise BtfError(f"anonymous members nested deeper than {_MAX_NESTING}")
        t = self._type(type_id)
        for i in range(t.vlen):
            name_off, member_type, offset = _MEMBER.unpack_from(self._types, t.data + 12 * i)
            bits = offset & 0xFFFFFF if t.kind_flag else offset  # kind_flag: bitfield size above
            name = self._name(name_off)
            if name == member:
                if bits % 8:
                    raise BtfError(f"{member} is a bitfield")
                return Member(base + bits // 8, self.size_of(member_type))
            if not name:  # anonymous union or struct: its members are the outer struct's
                inner = self._strip(member_type)
                if self._type(inner).kind in (STRUCT, UNION):
                    found = self._find_member(inner, member, base + bits // 8, depth + 1)
                    if found is not None:
                        return found
        return None

    def _strip(self, type_id: int) -> int:
        for _ in range(32):
            t = self._type(type_id)
            if t.kind not in _MODIFIERS:
                return type_id
            type_id = t.size_or_type
        raise BtfError(f"type {type_id}: modifier chain too long")


@dataclass(frozen=True)
class Field:
    """A member the probe reads, and the size it reads it as."""

    struct: str
    member: str
    size: int
    define: str  # the -D name activity.c takes its offset from


# What the ioctl probe reads to find the device an ioctl's fd refers to (bpf/activity.c)
FD_DEVICE_FIELDS = (
    Field("task_struct", "files", POINTER_SIZE, "WATTPROBE_OFF_TASK_FILES"),
    Field("files_struct", "fdt", POINTER_SIZE, "WATTPROBE_OFF_FILES_FDT"),
    Field("fdtable", "max_fds", 4, "WATTPROBE_OFF_FDT_MAX_FDS"),
    Field("fdtable", "fd", POINTER_SIZE, "WATTPROBE_OFF_FDT_FD"),
    Field("file", "f_inode", POINTER_SIZE, "WATTPROBE_OFF_FILE_INODE"),
    Field("inode", "i_mode", 2, "WATTPROBE_OFF_INODE_MODE"),
    Field("inode", "i_rdev", 4, "WATTPROBE_OFF_INODE_RDEV"),
)


def offset_flags(btf: Btf, fields: Sequence[Field] = FD_DEVICE_FIELDS) -> list[str]:
    """-D flags with each field's offset, after checking its size is what the probe reads."""
    flags = []
    for f in fields:
        m = btf.member(f.struct, f.member)
        if m.size != f.size:
            raise BtfError(f"{f.struct}.{f.member} is {m.size} bytes, the probe reads {f.size}")
        flags.append(f"-D{f.define}={m.offset}")
    return flags


# On-CPU time from the kernel's own per-task runtime (bpf/activity.c WATTPROBE_TASK_RUNTIME):
# task_struct.se is a struct sched_entity, whose runtime fields are read through it
RUNTIME_FIELDS = (
    (("task_struct", "se"), Field("sched_entity", "sum_exec_runtime", 8, "WATTPROBE_OFF_SUM_EXEC")),
    (
        ("task_struct", "se"),
        Field("sched_entity", "prev_sum_exec_runtime", 8, "WATTPROBE_OFF_PREV_SUM_EXEC"),
    ),
    # the incoming thread's id, read only until userspace's first reading (baseline_read)
    (None, Field("task_struct", "pid", 4, "WATTPROBE_OFF_TASK_PID")),
)


def runtime_flags(btf: Btf) -> list[str]:
    """-D flags with the offsets, from a task_struct, of the fields in RUNTIME_FIELDS (sizes
    checked)."""
    flags = []
    for outer, f in RUNTIME_FIELDS:
        base = btf.member(*outer).offset if outer is not None else 0
        m = btf.member(f.struct, f.member)
        if m.size != f.size:
            raise BtfError(f"{f.struct}.{f.member} is {m.size} bytes, the probe reads {f.size}")
        flags.append(f"-D{f.define}={base + m.offset}")
    return flags


def irq_time_accounted(btf: Btf) -> bool:
    """Whether the kernel was built with CONFIG_IRQ_TIME_ACCOUNTING: struct irqtime (the per-CPU
    interrupt time kept out of task runtime, kernel/sched/sched.h) is defined only then."""
    try:
        btf.struct_id("irqtime")
    except BtfError:
        return False
    return True
