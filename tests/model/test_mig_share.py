"""A MIG device's share of its GPU, from the profile in its NVML name (docs/showback.md)."""

from __future__ import annotations

import pytest

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
