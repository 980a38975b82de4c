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
    cost_over_cap,
    period_srm,
    probability_best,
    rounded_weights,
    stratified_lift,
    thompson_weights,
    winner_weights,
)
from analytics.stats.statistics import RatioStatistic


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


def test_thompson_weights_lift_every_arm_to_the_floor():
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


def test_a_winner_gets_all_but_the_other_arms_floors():
    assert winner_weights(3, 2, min_weight=0.01) == pytest.approx((0.01, 0.01, 0.98))
    assert winner_weights(2, 0, min_weight=0.05) == pytest.approx((0.95, 0.05))
    assert winner_weights(4, 1, min_weight=0.0) == (0.0, 1.0, 0.0, 0.0)
    for bad in ({"arms": 1, "winner": 0, "min_weight": 0.01}, {"arms": 3, "winner": 3, "min_weight": 0.01}):
        with pytest.raises(ValueError):
            winner_weights(bad["arms"], bad["winner"], min_weight=bad["min_weight"])
    with pytest.raises(ValueError):
        winner_weights(3, 0, min_weight=0.4)


def _ratio(cost: np.ndarray, calls: np.ndarray) -> RatioStatistic:
    n = len(cost)
    return RatioStatistic(
        n=n,
        m=MeanStatistic(n, float(cost.sum()), float((cost**2).sum())),
        d=MeanStatistic(n, float(calls.sum()), float((calls**2).sum())),
        sum_of_products=float((cost * calls).sum()),
    )


def test_cost_over_cap_is_the_normal_posterior_tail_of_the_delta_method_ratio():
    rng = np.random.default_rng(3)
    calls = rng.integers(1, 6, 300).astype(float)
    cost = calls * rng.gamma(4.0, 0.0005, 300)  # ≈ 0.002 USD per call
    ratio = cost.sum() / calls.sum()
    # delta method on raw per-unit values (Deng et al. 2018, eq. for Var(X̄/Ȳ))
    mx, my = cost.mean(), calls.mean()
    cov = np.cov(cost, calls, ddof=1)
    var = (cov[0, 0] / my**2 - 2 * mx * cov[0, 1] / my**3 + mx**2 * cov[1, 1] / my**4) / len(cost)
    se = math.sqrt(var)
    for cap in (ratio - 2 * se, ratio - 1.5 * se, ratio, ratio + se):
        check = cost_over_cap(_ratio(cost, calls), cap)
        assert check.cost_per_call == pytest.approx(ratio)
        assert check.std_error == pytest.approx(se, rel=1e-9)
        assert check.probability_over == pytest.approx(sps.norm.sf((cap - ratio) / se), rel=1e-9)
        # over exactly when the one-sided 95 % lower bound lies above the cap
        assert check.over_cap == (ratio - sps.norm.ppf(0.95) * se > cap)
    assert cost_over_cap(_ratio(cost, calls), ratio - 2 * se).over_cap
    assert not cost_over_cap(_ratio(cost, calls), ratio - 1.5 * se).over_cap


def test_cost_over_cap_needs_evidence_and_a_positive_cap():
    none = cost_over_cap(_ratio(np.zeros(0), np.zeros(0)), 0.01)
    assert none.cost_per_call is None and not none.over_cap
    one = cost_over_cap(_ratio(np.array([5.0]), np.array([1.0])), 0.01)
    assert one.cost_per_call == 5.0 and one.probability_over is None and not one.over_cap
    flat = cost_over_cap(_ratio(np.full(10, 0.02), np.ones(10)), 0.01)  # no spread: certain
    assert flat.std_error == pytest.approx(0, abs=1e-9) and flat.probability_over == 1.0 and flat.over_cap
    for cap in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            cost_over_cap(_ratio(np.ones(3), np.ones(3)), cap)


def test_an_arm_over_the_cost_cap_keeps_the_floor_and_cannot_win():
    arms = [ProportionStatistic(1000, 300), ProportionStatistic(1000, 320), ProportionStatistic(1000, 400)]
    free = bandit_decide(arms, exploring=False, min_weight=0.02, stop_when_probability_best=0.95, seed=1)
    assert free.winner == 2 and free.over_cap == (False, False, False)
    capped = bandit_decide(
        arms,
        exploring=False,
        min_weight=0.02,
        stop_when_probability_best=0.95,
        seed=1,
        over_cap=[False, False, True],
    )
    assert capped.weights[2] == pytest.approx(0.02) and capped.probability_best[2] == 0.0
    # P(best) among the two arms within the cap: b beats control with the Beta integral's probability
    p_b = _p_b_beats_a(arms[0], arms[1])
    assert capped.probability_best[1] == pytest.approx(p_b, abs=0.01)
    assert capped.weights[1] == pytest.approx(0.02 + 0.94 * capped.probability_best[1])
    assert capped.winner is None  # p_b ≈ 0.83 < 0.95
    alone = bandit_decide(
        arms, exploring=False, min_weight=0.02, stop_when_probability_best=0.95, seed=1, over_cap=[1, 0, 1]
    )
    # the only arm within the cap gets a winner's weight but no final declaration
    assert alone.probability_best == (0.0, 1.0, 0.0) and alone.winner is None
    assert alone.weights == pytest.approx((0.02, 0.96, 0.02))
    everyone = bandit_decide(
        arms, exploring=False, min_weight=0.02, stop_when_probability_best=0.95, seed=1, over_cap=[1, 1, 1]
    )
    assert everyone.winner is None and everyone.weights == pytest.approx(free.weights)
    exploring = bandit_decide(
        arms, exploring=True, min_weight=0.02, stop_when_probability_best=0.95, seed=1, over_cap=[0, 0, 1]
    )
    assert exploring.weights == pytest.approx((1 / 3,) * 3) and exploring.winner is None
    with pytest.raises(ValueError):
        bandit_decide(
            arms, exploring=False, min_weight=0.02, stop_when_probability_best=0.95, seed=1, over_cap=[1]
        )


