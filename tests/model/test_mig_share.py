"""A MIG device's share of its GPU, from the profile in its NVML name (docs/showback.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.gpu_readings import MigInstanceReading


def mig(name: str) -> MigInstanceReading:
    return MigInstanceReading("MIG-x", name, 1, 0, None, None)


@pytest.mark.parametrize(
    ("name", "share"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 3 / 7),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1 / 7),
        ("NVIDIA H100 80GB HBM3 MIG 7g.80gb", 1.0),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 1 / 7),  # with the media engines
        ("NVIDIA H100 80GB HBM3 MIG 1g.20gb", 1 / 7),  # 2 memory slices, 1 compute
        # a compute instance smaller than its GPU instance: the instance's slices count
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", 3 / 7),
        ("NVIDIA A30 MIG 2g.12gb", 2 / 4),  # the A30 has 4 slices
        ("NVIDIA A30 MIG 4g.24gb", 1.0),
        ("NVIDIA A100-SXM4-40GB", None),  # no profile in the name
        ("NVIDIA A100-SXM4-40GB MIG", None),
        ("NVIDIA A100-SXM4-40GB MIG 0g.0gb", None),
    ],
)
def test_slice_ratio(name: str, share: float | None) -> None:
    assert mig(name).slice_ratio == (None if share is None else pytest.approx(share))


@settings(deadline=None, max_examples=300)
@given(name=st.text(max_size=80))
def test_any_name_gives_no_share_or_a_fraction_of_the_gpu(name: str) -> None:
    """NVML's names are the driver's text: whatever it says, a share is None or in (0, 1]
    (a price from a share never exceeds the whole GPU's)."""
    share = mig(name).slice_ratio
    assert share is None or 0 < share <= 1


@settings(deadline=None, max_examples=200)
@given(
    gpu=st.text(st.characters(codec="ascii", categories=("L", "N", "Zs")), max_size=30).filter(
        lambda g: "A30" not in g and "MIG" not in g
    ),
    slices=st.integers(1, 7),
    memory=st.integers(1, 192),
    media=st.booleans(),
)
def test_a_profile_after_any_gpu_name_is_its_slices_over_seven(
    gpu: str, slices: int, memory: int, media: bool
) -> None:
    name = f"{gpu} MIG {slices}g.{memory}gb{'+me' if media else ''}"
    assert mig(name).slice_ratio == pytest.approx(slices / 7)
