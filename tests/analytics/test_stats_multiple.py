"""Holm / BH / Bonferroni vs statsmodels.stats.multitest.multipletests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from statsmodels.stats.multitest import multipletests

from analytics.stats import adjust_p_values, benjamini_hochberg, bonferroni, holm

SM = {"holm": "holm", "bh": "fdr_bh", "bonferroni": "bonferroni"}


@pytest.mark.parametrize("method", ["holm", "bh", "bonferroni"])
def test_matches_statsmodels_on_random_pvalues(method):
    rng = np.random.default_rng(0)
    for _ in range(8 if method == "holm" else 50):  # statsmodels' holm is slow (~90 ms/call)
        p = rng.uniform(0, 1, rng.integers(1, 40)) ** rng.uniform(1, 5)
        ours = adjust_p_values(list(p), method)
        ref = multipletests(p, method=SM[method])[1]
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-15)


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.floats(0, 1), min_size=1, max_size=25))
def test_property_matches_statsmodels_with_ties(p):
    for method in ("bh", "bonferroni"):
        np.testing.assert_allclose(
            adjust_p_values(p, method), multipletests(p, method=SM[method])[1], rtol=1e-12, atol=1e-15
        )
    # Holm vs a direct O(m^2) transcription of Holm (1979): adj_(i) = max_{j<=i} min(1, (m-j+1) p_(j))
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    ref = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        ref[i] = running
    np.testing.assert_allclose(holm(p), ref, rtol=1e-12, atol=1e-15)


def test_holm_with_ties_matches_statsmodels():
    p = [0.01, 0.01, 0.02, 0.5, 0.02, 0.0, 1.0]
    np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], rtol=1e-12)


def test_known_values_and_wrappers():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert bonferroni(p) == pytest.approx([0.04, 0.16, 0.12, 0.02])


def test_none_and_nan_are_skipped_and_excluded_from_family():
    out = holm([0.01, None, float("nan"), 0.04])
    assert out[1] is None and out[2] is None
    assert out[0] == pytest.approx(0.02) and out[3] == pytest.approx(0.04)
    assert holm([]) == []


def test_invalid_input_raises():
    with pytest.raises(ValueError):
        adjust_p_values([0.1, 1.5])
    with pytest.raises(ValueError):
        adjust_p_values([0.1], "sidak-ish")
