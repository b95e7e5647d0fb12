"""exporter/sources/activity/ebpf/btf.py: member offsets from BTF blobs built here (known layouts,
any
layout hypothesis draws, damaged blobs) and from this kernel's own BTF."""

from __future__ import annotations

import contextlib
import gzip
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.activity.ebpf.btf import (
    ARRAY,
    CONST,
    FD_DEVICE_FIELDS,
    FWD,
    INT,
    MAGIC,
    PTR,
    STRUCT,
    TYPEDEF,
    UNION,
    VMLINUX,
    Btf,
    BtfError,
    irq_time_accounted,
    offset_flags,
)
from tests.support.props import PROPERTY
from tests.support.realparts import missing


@dataclass
class Builder:
    """Writes a little-endian BTF blob type by type; ids start at 1."""

    types: bytearray = field(default_factory=bytearray)
    strings: bytearray = field(default_factory=lambda: bytearray(b"\0"))
    count: int = 0

    def name(self, text: str) -> int:
        if not text:
            return 0
        at = len(self.strings)
        self.strings += text.encode() + b"\0"
        return at

    def _add(self, name: str, kind: int, vlen: int, size_or_type: int, extra: bytes = b"") -> int:
        info = (kind << 24) | vlen
        self.types += struct.pack("<III", self.name(name), info, size_or_type) + extra
        self.count += 1
        return self.count

    def int_(self, name: str, size: int) -> int:
        return self._add(name, INT, 0, size, struct.pack("<I", size * 8))

    def ptr(self, to: int) -> int:
        return self._add("", PTR, 0, to)

    def modifier(self, kind: int, name: str, to: int) -> int:
        return self._add(name, kind, 0, to)

    def fwd(self, name: str) -> int:
        return self._add(name, FWD, 0, 0)

    def struct(
        self, name: str, size: int, members: list[tuple[str, int, int]], kind: int = STRUCT
    ) -> int:
        """members: (name, type id, bit offset)"""
        extra = b"".join(struct.pack("<III", self.name(n), t, off) for n, t, off in members)
        return self._add(name, kind, len(members), size, extra)

    def blob(self) -> bytes:
        header = struct.pack(
            "<HBBIIIII", MAGIC, 1, 0, 24, 0, len(self.types), len(self.types), len(self.strings)
        )
        return header + bytes(self.types) + bytes(self.strings)


def kernel_like() -> bytes:
    """The structs the ioctl probe reads, shaped as in 6.x (members at known offsets, i_rdev
    behind a typedef, f_inode after an anonymous union, a forward declaration first)."""
    b = Builder()
    u16, u32, u64 = b.int_("unsigned short", 2), b.int_("unsigned int", 4), b.int_("u64", 8)
    b.fwd("inode")  # a forward declaration of the same name must not be taken for the struct
    dev_t = b.modifier(TYPEDEF, "dev_t", b.modifier(TYPEDEF, "__kernel_dev_t", u32))
    umode = b.modifier(TYPEDEF, "umode_t", u16)
    inode = b.struct(
        "inode",
        600,
        [("i_mode", umode, 0), ("i_opflags", u16, 16), ("i_uid", u32, 32), ("i_rdev", dev_t, 608)],
    )
    void_ptr = b.ptr(0)
    anon = b.struct("", 16, [("f_llist", u64, 0), ("f_rcuhead", u64, 64)], kind=UNION)
    file = b.struct(
        "file",
        232,
        [("", anon, 0), ("f_lock", u32, 128), ("f_inode", b.ptr(inode), 256), ("x", void_ptr, 320)],
    )
    file_pp = b.ptr(b.ptr(file))
    fdtable = b.struct("fdtable", 56, [("max_fds", u32, 0), ("fd", file_pp, 64)])
    files = b.struct(
        "files_struct",
        704,
        [("count", u32, 0), ("fdt", b.modifier(CONST, "", b.ptr(fdtable)), 256)],
    )
    b.struct("task_struct", 9000, [("state", u32, 0), ("files", b.ptr(files), 1824 * 8)])
    return b.blob()


def test_offsets_of_a_known_layout() -> None:
    btf = Btf(kernel_like())
    assert btf.member("inode", "i_rdev").offset == 76
    assert btf.member("inode", "i_rdev").size == 4  # through two typedefs
    assert btf.member("file", "f_inode").offset == 32
    assert btf.member("file", "f_rcuhead").offset == 8  # inside the anonymous union
    assert offset_flags(btf) == [
        "-DWATTPROBE_OFF_TASK_FILES=1824",
        "-DWATTPROBE_OFF_FILES_FDT=32",
        "-DWATTPROBE_OFF_FDT_MAX_FDS=0",
        "-DWATTPROBE_OFF_FDT_FD=8",
        "-DWATTPROBE_OFF_FILE_INODE=32",
        "-DWATTPROBE_OFF_INODE_MODE=0",
        "-DWATTPROBE_OFF_INODE_RDEV=76",
    ]


def test_missing_struct_member_or_wrong_size_is_an_error() -> None:
    btf = Btf(kernel_like())
    with pytest.raises(BtfError, match="no struct nosuch"):
        btf.member("nosuch", "x")
    with pytest.raises(BtfError, match="has no member i_nosuch"):
        btf.member("inode", "i_nosuch")
    b = Builder()
    u64 = b.int_("u64", 8)
    b.struct("inode", 16, [("i_mode", u64, 0), ("i_rdev", u64, 64)])  # i_rdev of 8 bytes
    with pytest.raises(BtfError):
        offset_flags(Btf(b.blob()))


