"""exporter/sources/activity/ebpf/maps.py reads real BPF maps exactly as bcc's table API does, and
its
ctypes layouts rebuild the types they describe."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.sources.activity.ebpf import maps as bpf_maps
from exporter.sources.activity.ebpf.kheaders import find_kernel_headers
from exporter.sources.activity.ebpf.load import bcc_environment
from exporter.sources.activity.ebpf.maps import MapTable, ctype_from_layout, ctype_layout
from tests.support.ebpfparts import require_ebpf


class Inner(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint), ("b", ctypes.c_ubyte * 3)]


class Outer(ctypes.Structure):
    _fields_ = [
        ("x", ctypes.c_ulonglong),
        ("pair", ctypes.c_ulonglong * 2),
        ("inner", Inner),
        ("flags", ctypes.c_uint, 3),
        ("more", ctypes.c_uint, 29),
        ("path", ctypes.c_char * 13),
        ("inners", Inner * 2),
    ]


class Packed(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("a", ctypes.c_ubyte), ("b", ctypes.c_ulonglong)]


@pytest.mark.parametrize("ctype", [ctypes.c_uint, ctypes.c_ulonglong, Inner, Outer, Packed])
def test_layouts_rebuild_the_same_type(ctype: Any) -> None:
    layout = json.loads(json.dumps(ctype_layout(ctype)))  # it travels as JSON
    rebuilt = ctype_from_layout(layout)
    assert ctypes.sizeof(rebuilt) == ctypes.sizeof(ctype)
    assert ctypes.alignment(rebuilt) == ctypes.alignment(ctype)
    data = bytes(range(ctypes.sizeof(ctype)))
    original, copy = ctype.from_buffer_copy(data), rebuilt.from_buffer_copy(data)
    assert bytes(original) == bytes(copy)
    for name, *_ in getattr(ctype, "_fields_", []):
        assert getattr(ctype, name).offset == getattr(rebuilt, name).offset
        value = getattr(original, name)
        assert (bytes(value) if isinstance(value, ctypes.Array | ctypes.Structure) else value) == (
            bytes(getattr(copy, name))
            if isinstance(getattr(copy, name), ctypes.Array | ctypes.Structure)
            else getattr(copy, name)
        )


def test_possible_cpus_reads_ranges(tmp_path: Any) -> None:
    path = tmp_path / "possible"
    path.write_text("0-3,8,10-11\n")
    assert bpf_maps.possible_cpus(path) == 7


PROGRAM = r"""
struct val { u64 count; u32 ids[2]; char name[12]; };
struct slot { u64 start; u32 tid; };
BPF_HASH(plain, u32, struct val, 256);
BPF_TABLE("lru_hash", u64, struct val, lru, 64);
BPF_PERCPU_ARRAY(counters, u64, 4);
BPF_PERCPU_ARRAY(slots, struct slot, 1);
"""


@pytest.fixture(scope="module")
def bcc_maps() -> Iterator[Any]:
    """A bcc module holding maps only (nothing attached), filled through bcc's own API."""
    require_ebpf()
    import bcc  # noqa: PLC0415

    headers = find_kernel_headers()
    with bcc_environment(headers.environment()):
        bpf = bcc.BPF(text=PROGRAM.encode(), cflags=headers.cflags())
    plain, lru = bpf[b"plain"], bpf[b"lru"]
    for i in range(40):
        v = plain.Leaf(count=i * 1000, name=f"p{i}".encode())
        v.ids[0], v.ids[1] = i, i + 1
        plain[plain.Key(i)] = v
    for i in range(10):
        lru[lru.Key(2**40 + i)] = lru.Leaf(count=i)
    counters, slots = bpf[b"counters"], bpf[b"slots"]
    ncpu = counters.total_cpu
    counters[ctypes.c_int(2)] = counters.Leaf(*[7 * (c + 1) for c in range(ncpu)])
    slot_values = slots.Leaf()
    for c in range(ncpu):
        slot_values[c].start, slot_values[c].tid = 1000 + c, 50 + c
    slots[ctypes.c_int(0)] = slot_values
    yield bpf
    bpf.cleanup()


