"""Bandit statistics (analytics/stats/bandit.py) against closed forms and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from analytics.stats import MeanStatistic, ProportionStatistic
from analytics.stats.bandit import (
    bandit_decide,
    period_srm,
    probability_best,
    rounded_weights,
    stratified_lift,
    thompson_weights,
)


def _p_b_beats_a(a: ProportionStatistic, b: ProportionStatistic) -> float:
    """P(θ_b > θ_a) for Beta(1+s, 1+n−s) posteriors, by numerical integration."""
    pa = sps.beta(1 + a.sum, 1 + a.n - a.sum)
    pb = sps.beta(1 + b.sum, 1 + b.n - b.sum)
    value, _ = integrate.quad(lambda x: pb.pdf(x) * pa.cdf(x), 0, 1, limit=200)
    return value


def test_probability_best_of_two_proportions_matches_the_beta_integral():
    a, b = ProportionStatistic(200, 60), ProportionStatistic(210, 75)
    p = probability_best([a, b], seed=7, draws=200_000)
    assert p[1] == pytest.approx(_p_b_beats_a(a, b), abs=0.003)
    assert sum(p) == pytest.approx(1.0)


def test_probability_best_of_two_means_matches_the_normal_closed_form():
    rng = np.random.default_rng(1)
    a = MeanStatistic.from_values(rng.normal(10.0, 3.0, 400))
    b = MeanStatistic.from_values(rng.normal(10.4, 3.0, 300))
    expected = sps.norm.cdf((b.mean - a.mean) / math.hypot(a.std_error, b.std_error))
    p = probability_best([a, b], seed=3, draws=200_000)
    assert p[1] == pytest.approx(expected, abs=0.003)
    # lower is better: the other arm's probability
    low = probability_best([a, b], seed=3, draws=200_000, higher_is_better=False)
    assert low[0] == pytest.approx(expected, abs=0.003)


def test_probability_best_is_deterministic_for_a_seed():
    arms = [ProportionStatistic(100, 30), ProportionStatistic(100, 32), ProportionStatistic(100, 35)]
    assert probability_best(arms, seed=11) == probability_best(arms, seed=11)
    assert probability_best(arms, seed=11) != probability_best(arms, seed=12)


def test_probability_best_refuses_mixed_or_single_arms():
    with pytest.raises(ValueError):
        probability_best([ProportionStatistic(10, 1)], seed=1)
    with pytest.raises(ValueError):
        probability_best([ProportionStatistic(10, 1), MeanStatistic(10, 1.0, 1.0)], seed=1)


def test_thompson_weights_apply_growthbooks_additive_floor():
    w = thompson_weights([0.0, 0.1, 0.9], min_weight=0.05)
    # f + (1 − k f) p: 0.05, 0.05 + 0.85·0.1, 0.05 + 0.85·0.9
    assert w == pytest.approx((0.05, 0.135, 0.815))
    assert sum(w) == pytest.approx(1.0)
    assert thompson_weights([0.2, 0.8], min_weight=0.0) == pytest.approx((0.2, 0.8))
    with pytest.raises(ValueError):
        thompson_weights([0.5, 0.5, 0.0], min_weight=0.4)  # 3 × 0.4 > 1


def test_rounded_weights_sit_on_the_hash_grid_and_sum_to_one():
    w = rounded_weights([1 / 3, 1 / 3, 1 / 3])
    assert w == (0.3334, 0.3333, 0.3333)
    w = rounded_weights([0.05, 0.135, 0.815])
    assert math.fsum(w) == pytest.approx(1.0, abs=1e-12)
    assert all(abs(x * 10_000 - round(x * 10_000)) < 1e-6 for x in w)


def test_stratified_lift_of_one_period_is_the_difference_in_means_with_its_standard_error():
    c, t = ProportionStatistic(500, 150), ProportionStatistic(400, 140)
    lift = stratified_lift([c], [t], [900])
    assert lift.absolute_lift == pytest.approx(0.35 - 0.30)
    # unbiased variances s² = n p (1−p)/(n−1)
    se = math.sqrt(0.3 * 0.7 / 499 + 0.35 * 0.65 / 399)
    assert lift.std_error == pytest.approx(se)
    z = sps.norm.ppf(0.975)
    assert lift.absolute_ci == pytest.approx((0.05 - z * se, 0.05 + z * se))
    assert lift.p_value == pytest.approx(2 * sps.norm.sf(0.05 / se))
    assert lift.relative_lift == pytest.approx(0.05 / 0.30)


def test_stratified_lift_is_unbiased_where_pooling_suffers_simpsons_paradox():
    """Period 1: rates 0.10 vs 0.12, weights 50/50; period 2 (rates drift up to 0.40 vs 0.42)
    sends 90 % to the treatment. True lift 0.02 in both periods; pooling says 0.17."""
    control = [ProportionStatistic(5000, 500), ProportionStatistic(1000, 400)]
    treatment = [ProportionStatistic(5000, 600), ProportionStatistic(9000, 3780)]
    pooled = (600 + 3780) / 14000 - (500 + 400) / 6000
    assert pooled == pytest.approx(0.1629, abs=1e-4)
    lift = stratified_lift(control, treatment, [10_000, 10_000])
    assert lift.absolute_lift == pytest.approx(0.02)
    assert lift.periods_used == 2


def test_stratified_lift_spreads_the_weight_of_periods_without_both_arms():
    control = [ProportionStatistic(10, 3), ProportionStatistic(0, 0)]
    treatment = [ProportionStatistic(10, 5), ProportionStatistic(50, 20)]
    lift = stratified_lift(control, treatment, [20, 50])
    assert lift.periods_used == 1 and lift.absolute_lift == pytest.approx(0.2)
    assert stratified_lift([ProportionStatistic(0, 0)], [ProportionStatistic(5, 1)], [5]) is None


def test_period_srm_compares_each_period_with_its_own_weights():
    counts = [[500, 500, 500], [150, 300, 1050], [500, 500, 500]]
    weights = [[1 / 3] * 3, [0.1, 0.2, 0.7], [0.1, 0.2, 0.7]]
    results = period_srm(counts, weights)
    assert [r.flagged for r in results] == [False, False, True]
    expected = sps.chisquare([150, 300, 1050], [150, 300, 1050]).pvalue
    assert results[1].p_value == pytest.approx(expected)


def test_bandit_decide_keeps_equal_weights_while_exploring_and_declares_a_clear_winner():
    arms = [ProportionStatistic(2000, 600), ProportionStatistic(2000, 640), ProportionStatistic(2000, 800)]
    exploring = bandit_decide(arms, exploring=True, min_weight=0.01, stop_when_probability_best=0.95, seed=1)
    assert exploring.weights == pytest.approx((1 / 3,) * 3) and exploring.winner is None
    assert exploring.probability_best[2] > 0.999
    decided = bandit_decide(arms, exploring=False, min_weight=0.01, stop_when_probability_best=0.95, seed=1)
    assert decided.winner == 2
    assert decided.weights[0] == pytest.approx(0.01, abs=1e-3) and decided.weights[2] > 0.97
    close = [ProportionStatistic(100, 30), ProportionStatistic(100, 31), ProportionStatistic(100, 32)]
    undecided = bandit_decide(
        close, exploring=False, min_weight=0.05, stop_when_probability_best=0.95, seed=1
    )
    assert undecided.winner is None and min(undecided.weights) >= 0.05
