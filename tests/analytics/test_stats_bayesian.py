"""Bayesian Gaussian approximation: closed forms vs numerical integration / MC."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats as st
from scipy import integrate

from analytics.stats import MeanStatistic, ProportionStatistic, compare, compare_bayesian


def _arms(seed=0):
    rng = np.random.default_rng(seed)
    return MeanStatistic.from_values(rng.normal(10, 2, 400)), MeanStatistic.from_values(
        rng.normal(10.2, 2, 400)
    )


def test_flat_prior_posterior_is_normal_at_estimate_and_ci_matches_z_interval():
    c, t = _arms()
    b = compare_bayesian(c, t)
    f = compare(c, t)
    assert b.posterior_mean == pytest.approx(f.absolute_lift)
    assert b.posterior_std == pytest.approx(f.std_error)
    assert b.chance_to_win == pytest.approx(st.norm.cdf(f.absolute_lift / f.std_error), rel=1e-12)
    lo, hi = st.norm.interval(0.95, f.absolute_lift, f.std_error)
    assert b.credible_interval == pytest.approx((lo, hi), rel=1e-12)


def test_expected_loss_matches_numerical_integration():
    c, t = _arms(1)
    b = compare_bayesian(c, t)
    mu, s = b.posterior_mean, b.posterior_std
    lt = integrate.quad(lambda d: max(-d, 0) * st.norm.pdf(d, mu, s), mu - 12 * s, mu + 12 * s, points=[0])[0]
    lc = integrate.quad(lambda d: max(d, 0) * st.norm.pdf(d, mu, s), mu - 12 * s, mu + 12 * s, points=[0])[0]
    assert b.expected_loss_treatment == pytest.approx(lt, rel=1e-6, abs=1e-12)
    assert b.expected_loss_control == pytest.approx(lc, rel=1e-6)


def test_chance_to_win_close_to_beta_binomial_monte_carlo():
    rng = np.random.default_rng(3)
    b = compare_bayesian(ProportionStatistic(5000, 500), ProportionStatistic(5000, 540))
    pc = rng.beta(501, 4501, 400_000)
    pt = rng.beta(541, 4461, 400_000)
    assert b.chance_to_win == pytest.approx(np.mean(pt > pc), abs=0.01)


def test_informative_prior_shrinks_towards_prior_mean():
    c, t = _arms(2)
    flat = compare_bayesian(c, t)
    tight = compare_bayesian(c, t, prior_mean=0.0, prior_variance=flat.posterior_std**2)
    assert tight.posterior_mean == pytest.approx(flat.posterior_mean / 2)
    assert tight.posterior_std < flat.posterior_std


def test_relative_effect_and_edge_cases_json_safe():
    c, t = _arms(4)
    r = compare_bayesian(c, t, relative=True)
    assert r.posterior_mean == pytest.approx(compare(c, t).relative_lift)
    z = compare_bayesian(ProportionStatistic(100, 0), ProportionStatistic(100, 3), relative=True)
    assert z.status == "control_mean_zero"
    e = compare_bayesian(MeanStatistic(1, 1, 1), MeanStatistic(1, 1, 1))
    assert e.status == "insufficient_data"
    for res in (r, z, e):
        json.dumps(res.to_dict(), allow_nan=False)
    with pytest.raises(ValueError):
        compare_bayesian(c, t, ci_level=1.0)
    with pytest.raises(ValueError):
        compare_bayesian(c, t, prior_variance=0.0)
