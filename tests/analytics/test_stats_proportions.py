"""Proportions at the boundary (0 or n successes in an arm): intervals checked against statsmodels
and scipy.stats.beta, exact coverage by enumeration, a seeded simulation through the public API,
and the Bayesian engine's Beta posteriors (issue 32)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hs
from scipy import integrate, special
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from analytics.stats import ProportionStatistic, compare, compare_bayesian, compare_many, compare_sequential
from analytics.stats.proportions import agresti_caffo, mover_r, newcombe, newcombe_z, wilson

Z95 = st.norm.ppf(0.975)
# (x_c, n_c, x_t, n_t): boundaries first, then ordinary counts
CASES = [
    (0, 200, 0, 200),
    (0, 200, 5, 200),
    (5, 200, 0, 200),
    (200, 200, 195, 200),
    (200, 200, 200, 200),
    (0, 100, 100, 100),
    (5, 1000, 0, 1000),
    (2, 3, 0, 3),
    (120, 1000, 150, 1000),
    (40, 400, 58, 400),
]


@pytest.mark.parametrize(("x", "n"), [(0, 200), (1, 200), (200, 200), (3, 3), (0, 2), (37, 120)])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_wilson_matches_statsmodels(x, n, alpha):
    ours = wilson(x, n, st.norm.ppf(1 - alpha / 2))
    assert ours == pytest.approx(proportion_confint(x, n, alpha=alpha, method="wilson"), rel=1e-12, abs=1e-15)
    assert (ours[0] == 0.0) == (x == 0) and (ours[1] == 1.0) == (x == n)


@pytest.mark.parametrize(("xc", "nc", "xt", "nt"), CASES)
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_the_absolute_interval_is_newcombe_as_statsmodels_computes_it(xc, nc, xt, nt, alpha):
    res = compare(ProportionStatistic(nc, xc), ProportionStatistic(nt, xt), alpha=alpha)
    ref = confint_proportions_2indep(xt, nt, xc, nc, method="newcomb", compare="diff", alpha=alpha)
    assert res.status == "ok" and res.interval_method == "newcombe"
    assert res.absolute_ci == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert res.absolute_ci[1] - res.absolute_ci[0] > 0.005  # never zero-width, even at 0/n vs 0/n
    json.dumps(res.to_dict(), allow_nan=False)


@pytest.mark.parametrize(("xc", "nc", "xt", "nt"), [c for c in CASES if c[0] > 0])
def test_the_relative_interval_is_mover_r_on_statsmodels_wilson_limits(xc, nc, xt, nt):
    """MOVER-R's limits solve p_t - L p_c = ±sqrt((p_t - w_t)² + L²(w_c - p_c)²) with Wilson limits
    w (Donner & Zou 2012): checked on limits from statsmodels, not our own Wilson."""
    res = compare(ProportionStatistic(nc, xc), ProportionStatistic(nt, xt))
    assert res.relative_interval_method == "mover_r"
    low, high = (v + 1.0 for v in res.relative_ci)
    pc, pt = xc / nc, xt / nt
    lc, uc = proportion_confint(xc, nc, method="wilson")
    lt, ut = proportion_confint(xt, nt, method="wilson")
    assert pt - low * pc == pytest.approx(math.hypot(pt - lt, low * (uc - pc)), abs=1e-12)
    assert high * pc - pt == pytest.approx(math.hypot(ut - pt, high * (pc - lc)), abs=1e-12)
    assert low <= pt / pc <= high
    if xt == 0:
        assert low == 0.0  # -100 %: the treatment may truly have no success


def test_a_control_without_success_has_no_relative_lift_but_an_absolute_interval():
    res = compare(ProportionStatistic(200, 0), ProportionStatistic(200, 5))
    assert res.relative_status == "control_mean_zero" and res.relative_ci is None
    assert res.absolute_ci[0] < 0.025 < res.absolute_ci[1]


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize(("xc", "nc", "xt", "nt"), CASES)
def test_the_relative_p_value_is_dual_to_both_intervals_at_every_level(xc, nc, xt, nt, alternative):
    for alpha in (0.001, 0.01, 0.05, 0.1, 0.3):
        res = compare(
            ProportionStatistic(nc, xc), ProportionStatistic(nt, xt), alpha=alpha, alternative=alternative
        )
        lo, hi = res.absolute_ci
        excludes = lo > 0 or hi < 0
        if res.relative_ci is not None:
            rlo, rhi = res.relative_ci
            assert (rlo > 0 or rhi < 0) == excludes
            assert (res.relative_p_value < alpha) == excludes, (alpha, res.relative_p_value, res.absolute_ci)


def test_newcombe_z_is_where_the_interval_touches_zero():
    for xc, nc, xt, nt in CASES:
        z = newcombe_z(xc, nc, xt, nt)
        if xc / nc == xt / nt:
            assert z == 0.0
            continue
        low, high = newcombe(xc, nc, xt, nt, abs(z))
        assert (low if z > 0 else high) == pytest.approx(0.0, abs=1e-10)
    many = newcombe_z(*(np.array(col, float) for col in zip(*CASES, strict=True)))
    assert many == pytest.approx([newcombe_z(*c) for c in CASES], abs=1e-9)


@pytest.mark.parametrize(("xc", "nc", "xt", "nt"), CASES)
def test_agresti_caffo_matches_statsmodels(xc, nc, xt, nt):
    pc, vc, pt, vt = agresti_caffo(xc, nc, xt, nt)
    ref = confint_proportions_2indep(xt, nt, xc, nc, method="agresti-caffo", compare="diff")
    diff, half = pt - pc, Z95 * math.sqrt(vc + vt)
    assert (diff - half, diff + half) == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_the_sequential_band_of_a_boundary_arm_uses_agresti_caffo():
    c, t = ProportionStatistic(1000, 5), ProportionStatistic(1000, 0)
    seq = compare_sequential(c, t)
    assert seq.interval_method == "confidence_sequence_agresti_caffo"
    pc, vc, pt, vt = agresti_caffo(5, 1000, 0, 1000)
    centre = (seq.absolute_ci[0] + seq.absolute_ci[1]) / 2
    assert centre == pytest.approx(pt - pc, rel=1e-12)
    assert seq.statistic == pytest.approx((pt - pc) / math.sqrt(vc + vt), rel=1e-12)
    assert seq.relative_ci[0] < -0.5 < seq.relative_ci[1]  # a real band, not a zero-width one
    both_empty = compare_sequential(ProportionStatistic(100, 0), ProportionStatistic(100, 0))
    assert both_empty.status == "ok" and both_empty.absolute_ci[0] < 0 < both_empty.absolute_ci[1]


def _exact_coverage(n: int, p_c: float, p_t: float, method: str) -> float:
    """Coverage of the true value by the 95 % interval, summed over every (x_c, x_t) outcome."""
    k = np.arange(n + 1.0)
    xc, xt = np.meshgrid(k, k, indexing="ij")
    weight = np.outer(st.binom.pmf(k, n, p_c), st.binom.pmf(k, n, p_t))
    if method == "wald":
        d = xt / n - xc / n
        half = Z95 * np.sqrt(xc / n * (1 - xc / n) / n + xt / n * (1 - xt / n) / n)
        low, high, truth, keep = d - half, d + half, p_t - p_c, np.ones_like(weight, bool)
    elif method == "newcombe":
        (low, high), truth, keep = newcombe(xc, n, xt, n, Z95), p_t - p_c, np.ones_like(weight, bool)
    else:  # mover_r, defined when the control has a success
        keep = xc > 0
        low, high = mover_r(np.where(keep, xc, 1.0), n, xt, n, Z95)
        truth = p_t / p_c
    hit = keep & (low <= truth) & (truth <= high)
    return float(weight[hit].sum() / weight[keep].sum())


@pytest.mark.parametrize(("p_c", "p_t"), [(0.01, 0.03), (0.05, 0.05), (0.1, 0.12)])
@pytest.mark.parametrize("method", ["newcombe", "mover_r"])
def test_exact_coverage_is_near_95_percent(p_c, p_t, method):
    assert 0.93 <= _exact_coverage(200, p_c, p_t, method) <= 0.97


@pytest.mark.parametrize("p_t", [0.0, 0.001, 0.005, 0.01])
def test_at_one_percent_and_200_units_the_boundary_intervals_hold_their_level_and_wald_does_not(p_t):
    """p = 0.01, n = 200 (2 expected successes, 13 % of arms with none): Wald covers 86 % when the
    treatment rate is lower; Newcombe / MOVER-R never fall below 93 % (discreteness makes every
    score interval conservative here, 98-99 %)."""
    assert _exact_coverage(200, 0.01, p_t, "newcombe") >= 0.93
    if p_t > 0:
        assert _exact_coverage(200, 0.01, p_t, "mover_r") >= 0.93
    if p_t < 0.01:
        assert _exact_coverage(200, 0.01, p_t, "wald") < 0.87


def test_coverage_by_seeded_simulation_through_the_public_api():
    """2,000 seeded experiments at p_c = 0.01, p_t = 0.03, n = 200 through compare() and
    compare_many(): the two agree row by row and cover the truth about 95 % of the time."""
    rng = np.random.default_rng(32)
    n, sims = 200, 2000
    xc, xt = rng.binomial(n, 0.01, sims), rng.binomial(n, 0.03, sims)
    many = compare_many(kind="proportion", control_n=n, control_sum=xc, treatment_n=n, treatment_sum=xt)
    covered = (many.ci_low <= 0.02) & (many.ci_high >= 0.02)
    assert 0.93 <= covered.mean() <= 0.98
    defined = ~np.isnan(many.relative_ci_low)
    rel_covered = (many.relative_ci_low[defined] <= 2.0) & (many.relative_ci_high[defined] >= 2.0)
    assert 0.93 <= rel_covered.mean() <= 0.98
    for i in range(0, sims, 40):
        one = compare(ProportionStatistic(n, int(xc[i])), ProportionStatistic(n, int(xt[i])))
        row = many.result(i)
        assert row.absolute_ci == pytest.approx(one.absolute_ci, rel=1e-9, abs=1e-15)
        assert (row.relative_ci is None) == (one.relative_ci is None)
        if one.relative_ci is not None:
            assert row.relative_ci == pytest.approx(one.relative_ci, rel=1e-9, abs=1e-15)
            assert row.relative_p_value == pytest.approx(one.relative_p_value, rel=1e-7, abs=1e-12)
        assert (row.interval_method, row.relative_interval_method) == (
            one.interval_method,
            one.relative_interval_method,
        )


@settings(max_examples=200, deadline=None)
@given(hs.integers(2, 400), hs.integers(2, 400), hs.floats(0, 1), hs.floats(0, 1))
def test_property_intervals_contain_the_estimate_and_stay_in_range(nc, nt, fc, ft):
    c, t = ProportionStatistic(nc, round(nc * fc)), ProportionStatistic(nt, round(nt * ft))
    res = compare(c, t)
    assert res.status == "ok"
    lo, hi = res.absolute_ci
    assert -1.0 <= lo <= res.absolute_lift <= hi <= 1.0 and hi > lo
    if res.relative_ci is not None:
        assert -1.0 <= res.relative_ci[0] <= res.relative_lift <= res.relative_ci[1]
        assert res.relative_ci[1] > res.relative_ci[0]
    json.dumps(res.to_dict(), allow_nan=False)


# --- Bayesian: Beta posteriors ------------------------------------------------------------------


def _beta(stat: ProportionStatistic):
    return st.beta(1 + stat.sum, 1 + stat.n - stat.sum)


def _cdf(dist):
    """``dist``'s CDF as the plain ufunc ``I_x(a, b)``: the inner integrals below call it thousands of
    times, and a frozen distribution's ``cdf`` costs ~20x as much per call for the same value."""
    a, b = dist.args
    return lambda x: special.betainc(a, b, x)


