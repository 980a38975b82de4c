"""CUPED: theta and adjusted effect vs statsmodels OLS on raw data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats as st
import statsmodels.api as sm

from analytics.stats import (
    CovariateStatistic,
    MeanStatistic,
    Status,
    compare,
    compare_bayesian,
    compare_cuped,
    compare_sequential,
    cuped_theta,
)


def _data(seed, n_c=800, n_t=900, effect=0.5, rho=0.8):
    rng = np.random.default_rng(seed)
    xc = rng.normal(10, 3, n_c)
    xt = rng.normal(10, 3, n_t)
    yc = 5 + rho * xc + rng.normal(0, 2, n_c)
    yt = 5 + effect + rho * xt + rng.normal(0, 2, n_t)
    return yc, xc, yt, xt


def test_theta_and_adjusted_lift_equal_ols_ancova_coefficients():
    yc, xc, yt, xt = _data(1)
    c, t = CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt)
    res = compare(c, t)
    y = np.concatenate([yc, yt])
    design = sm.add_constant(np.column_stack([np.r_[np.zeros(len(yc)), np.ones(len(yt))], np.r_[xc, xt]]))
    ols = sm.OLS(y, design).fit()
    assert cuped_theta(c, t) == pytest.approx(ols.params[2], rel=1e-9)
    assert res.theta == pytest.approx(ols.params[2], rel=1e-9)
    assert res.absolute_lift == pytest.approx(ols.params[1], rel=1e-9)
    # SE of the adjusted estimate is close to the OLS (HC2-robust) SE.
    robust = sm.OLS(y, design).fit(cov_type="HC2")
    assert res.std_error == pytest.approx(robust.bse[1], rel=0.02)
    assert res.method == "cuped_welch_t"


def test_variance_reduction_matches_residual_variance_reduction_from_ols():
    yc, xc, yt, xt = _data(2)
    res = compare(CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt))
    # For equal-ish arms, VR ~= 1 - resid var / raw var (= within-arm R^2, Deng et al. 2013 eq. 4)
    rc = yc - res.theta * xc
    rt = yt - res.theta * xt
    adj = rc.var(ddof=1) / len(rc) + rt.var(ddof=1) / len(rt)
    raw = yc.var(ddof=1) / len(yc) + yt.var(ddof=1) / len(yt)
    assert res.variance_reduction == pytest.approx(1 - adj / raw, rel=1e-9)
    assert 0.5 < res.variance_reduction < 0.8  # rho^2 var(x)/var(y) = 0.576/0.746 ~ 0.77
    unadj = compare(MeanStatistic.from_values(yc), MeanStatistic.from_values(yt))
    assert res.std_error < unadj.std_error
    assert res.extra["unadjusted_std_error"] == pytest.approx(unadj.std_error, rel=1e-9)


def test_cuped_is_shift_invariant():
    yc, xc, yt, xt = _data(3)
    r1 = compare(CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt))
    r2 = compare(
        CovariateStatistic.from_values(yc + 7, xc - 100), CovariateStatistic.from_values(yt + 7, xt - 100)
    )
    assert r2.theta == pytest.approx(r1.theta, rel=1e-7)
    assert r2.absolute_lift == pytest.approx(r1.absolute_lift, rel=1e-7)
    assert r2.std_error == pytest.approx(r1.std_error, rel=1e-7)
    assert r2.p_value == pytest.approx(r1.p_value, rel=1e-6)


def test_uncorrelated_covariate_gives_near_zero_reduction_and_same_answer():
    rng = np.random.default_rng(4)
    yc, yt = rng.normal(0, 1, 500), rng.normal(0.1, 1, 500)
    xc, xt = rng.normal(0, 1, 500), rng.normal(0, 1, 500)
    res = compare_cuped(CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt))
    assert abs(res.variance_reduction) < 0.02


def test_constant_covariate_theta_zero_equals_welch():
    rng = np.random.default_rng(5)
    yc, yt = rng.normal(0, 1, 50) + 3, rng.normal(0.5, 1, 60) + 3
    res = compare(
        CovariateStatistic.from_values(yc, np.zeros(50)), CovariateStatistic.from_values(yt, np.zeros(60))
    )
    welch = compare(MeanStatistic.from_values(yc), MeanStatistic.from_values(yt))
    assert res.theta == 0.0
    assert res.variance_reduction == pytest.approx(0.0, abs=1e-12)
    assert res.p_value == pytest.approx(welch.p_value, rel=1e-9)


def test_cuped_coverage_under_null_simulation():
    rejections = 0
    reps = 500
    for seed in range(reps):
        yc, xc, yt, xt = _data(1000 + seed, n_c=200, n_t=200, effect=0.0)
        r = compare(CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt))
        rejections += r.p_value < 0.05
    assert abs(rejections / reps - 0.05) < 0.03


@pytest.mark.parametrize(
    ("c", "t", "status"),
    [
        (
            CovariateStatistic(1, 1, 1, 1, 1, 1),
            CovariateStatistic.from_values([1, 2, 3], [1, 1, 2]),
            Status.INSUFFICIENT_DATA,
        ),
        (
            CovariateStatistic(0, 0, 0, 0, 0, 0),
            CovariateStatistic(0, 0, 0, 0, 0, 0),
            Status.INSUFFICIENT_DATA,
        ),
        (
            CovariateStatistic.from_values([2, 2, 2], [1, 2, 3]),
            CovariateStatistic.from_values([2, 2], [5, 1]),
            Status.CONSTANT_IDENTICAL,
        ),
        (
            CovariateStatistic.from_values([1, 2, 3], [1, 2, 3]),
            CovariateStatistic.from_values([2, 3, 4], [1, 2, 3]),
            Status.ZERO_VARIANCE,
        ),
    ],
)
def test_cuped_edge_cases_explicit_status_json_safe(c, t, status):
    res = compare(c, t)
    assert res.status == status
    json.dumps(res.to_dict(), allow_nan=False)


def test_covariate_statistic_validation():
    with pytest.raises(ValueError, match="Cauchy-Schwarz"):
        CovariateStatistic(3, 6, 14, 6, 14, 100)
    with pytest.raises(ValueError, match="finite"):
        CovariateStatistic(3, 6, 14, float("nan"), 14, 1)


def _missing_covariate_arms(seed: int = 32, n: int = 1000):
    """Issue 32: the covariate is missing (stored as 0) for every treatment unit; the metric
    itself differs by 0.2 (Welch p = 0.32)."""
    rng = np.random.default_rng(seed)
    xc = rng.normal(20, 5, n)
    yc = 10 + 0.5555 * (xc - 20) + rng.normal(0, 3.536, n)
    yt = rng.normal(0, 1, n)
    yt = (yt - yt.mean()) / yt.std(ddof=1) * yc.std(ddof=1) + yc.mean() + 0.2
    return CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, np.zeros(n))


def test_a_covariate_missing_in_one_arm_falls_back_to_the_unadjusted_result():
    """Issue 32: a 0.2 difference with p 0.32 became 11.2 with p = 0 (t = 61), status ok, no
    warning. Now: the unadjusted Welch result, a status and a warning."""
    c, t = _missing_covariate_arms()
    unadjusted = compare(c.y, t.y)
    assert unadjusted.absolute_lift == pytest.approx(0.2, abs=1e-9)
    assert unadjusted.p_value == pytest.approx(0.3245, abs=1e-3)
    res = compare(c, t)
    assert res.cuped_status == "covariate_missing" and res.status == Status.OK
    assert res.method == "welch_t" and res.theta is None and res.variance_reduction is None
    assert res.absolute_lift == pytest.approx(unadjusted.absolute_lift, rel=1e-12)
    assert res.p_value == pytest.approx(unadjusted.p_value, rel=1e-12)
    assert res.absolute_ci == pytest.approx(unadjusted.absolute_ci, rel=1e-12)
    assert "treatment arm" in res.warning and "not applied" in res.warning
    assert res.extra["covariate_balance"]["constant_in"] == "treatment"
    # every engine that reads the comparison sees the fallback
    assert compare_sequential(c, t).cuped_status == "covariate_missing"
    assert compare_bayesian(c, t).posterior_mean == pytest.approx(0.2, abs=1e-9)
    json.dumps(res.to_dict(), allow_nan=False)


def test_an_imbalanced_covariate_falls_back_and_names_the_balance_test():
    """The pre-period covariate differs between arms (e.g. a lookback window that overlaps
    exposure in one arm): Welch p < 0.001 on the covariate → unadjusted result."""
    rng = np.random.default_rng(7)
    xc, xt = rng.normal(10, 3, 800), rng.normal(11, 3, 800)
    yc = 5 + 0.8 * xc + rng.normal(0, 2, 800)
    yt = 5 + 0.8 * xt + rng.normal(0, 2, 800)
    c, t = CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt)
    balance = st.ttest_ind(xt, xc, equal_var=False)
    res = compare(c, t)
    assert res.cuped_status == "covariate_imbalanced"
    assert res.extra["covariate_balance"]["p_value"] == pytest.approx(balance.pvalue, rel=1e-9)
    assert res.extra["covariate_balance"]["statistic"] == pytest.approx(balance.statistic, rel=1e-9)
    assert res.absolute_lift == pytest.approx(yt.mean() - yc.mean(), rel=1e-9)
    assert "p=" in res.warning and "differs between arms" in res.warning
    # the threshold is a parameter: a looser one lets the adjustment through
    assert compare_cuped(c, t, balance_alpha=1e-300).cuped_status == "applied"
    with pytest.raises(ValueError, match="balance_alpha"):
        compare_cuped(c, t, balance_alpha=0.0)


def test_a_balanced_covariate_is_applied_and_says_so():
    yc, xc, yt, xt = _data(1)
    res = compare(CovariateStatistic.from_values(yc, xc), CovariateStatistic.from_values(yt, xt))
    assert res.cuped_status == "applied" and res.warning is None and res.method == "cuped_welch_t"
    assert res.extra["covariate_balance"]["p_value"] > 0.001


def test_a_randomised_covariate_is_refused_about_once_in_a_thousand():
    """Under randomisation the balance test's false refusals stay at its 0.001 level."""
    rng = np.random.default_rng(2024)
    refused = 0
    for _ in range(2000):
        xc, xt = rng.gamma(2.0, 5.0, 150), rng.gamma(2.0, 5.0, 150)
        c = CovariateStatistic.from_values(xc + rng.normal(0, 1, 150), xc)
        t = CovariateStatistic.from_values(xt + rng.normal(0, 1, 150), xt)
        refused += compare(c, t).cuped_status != "applied"
    assert refused <= 8  # expected 2; P(more than 8 | p = 0.001) < 1e-4