def test_weights_moved_only_beyond_the_tolerance():
    from analytics.stats.bandit import WEIGHT_CHANGE_TOLERANCE, weights_moved

    assert WEIGHT_CHANGE_TOLERANCE == 0.02
    assert not weights_moved((0.400, 0.265, 0.335), (0.399, 0.266, 0.335))  # Monte Carlo noise
    assert not weights_moved((0.40, 0.60), (0.42, 0.58))  # exactly the tolerance (1e-4 grid): kept
    assert weights_moved((0.40, 0.60), (0.4201, 0.5799))
    assert weights_moved((0.5, 0.5), (0.3, 0.3, 0.4))  # arms differ
    assert weights_moved((0.5, 0.5), (0.5001, 0.4999), tolerance=0.0)
    with pytest.raises(ValueError):
        weights_moved((0.5, 0.5), (0.5, 0.5), tolerance=-0.1)


def test_the_tolerance_is_about_three_monte_carlo_deviations_of_the_weights_on_the_same_data():
    """Same data, a new seed per slot (as the schedule's updates): two arms at P(best) ≈ 0.5 (the
    noisiest case). A weight's standard deviation is 0.9·0.5/sqrt(10,000) = 0.0045; consecutive
    updates pass 2 points about once in 200, and would pass 0.5 point in about 4 of 10."""
    from analytics.stats.bandit import weights_moved

    arms = [ProportionStatistic(n=400, sum=120), ProportionStatistic(n=400, sum=121)]
    weights = [thompson_weights(probability_best(arms, seed=seed), min_weight=0.05) for seed in range(201)]
    assert float(np.std([w[0] for w in weights])) == pytest.approx(0.0045, abs=0.001)
    pairs = list(zip(weights, weights[1:], strict=False))
    assert sum(weights_moved(a, b) for a, b in pairs) <= 2
    assert sum(weights_moved(a, b, tolerance=0.005) for a, b in pairs) >= 60


def test_a_mean_arm_of_constant_values_neither_freezes_nor_wins_by_a_tie():
    """An arm whose units all have the same value (all successes, or the same cost) has s² = 0: it
    borrows the other arms' spread instead of a fixed N(ȳ, 100²) that kept its P(best) near chance."""
    ones, half, zeros = (MeanStatistic.from_values(v) for v in ([1.0] * 200, [0.0, 1.0] * 100, [0.0] * 200))
    d = bandit_decide(
        [zeros, half, ones], exploring=False, min_weight=0.05, stop_when_probability_best=0.95, seed=1
    )
    assert d.probability_best == pytest.approx((0.0, 0.0, 1.0)) and d.winner == 2
    # every arm constant: the spread of the arms' means, narrowing with units
    costs = [MeanStatistic.from_values([c] * n) for c, n in ((0.02, 200), (0.03, 200), (0.01, 200))]
    d = bandit_decide(
        costs,
        exploring=False,
        min_weight=0.05,
        stop_when_probability_best=0.95,
        seed=1,
        higher_is_better=False,
    )
    assert d.winner == 2 and d.probability_best[2] > 0.99
    few = [MeanStatistic.from_values([c] * 2) for c in (0.02, 0.03, 0.01)]
    p_few = probability_best(few, seed=1, higher_is_better=False)
    assert 0.5 < p_few[2] < 0.95  # two units each: leaning, not yet certain
    # every arm the same constant: the ties are shared, no arm is favoured by its position
    same = [MeanStatistic.from_values([1.0] * 50) for _ in range(3)]
    d = bandit_decide(same, exploring=False, min_weight=0.05, stop_when_probability_best=0.95, seed=1)
    assert d.probability_best == pytest.approx((1 / 3,) * 3) and d.winner is None
    assert sum(d.weights) == pytest.approx(1.0)


def test_proportion_arms_of_all_successes_or_all_failures_update():
    arms = [
        ProportionStatistic(n=100, sum=100),
        ProportionStatistic(n=100, sum=0),
        ProportionStatistic(n=100, sum=30),
    ]
    d = bandit_decide(arms, exploring=False, min_weight=0.05, stop_when_probability_best=0.95, seed=3)
    assert d.winner == 0 and d.weights == pytest.approx((0.9, 0.05, 0.05))
    lift = stratified_lift([arms[1]], [arms[0]], [200])
    assert lift.absolute_lift == 1.0 and lift.std_error == 0.0 and lift.p_value == 0.0