def _quad(f, *dists) -> float:
    points = sorted({float(q) for d in dists for q in d.ppf([1e-9, 0.01, 0.5, 0.99, 1 - 1e-9])})
    return integrate.quad(f, 0, 1, points=points, limit=400, epsabs=1e-13, epsrel=1e-11)[0]


@pytest.mark.parametrize(
    ("c", "t"),
    [
        ((200, 0), (200, 0)),
        ((1000, 5), (1000, 0)),
        ((200, 0), (200, 5)),
        ((3, 3), (3, 1)),
        ((5000, 500), (5000, 540)),
    ],
)
def test_bayesian_absolute_effect_matches_scipy_beta(c, t):
    c, t = ProportionStatistic(*c), ProportionStatistic(*t)
    b = compare_bayesian(c, t)
    bc, bt = _beta(c), _beta(t)
    assert b.status == "ok" and b.model == "beta_binomial" and b.effect == "absolute"
    assert b.chance_to_win == pytest.approx(_quad(lambda x: bc.pdf(x) * bt.sf(x), bc, bt), abs=1e-9)
    # E[max(p_c - p_t, 0)] = ∫ pdf_c(x) E[max(x - p_t, 0)] dx
    cdf_t = _cdf(bt)
    loss = _quad(lambda x: bc.pdf(x) * integrate.quad(cdf_t, 0, x)[0], bc, bt)
    assert b.expected_loss_treatment == pytest.approx(loss, rel=1e-6, abs=1e-12)
    assert b.posterior_mean == pytest.approx(bt.mean() - bc.mean(), abs=1e-15)
    assert b.posterior_std == pytest.approx(math.hypot(bt.std(), bc.std()), rel=1e-12)
    for q, bound in zip((0.025, 0.975), b.credible_interval, strict=True):  # F_D(bound) = q
        assert _quad(lambda x, d=bound: bc.pdf(x) * bt.cdf(min(max(x + d, 0), 1)), bc, bt) == pytest.approx(
            q, abs=1e-7
        )
    low, high = b.credible_interval
    assert high - low > 0.005  # never zero-width


