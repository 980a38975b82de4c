"""Degenerate inputs give a status, never an exception, in every engine; the relative p-value
matches the relative CI shown (delta method), checked against scipy."""

from __future__ import annotations

import json
import math

import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hs
from statsmodels.stats.proportion import proportions_ztest

from analytics.stats import (
    MeanStatistic,
    ProportionStatistic,
    compare,
    compare_bayesian,
    compare_sequential,
)


def _check(result) -> None:
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize("relative", [True, False])
def test_bayesian_on_an_arm_with_no_successes_has_a_beta_posterior(relative):
    result = compare_bayesian(ProportionStatistic(3, 2), ProportionStatistic(3, 0), relative=relative)
    _check(result)
    assert result.status == "ok" and result.model == "beta_binomial"
    low, high = result.credible_interval
    assert low < result.posterior_mean < high and 0 < result.chance_to_win < 0.5


@pytest.mark.parametrize(("c", "t"), [((3, 2), (3, 0)), ((1000, 5), (1000, 0)), ((20, 10), (20, 0))])
def test_an_arm_with_no_successes_gets_a_relative_interval_valid_at_the_boundary(c, t):
    """Issue 32: the 0/n arm is not known exactly. Its Wald variance is 0, which gave a zero-width
    relative interval (then suppressed); MOVER-R on Wilson limits gives [-100 %, U) with U < 0
    only when the data say so."""
    result = compare(ProportionStatistic(*c), ProportionStatistic(*t))
    assert result.status == "ok" and result.relative_status == "ok"
    assert result.relative_interval_method == "mover_r" and result.relative_lift == -1.0
    low, high = result.relative_ci
    assert low == -1.0 and high > -1.0
    assert (result.relative_p_value < 0.05) == (high < 0)
    seq = compare_sequential(ProportionStatistic(*c), ProportionStatistic(*t))
    assert seq.relative_ci[1] > seq.relative_ci[0] and seq.relative_p_value is not None


def test_relative_p_value_is_the_delta_method_test_of_the_relative_ci():
    c, t = (
        MeanStatistic(500, 5000.0, 5000.0 * 10 + 500 * 4.0),
        MeanStatistic(480, 5040.0, 5040.0 * 10.5 + 480 * 4.2),
    )
    r = compare(c, t)
    z = r.relative_lift / r.relative_std_error
    assert r.relative_p_value == pytest.approx(2 * st.t.sf(abs(z), r.df), rel=1e-9)
    # significance agrees with the interval shown
    lo, hi = r.relative_ci
    assert (r.relative_p_value < r.alpha) == (lo > 0 or hi < 0)


def test_relative_and_absolute_p_can_differ_and_each_matches_its_own_interval():
    # proportions: the pooled z-test for the absolute difference; the relative p-value is the one
    # dual to the Newcombe / MOVER-R intervals shown
    c, t = ProportionStatistic(400, 40), ProportionStatistic(400, 58)
    r = compare(c, t)
    assert (r.relative_p_value < r.alpha) == (r.relative_ci[0] > 0 or r.relative_ci[1] < 0)
    assert r.p_value == pytest.approx(proportions_ztest([58, 40], [400, 400])[1], rel=1e-9)
    assert r.relative_p_value != pytest.approx(r.p_value, rel=1e-3)
    # the relative standard error stays the delta method's (Deng et al. 2018; Bernoulli p(1 - p))
    pc, pt = 0.1, 0.145
    var = pt * (1 - pt) / (400 * pc**2) + pt**2 * pc * (1 - pc) / (400 * pc**4)
    assert r.relative_std_error == pytest.approx(math.sqrt(var), rel=1e-9)
    for alpha in (0.01, 0.05, 0.1, 0.2):  # at every level: p < alpha iff the interval excludes 0
        a = compare(c, t, alpha=alpha)
        assert (a.relative_p_value < alpha) == (a.relative_ci[0] > 0)
        assert (a.relative_p_value < alpha) == (a.absolute_ci[0] > 0)


counts = hs.integers(0, 30)


@settings(max_examples=300, deadline=None)
@given(counts, counts, counts, counts, hs.booleans())
def test_every_engine_gives_a_status_on_any_small_proportion(nc, sc, nt, stt, relative):
    c, t = ProportionStatistic(nc, min(sc, nc)), ProportionStatistic(nt, min(stt, nt))
    for result in (compare(c, t), compare_sequential(c, t), compare_bayesian(c, t, relative=relative)):
        _check(result)
        if getattr(result, "relative_ci", None) is not None:
            assert result.relative_ci[1] > result.relative_ci[0]


@settings(max_examples=300, deadline=None)
@given(
    hs.integers(0, 6),
    hs.lists(hs.sampled_from([0.0, 1.0, -1.0, 1e-300, 1e6, 5.0]), min_size=0, max_size=6),
    hs.lists(hs.sampled_from([0.0, 1.0, -1.0, 1e-300, 1e6, 5.0]), min_size=0, max_size=6),
)
def test_every_engine_gives_a_status_on_degenerate_means(_, ys_c, ys_t):
    def stat(ys):
        return MeanStatistic(len(ys), math.fsum(ys), math.fsum(y * y for y in ys))

    c, t = stat(ys_c), stat(ys_t)
    for relative in (True, False):
        for result in (compare(c, t), compare_sequential(c, t), compare_bayesian(c, t, relative=relative)):
            _check(result)
