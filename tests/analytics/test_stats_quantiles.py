"""Quantile metrics: estimates against numpy, standard errors against scipy's bootstrap and the
closed form, and the relative-lift interval's coverage by a seeded simulation (the full one is
``bench/bench_quantile_coverage.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from analytics.stats import QuantileStatistic, compare, compare_sequential, quantile_statistic
from analytics.stats.results import Status


def _clustered_arm(rng, units, mu):
    calls = 1 + rng.poisson(4.0, units)
    ids = np.repeat(np.arange(units), calls)
    effect = np.repeat(rng.normal(0.0, 0.5, units), calls)
    return np.exp(mu + effect + rng.normal(0.0, 0.6, calls.sum())), ids


def test_the_estimate_is_numpys_quantile_and_counts_units_and_calls():
    rng = np.random.default_rng(3)
    values, ids = _clustered_arm(rng, 300, 5.0)
    stat = quantile_statistic(values, ids, q=0.95)
    assert stat.estimate == pytest.approx(np.quantile(values, 0.95), rel=1e-12)
    assert (stat.n, stat.n_obs) == (300, values.size)


def test_one_value_per_unit_gives_the_classical_woodruff_interval():
    rng = np.random.default_rng(5)
    x = rng.lognormal(5.0, 0.7, 2000)
    q, z = 0.9, sps.norm.ppf(0.975)
    share = np.mean(x <= np.quantile(x, q))  # 0.9 here; the sample variance has ddof=1
    sigma = math.sqrt(share * (1 - share) / (x.size - 1))
    low, high = np.quantile(x, [q - z * sigma, q + z * sigma])
    stat = quantile_statistic(x, q=q)
    assert stat.std_error == pytest.approx((high - low) / (2 * z), rel=1e-9)


def test_the_per_unit_standard_error_agrees_with_scipys_bootstrap():
    rng = np.random.default_rng(11)
    x = rng.lognormal(5.0, 0.7, 1500)
    stat = quantile_statistic(x, q=0.95)
    boot = sps.bootstrap(
        (x,), lambda s, axis: np.quantile(s, 0.95, axis=axis), n_resamples=3000, random_state=rng
    )
    assert stat.std_error == pytest.approx(boot.standard_error, rel=0.15)


def test_the_clustered_standard_error_agrees_with_a_cluster_bootstrap():
    """Resampling units (scipy.stats.bootstrap over unit indices) is the reference the delta
    method approximates; treating calls as independent is visibly too small."""
    rng = np.random.default_rng(17)
    values, ids = _clustered_arm(rng, 600, 5.0)
    per_unit = [values[ids == i] for i in range(600)]

    def p95_of_units(index):
        return np.quantile(np.concatenate([per_unit[int(i)] for i in index]), 0.95)

    boot = sps.bootstrap((np.arange(600),), p95_of_units, vectorized=False, n_resamples=600, random_state=rng)
    clustered = quantile_statistic(values, ids, q=0.95).std_error
    naive = quantile_statistic(values, q=0.95).std_error
    assert clustered == pytest.approx(boot.standard_error, rel=0.2)
    assert naive < 0.85 * clustered


def test_compare_gives_the_quantile_lift_with_a_delta_method_relative_interval():
    c = QuantileStatistic(n=1000, n_obs=5000, q=0.95, estimate=500.0, std_error=15.0)
    t = QuantileStatistic(n=1000, n_obs=5000, q=0.95, estimate=550.0, std_error=18.0)
    r = compare(c, t)
    assert r.method == "quantile_woodruff_z" and r.status == Status.OK
    assert r.absolute_lift == pytest.approx(50.0)
    se = math.hypot(15.0, 18.0)
    assert r.std_error == pytest.approx(se)
    assert r.p_value == pytest.approx(2 * sps.norm.sf(50.0 / se))
    rel_se = math.sqrt(18.0**2 / 500.0**2 + 550.0**2 * 15.0**2 / 500.0**4)
    assert r.relative_lift == pytest.approx(0.1)
    assert r.relative_ci == pytest.approx((0.1 - 1.959964 * rel_se, 0.1 + 1.959964 * rel_se), rel=1e-5)
    assert r.extra["q"] == 0.95
    seq = compare_sequential(c, t)
    assert seq.relative_ci[0] < r.relative_ci[0] and seq.relative_ci[1] > r.relative_ci[1]


def test_degenerate_arms_get_a_status_not_a_number():
    one = quantile_statistic([120.0], q=0.5)
    two = quantile_statistic([100.0, 140.0, 90.0], q=0.5)
    assert compare(one, two).status == Status.INSUFFICIENT_DATA
    flat = quantile_statistic([100.0] * 20, np.arange(20), q=0.95)
    assert flat.std_error == 0.0
    assert compare(flat, flat).status == Status.CONSTANT_IDENTICAL
    empty = quantile_statistic([], q=0.95)
    assert (empty.n, empty.n_obs) == (0, 0)


def test_bad_input_raises():
    with pytest.raises(ValueError):
        quantile_statistic([1.0, 2.0], q=1.0)
    with pytest.raises(ValueError):
        quantile_statistic([1.0, float("nan")], q=0.5)
    with pytest.raises(ValueError):
        quantile_statistic([1.0, 2.0], [1], q=0.5)
    a = QuantileStatistic(n=5, n_obs=5, q=0.5, estimate=1.0, std_error=0.1)
    b = QuantileStatistic(n=5, n_obs=5, q=0.9, estimate=1.0, std_error=0.1)
    with pytest.raises(ValueError):
        compare(a, b)


def test_the_relative_interval_covers_the_true_lift_about_95_percent_of_the_time():
    """Seeded: 200 runs of 400 clustered units per arm, true p95 lift exactly +10 % (lognormal
    calls with a unit effect; see bench/bench_quantile_coverage.py for 1,000 runs)."""
    rng = np.random.default_rng(2026)
    hits = 0
    runs = 200
    for _ in range(runs):
        c = quantile_statistic(*_clustered_arm(rng, 400, 5.0), q=0.95)
        t = quantile_statistic(*_clustered_arm(rng, 400, 5.0 + math.log(1.1)), q=0.95)
        low, high = compare(c, t).relative_ci
        hits += low <= 0.1 <= high
    assert 0.92 <= hits / runs <= 0.98