@pytest.mark.parametrize(
    ("c", "t"), [((1000, 5), (1000, 0)), ((20, 10), (20, 20)), ((5000, 500), (5000, 540))]
)
def test_bayesian_relative_effect_matches_scipy_beta(c, t):
    c, t = ProportionStatistic(*c), ProportionStatistic(*t)
    b = compare_bayesian(c, t, relative=True)
    bc, bt = _beta(c), _beta(t)
    assert b.status == "ok" and b.effect == "relative"
    assert b.posterior_mean == pytest.approx(bt.mean() * bc.expect(lambda x: 1 / x) - 1, rel=1e-7)
    # E[max(1 - p_t/p_c, 0)] = ∫ pdf_c(x) E[max(x - p_t, 0)] / x dx
    cdf_t = _cdf(bt)
    loss = _quad(lambda x: bc.pdf(x) * integrate.quad(cdf_t, 0, x)[0] / x, bc, bt)
    assert b.expected_loss_treatment == pytest.approx(loss, rel=1e-6, abs=1e-12)
    assert b.expected_loss_control == pytest.approx(b.posterior_mean + loss, rel=1e-6, abs=1e-12)
    for q, bound in zip((0.025, 0.975), b.credible_interval, strict=True):
        cdf = _quad(lambda x, r=bound: bc.pdf(x) * bt.cdf(min((1 + r) * x, 1)), bc, bt)
        assert cdf == pytest.approx(q, abs=1e-7)


def test_bayesian_proportions_refuse_a_gaussian_effect_prior():
    with pytest.raises(ValueError, match="Beta"):
        compare_bayesian(ProportionStatistic(100, 5), ProportionStatistic(100, 7), prior_variance=0.01)