def test_bitfield_member_is_refused() -> None:
    b = Builder()
    u32 = b.int_("unsigned int", 4)
    b.struct("s", 4, [("a", u32, 3)])
    with pytest.raises(BtfError, match="bitfield"):
        Btf(b.blob()).member("s", "a")


@PROPERTY
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=1 << 16), min_size=1, max_size=20),
    sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=20, max_size=20),
    nest_at=st.integers(min_value=0, max_value=1 << 12),
)
def test_any_layout_is_read_back(offsets: list[int], sizes: list[int], nest_at: int) -> None:
    b = Builder()
    ints = {n: b.int_(f"u{8 * n}", n) for n in (1, 2, 4, 8)}
    members = [(f"m{i}", ints[sizes[i]], 8 * off) for i, off in enumerate(offsets)]
    inner = b.struct("", 64, [("deep", ints[8], 8 * 24)], kind=UNION)
    b.struct("target", 1 << 20, [*members, ("", inner, 8 * nest_at)])
    btf = Btf(b.blob())
    for i, off in enumerate(offsets):
        found = btf.member("target", f"m{i}")
        assert (found.offset, found.size) == (off, sizes[i])
    assert btf.member("target", "deep").offset == nest_at + 24


@PROPERTY
@given(
    cut=st.integers(min_value=0, max_value=2000),
    junk=st.binary(max_size=64),
    flips=st.lists(st.tuples(st.integers(min_value=24), st.integers(1, 255)), max_size=8),
)
def test_damaged_blob_raises_btf_error_only(
    cut: int, junk: bytes, flips: list[tuple[int, int]]
) -> None:
    blob = kernel_like()
    flipped = bytearray(blob)
    for at, bits in flips:
        flipped[at % len(blob)] ^= bits
    for damaged in (blob[: cut % len(blob)], blob[:24] + junk, junk, bytes(flipped)):
        with contextlib.suppress(BtfError):
            offset_flags(Btf(damaged))


def test_self_containing_anonymous_member_is_an_error() -> None:
    b = Builder()
    b.struct("s", 8, [("", 1, 0)])  # type 1 is s itself
    with pytest.raises(BtfError):
        Btf(b.blob()).member("s", "x")


def test_header_checks() -> None:
    with pytest.raises(BtfError, match="magic"):
        Btf(b"\xeb\x9f" + bytes(30))  # big-endian BTF
    with pytest.raises(BtfError, match="shorter"):
        Btf(b"\x9f")
    with pytest.raises(BtfError, match="cannot read"):
        Btf.read(Path("/nonexistent/vmlinux"))


@pytest.mark.real
def test_this_kernels_btf() -> None:
    """The running kernel's layouts. fdtable has begun with max_fds, then fd, since 2.6.14, and
    i_mode is struct inode's first member: those offsets are known without BTF."""
    if not VMLINUX.is_file():
        missing(f"kernel BTF ({VMLINUX})")
    btf = Btf.read()
    flags = dict(f.removeprefix("-D").split("=") for f in offset_flags(btf))
    assert set(flags) == {f.define for f in FD_DEVICE_FIELDS}
    assert flags["WATTPROBE_OFF_FDT_MAX_FDS"] == "0"
    assert flags["WATTPROBE_OFF_FDT_FD"] == "8"
    assert flags["WATTPROBE_OFF_INODE_MODE"] == "0"
    assert 0 < int(flags["WATTPROBE_OFF_INODE_RDEV"]) < btf.size_of(btf.struct_id("inode"))
    assert 0 < int(flags["WATTPROBE_OFF_TASK_FILES"]) < btf.size_of(btf.struct_id("task_struct"))


def test_sizes_through_arrays_and_a_self_referring_array() -> None:
    b = Builder()
    u32 = b.int_("unsigned int", 4)
    arr = b._add("", ARRAY, 0, 0, struct.pack("<III", u32, u32, 5))  # u32[5]
    b.struct("s", 20, [("a", arr, 0)])
    looped = b._add("", ARRAY, 0, 0, struct.pack("<III", 4, u32, 2))  # id 4: an array of itself
    btf = Btf(b.blob())
    assert btf.member("s", "a").size == 20
    with pytest.raises(BtfError, match="too long"):
        btf.size_of(looped)


def test_irq_time_accounting_is_told_by_struct_irqtime() -> None:
    with_it, without = Builder(), Builder()
    u64 = with_it.int_("long long unsigned int", 8)
    with_it.struct("irqtime", 24, [("total", u64, 0), ("tick_delta", u64, 64)])
    without.int_("long long unsigned int", 8)
    without.fwd("irqtime")  # a declaration alone is no definition
    assert irq_time_accounted(Btf(with_it.blob()))
    assert not irq_time_accounted(Btf(without.blob()))


@pytest.mark.real
def test_irq_time_accounting_matches_this_kernels_config() -> None:
    """Ground truth: the kernel's own config, where it publishes it (/proc/config.gz)."""
    config = Path("/proc/config.gz")
    if not VMLINUX.is_file() or not config.is_file():
        pytest.skip("this kernel publishes no BTF or no /proc/config.gz to compare with")
    enabled = "CONFIG_IRQ_TIME_ACCOUNTING=y" in gzip.decompress(config.read_bytes()).decode()
    assert irq_time_accounted(Btf.read()) == enabled
