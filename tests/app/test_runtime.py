"""exporter/app/runtime.py: the serving process's collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from exporter.app.runtime import GC_GEN0_THRESHOLD, tune_for_serving


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restore_gc")
def test_first_generation_threshold_is_raised_and_startup_objects_frozen() -> None:
    gc.set_threshold(700, 10, 10)
    tune_for_serving()
    assert gc.get_threshold() == (GC_GEN0_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("restore_gc")
def test_a_higher_threshold_is_kept() -> None:
    gc.set_threshold(50_000, 10, 10)
    tune_for_serving()
    assert gc.get_threshold()[0] == 50_000
