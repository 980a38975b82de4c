"""Layers are independent whatever their keys: the default (unbiased) layer hash puts about
slice₁ × slice₂ of the units in two layers' slices for keys that differ in one character, checked
with a chi-square test of independence; the GrowthBook-compatible hash stays available and
existing layers keep it (migration), so no unit moves."""

from __future__ import annotations

import importlib
import string

import pytest
from scipy import stats

from muse_experiments.experiments.assignment.engine import bucket
from muse_experiments.experiments.assignment.specs import LayerSpec
from muse_experiments.experiments.models import Layer, LayerHash
from tests.muse_experiments.experiments.assignment.test_engine import experiment

UNITS = [f"user-{i}" for i in range(20_000)]


def _in_slice(key: str, version: int, start: float = 0.0, end: float = 0.1) -> set[str]:
    spec = experiment(1, layer=LayerSpec(key=key, start=start, end=end, hash_version=version))
    return {u for u in UNITS if bucket(spec, u) != -1}


def test_the_growthbook_hash_correlates_layer_a_and_layer_b():
    """The reported fault, kept as a documented property of the legacy hash: no unit in both."""
    both = _in_slice("layer-a", 1) & _in_slice("layer-b", 1)
    assert len(both) < 50  # ≈ 200 expected if independent


PAIRS = [
    (f"layer-{a}", f"layer-{b}")
    for a, b in zip(string.ascii_lowercase, string.ascii_lowercase[1:], strict=False)
]
PAIRS += [(f"{c}-checkout", f"{d}-checkout") for c, d in zip("abcdefgh", "bcdefghi", strict=True)]
PAIRS += [("l1", "l2"), ("ns", "nt"), ("layer-10", "layer-11"), ("exp_a", "exp_b")]


def test_the_default_hash_keeps_one_character_different_layers_independent():
    """2×2 chi-square test of independence per pair (20,000 units, slices of 10 %); with 38 pairs
    the p-values are uniform under independence, so a Kolmogorov–Smirnov test of them against
    U(0, 1) and a Bonferroni bound on the smallest must both pass."""
    p_values = []
    for a, b in PAIRS:
        in_a, in_b = _in_slice(a, 2), _in_slice(b, 2)
        both = len(in_a & in_b)
        table = [[both, len(in_a) - both], [len(in_b) - both, len(UNITS) - len(in_a | in_b)]]
        p_values.append(stats.chi2_contingency(table, correction=False).pvalue)
        assert 120 < both < 290, (a, b, both)  # ≈ 200 expected
    assert min(p_values) > 0.001 / len(PAIRS)
    assert stats.kstest(p_values, "uniform").pvalue > 0.001


def test_new_layers_default_to_the_unbiased_hash(db):
    assert Layer.objects.create(key="fresh").hash_version == LayerHash.UNBIASED


def test_the_migration_keeps_existing_layers_on_the_growthbook_hash(db):
    migration = importlib.import_module("muse_experiments.experiments.migrations.0005_version_layer_hash")
    Layer.objects.create(key="old-a")
    Layer.objects.create(key="old-b", hash_version=LayerHash.UNBIASED)
    from django.apps import apps

    migration.existing_layers_keep_the_growthbook_hash(apps, None)
    assert set(Layer.objects.values_list("hash_version", flat=True)) == {LayerHash.GROWTHBOOK}


def test_the_layer_hash_cannot_change_once_an_experiment_uses_it(catalogue):
    from django.core.exceptions import ValidationError

    from muse_experiments.experiments.services.layers import layer_save
    from tests.factories import make_experiment

    layer = Layer.objects.create(key="busy")
    make_experiment(key="in-busy", layer=layer, layer_start=0.0, layer_end=0.5, start=False)
    layer.hash_version = LayerHash.GROWTHBOOK
    with pytest.raises(ValidationError, match="hash cannot change"):
        layer_save(layer=layer, actor="pm")
