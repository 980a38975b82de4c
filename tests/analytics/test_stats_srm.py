"""SRM chi-square test: vs scipy.stats.chisquare, zero-weight rules, JSON safety."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hs

from analytics.stats import srm_test
from analytics.stats.srm import SRM_P_THRESHOLD


@pytest.mark.parametrize(
    ("counts", "weights"),
    [
        ([5000, 5100], [0.5, 0.5]),
        ([1000, 2100, 3050], [1, 2, 3]),
        ([480, 520, 1010, 0], [0.25, 0.25, 0.5, 0]),
    ],
)
def test_srm_matches_scipy_chisquare(counts, weights):
    res = srm_test(counts, weights)
    kept = [(c, w) for c, w in zip(counts, weights, strict=True) if w > 0]
    obs = np.array([c for c, _ in kept], float)
    w = np.array([w for _, w in kept], float)
    ref = st.chisquare(obs, obs.sum() * w / w.sum())
    assert res.status == "ok"
    assert res.chi2 == pytest.approx(ref.statistic, rel=1e-9)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.df == len(kept) - 1
    json.dumps(res.to_dict(), allow_nan=False)


def test_srm_flags_clear_mismatch_below_threshold():
    res = srm_test([10_000, 10_600], [1, 1])
    assert res.p_value < SRM_P_THRESHOLD
    assert res.flagged


def test_srm_balanced_not_flagged():
    assert not srm_test([10_000, 10_050], [1, 1]).flagged


def test_positive_weight_arm_with_zero_units_is_kept_and_flagged():
    res = srm_test([1000, 0], [0.5, 0.5])
    assert res.df == 1
    assert res.flagged
    assert res.chi2 == pytest.approx(1000.0)


def test_zero_weight_zero_count_arm_dropped():
    a = srm_test([500, 510, 0], [1, 1, 0])
    b = srm_test([500, 510], [1, 1])
    assert a.chi2 == pytest.approx(b.chi2) and a.df == b.df == 1
    assert a.expected_counts == (505.0, 505.0, 0.0)


def test_units_in_zero_weight_arm_flagged_with_explicit_status():
    res = srm_test([500, 510, 3], [1, 1, 0])
    assert res.flagged
    assert res.status == "units_in_zero_weight_arm"
    assert res.p_value == 0.0
    assert "weight 0" in res.reason
    json.dumps(res.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("counts", "weights", "status"),
    [([0, 0], [1, 1], "no_data"), ([10, 0], [1, 0], "single_arm"), ([7], [1], "single_arm")],
)
def test_degenerate_inputs_explicit_status_no_nan(counts, weights, status):
    res = srm_test(counts, weights)
    assert res.status == status
    assert not res.flagged
    assert res.p_value is None
    json.dumps(res.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("counts", "weights"),
    [
        ([1, 2], [1]),
        ([-1, 2], [1, 1]),
        ([1.5, 2], [1, 1]),
        ([1, 2], [0, 0]),
        ([1, 2], [1, float("nan")]),
        ([], []),
    ],
)
def test_invalid_inputs_raise_value_error(counts, weights):
    with pytest.raises(ValueError):
        srm_test(counts, weights)


def test_srm_false_positive_rate_under_null_is_about_threshold():
    rng = np.random.default_rng(0)
    counts = rng.multinomial(20_000, [0.2, 0.3, 0.5], size=20_000)
    flagged = sum(srm_test(list(c), [2, 3, 5]).flagged for c in counts)
    assert flagged / len(counts) < 0.003


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(0, 10**6), hs.floats(0, 10)), min_size=1, max_size=6))
def test_property_srm_never_nan_and_p_in_unit_interval(arms):
    counts = [c for c, _ in arms]
    weights = [w for _, w in arms]
    if sum(weights) <= 0:
        return
    res = srm_test(counts, weights)
    json.dumps(res.to_dict(), allow_nan=False)
    if res.p_value is not None:
        assert 0.0 <= res.p_value <= 1.0


@pytest.mark.parametrize(
    ("counts", "weights"),
    [
        ([5, 7], [2.2250738585072014e-308, 1.0]),  # the hypothesis find: fsum's intermediate overflow
        ([5, 7], [5e-324, 1.0]),  # a share that underflows to 0
        ([5, 7], [5e-324, 10.0]),
        ([5, 7, 1], [1e-300, 1e-300, 1.0]),
        ([5, 7], [1.7e308, 1.7e308]),  # the sum of the weights overflows
        ([0, 7], [2.2e-308, 1.0]),
    ],
)
def test_extreme_weights_give_a_result_never_an_overflow(counts, weights):
    res = srm_test(counts, weights)
    json.dumps(res.to_dict(), allow_nan=False)
    assert res.p_value is None or 0.0 <= res.p_value <= 1.0


def test_units_in_an_arm_with_a_vanishing_weight_are_a_certain_mismatch():
    res = srm_test([5, 7], [2.2250738585072014e-308, 1.0])
    assert res.flagged and res.p_value == 0.0
    res = srm_test([5, 7], [5e-324, 10.0])
    assert res.flagged and res.status == "units_in_zero_weight_arm"


def test_equal_huge_weights_behave_like_equal_weights():
    a, b = srm_test([480, 520], [1.7e308, 1.7e308]), srm_test([480, 520], [1, 1])
    assert a.p_value == pytest.approx(b.p_value, rel=1e-12)
    assert a.chi2 == pytest.approx(st.chisquare([480, 520]).statistic, rel=1e-12)