def table(bcc_table: Any, name: str) -> MapTable:
    """A MapTable over a duplicate of bcc's FD, with layouts taken from bcc's types."""
    leaf = getattr(bcc_table, "sLeaf", bcc_table.Leaf)
    return MapTable(
        name,
        os.dup(bcc_table.map_fd),
        map_type=int(bcc_table.ttype),
        key=ctype_from_layout(ctype_layout(bcc_table.Key)),
        leaf=ctype_from_layout(ctype_layout(leaf)),
        max_entries=int(bcc_table.max_entries),
    )


def as_set(items: Any) -> set[tuple[int, bytes]]:
    return {(int(getattr(k, "value", k)), bytes(v)) for k, v in items}


@pytest.mark.real
@pytest.mark.parametrize("name", ["plain", "lru"])
def test_whole_map_reads_match_bcc(bcc_maps: Any, name: str) -> None:
    ours = table(bcc_maps[name.encode()], name)
    try:
        expected = as_set(bcc_maps[name.encode()].items())
        assert expected
        assert as_set(ours.items()) == expected
        assert as_set(ours.items_lookup_batch()) == expected
        assert as_set(bcc_maps[name.encode()].items_lookup_batch()) == expected
    finally:
        ours.close()


@pytest.mark.real
def test_elements_lookup_update_delete(bcc_maps: Any) -> None:
    ours = table(bcc_maps[b"plain"], "plain")
    theirs = bcc_maps[b"plain"]
    try:
        got = ours[ours.Key(7)]
        assert (got.count, list(got.ids), got.name) == (7000, [7, 8], b"p7")
        with pytest.raises(KeyError):
            ours[ours.Key(999)]
        new = ours.Leaf(count=5)
        assert bpf_maps.update(ours.map_fd, ours.Key(999), new, bpf_maps.BPF_NOEXIST)
        assert theirs[theirs.Key(999)].count == 5
        again = ours.Leaf(count=6)
        assert not bpf_maps.update(ours.map_fd, ours.Key(999), again, bpf_maps.BPF_NOEXIST)
        assert theirs[theirs.Key(999)].count == 5, "BPF_NOEXIST kept the entry"
        del ours[ours.Key(999)]
        with pytest.raises(KeyError):
            theirs[theirs.Key(999)]
        with pytest.raises(KeyError):
            del ours[ours.Key(999)]
    finally:
        ours.close()


@pytest.mark.real
def test_per_cpu_arrays_match_bcc(bcc_maps: Any) -> None:
    counters = table(bcc_maps[b"counters"], "counters")
    slots = table(bcc_maps[b"slots"], "slots")
    try:
        theirs = bcc_maps[b"counters"]
        assert [v.value for v in counters.getvalue(2)] == list(theirs.getvalue(ctypes.c_int(2)))
        assert counters.sum(ctypes.c_int(2)).value == theirs.sum(ctypes.c_int(2)).value > 0
        assert counters.sum(ctypes.c_int(0)).value == 0
        got = [(s.start, s.tid) for s in slots.getvalue(0)]
        assert got == [(s.start, s.tid) for s in bcc_maps[b"slots"].getvalue(ctypes.c_int(0))]
        assert got[0] == (1000, 50)
    finally:
        counters.close()
        slots.close()


@pytest.mark.real
def test_lookup_and_delete_batch_empties_the_map(bcc_maps: Any) -> None:
    ours = table(bcc_maps[b"lru"], "lru")
    try:
        before = as_set(bcc_maps[b"lru"].items())
        assert as_set(ours.items_lookup_and_delete_batch()) == before
        assert ours.items() == [] and list(bcc_maps[b"lru"].items()) == []
    finally:
        ours.close()
