"""exporter/sources/activity/ebpf/gpu_majors.py: which character majors are GPU devices
(/proc/devices)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.activity.ebpf.gpu_majors import (
    DEV_DRM,
    DEV_NVIDIA,
    DRM_MAJOR,
    FIXED,
    MAX_MAJORS,
    NVIDIA_MAJOR,
    classify,
)
from tests.support.props import PROPERTY

# /proc/devices of a GPU node with the NVIDIA driver loaded (nvidia-uvm, nvidia-caps and
# nvidia-nvlink take dynamic majors); its block section reuses some of those numbers
GPU_NODE = """Character devices:
  1 mem
  4 /dev/vc/0
 10 misc
195 nvidia
226 drm
234 nvidia-nvlink
235 nvidia-caps-imex-channels
236 nvidia-uvm
237 nvidia-caps
254 ndctl
510 nvidia-nvswitch

Block devices:
  7 loop
236 nvidia-lookalike
253 zram
254 virtblk
"""


def test_gpu_node() -> None:
    assert classify(GPU_NODE) == {
        195: DEV_NVIDIA,
        226: DEV_DRM,
        234: DEV_NVIDIA,
        235: DEV_NVIDIA,
        236: DEV_NVIDIA,
        237: DEV_NVIDIA,
        510: DEV_NVIDIA,
    }


def test_fixed_majors_without_any_driver() -> None:
    # this machine's kind: no GPU driver at all; the fixed majors still count, so a driver
    # loaded later is counted from its first ioctl
    text = "Character devices:\n  1 mem\n254 ndctl\n\nBlock devices:\n195 x\n226 drm\n"
    assert classify(text) == {NVIDIA_MAJOR: DEV_NVIDIA, DRM_MAJOR: DEV_DRM}
    assert classify("") == FIXED


def test_block_section_never_counts() -> None:
    assert classify("Block devices:\n300 nvidia\n301 drm\n") == FIXED


def test_odd_lines_are_skipped() -> None:
    lines = ["\u00b2 nvidia", "-3 nvidia", "4096 nvidia", "0 drm", "nvidia", " 240  nvidia-uvm "]
    text = "\n".join(["Character devices:", *lines])
    assert classify(text) == {**FIXED, 240: DEV_NVIDIA}


@PROPERTY
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=30),
            st.tuples(
                st.integers(-5, 5000), st.sampled_from(["nvidia", "nvidia-uvm", "drm", "x"])
            ).map(lambda t: f"{t[0]:3d} {t[1]}"),
            st.sampled_from(["Character devices:", "Block devices:", ""]),
        ),
        max_size=40,
    )
)
def test_any_text(lines: list[str]) -> None:
    """Any text: the fixed majors always, every major in the map's range, and a major counted
    only where the character section names it so."""
    text = "\n".join(lines)
    got = classify(text)
    assert got.items() >= FIXED.items()
    assert all(0 < m < MAX_MAJORS and c in (DEV_NVIDIA, DEV_DRM) for m, c in got.items())
    named: set[int] = set()
    section = ""
    for line in text.splitlines():
        if line.strip().endswith(":"):
            section = line.strip()
            continue
        parts = line.strip().split(None, 1)
        gpu = len(parts) == 2 and (parts[1].startswith("nvidia") or parts[1] == "drm")
        if section == "Character devices:" and gpu and parts[0].isascii() and parts[0].isdigit():
            named.add(int(parts[0]))
    assert set(got) - set(FIXED) <= named
    assert {m for m in named if 0 < m < MAX_MAJORS} <= set(got)
