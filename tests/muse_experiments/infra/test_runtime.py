"""Process tuning: garbage-collection thresholds and start-up objects frozen."""

from __future__ import annotations

import gc

import pytest

from muse_experiments.infra.runtime import tune_gc


@pytest.fixture
def restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_tune_gc_freezes_what_is_alive_and_applies_the_thresholds(settings, restore_gc):
    settings.GC_THRESHOLD = [50_000, 50, 100]
    survivor = [object() for _ in range(1000)]
    tune_gc()
    assert gc.get_threshold() == (50_000, 50, 100)
    assert gc.get_freeze_count() >= len(survivor)


def test_an_empty_setting_leaves_the_interpreter_alone(settings, restore_gc):
    settings.GC_THRESHOLD = []
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_bad_setting_is_logged_not_raised(settings, restore_gc, caplog):
    settings.GC_THRESHOLD = [-1, "x"]
    tune_gc()
    assert "GC_THRESHOLD" in caplog.text
