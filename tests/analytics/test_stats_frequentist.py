"""Frequentist compare(): checked against scipy/statsmodels on raw data."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hs
from statsmodels.stats.proportion import proportions_ztest

from analytics.stats import (
    ComparisonResult,
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    RelativeStatus,
    Status,
    compare,
)

ALTS = ["two-sided", "greater", "less"]
SCIPY_ALT = {"two-sided": "two-sided", "greater": "greater", "less": "less"}
SM_ALT = {"two-sided": "two-sided", "greater": "larger", "less": "smaller"}


def _ms(x: np.ndarray) -> MeanStatistic:
    return MeanStatistic(len(x), float(np.sum(x)), float(np.sum(x * x)))


def _assert_json_safe(res) -> dict:
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    return d


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize("seed", range(5))
def test_welch_matches_scipy_ttest_ind_pvalue_ci_df(seed, alternative):
    rng = np.random.default_rng(seed)
    a = rng.normal(5.0, 2.0, rng.integers(20, 400))
    b = rng.lognormal(1.6, 0.5, rng.integers(20, 400))
    res = compare(_ms(a), _ms(b), alpha=0.1, alternative=alternative)
    ref = st.ttest_ind(b, a, equal_var=False, alternative=SCIPY_ALT[alternative])
    ci = ref.confidence_interval(confidence_level=0.9)
    assert res.status == Status.OK
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-9)
    assert res.df == pytest.approx(ref.df, rel=1e-9)
    for ours, theirs in zip(res.absolute_ci, (ci.low, ci.high), strict=True):
        if math.isinf(theirs):
            assert ours == theirs
        else:
            assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    assert res.absolute_lift == pytest.approx(b.mean() - a.mean(), rel=1e-12)
    _assert_json_safe(res)


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize(
    ("xc", "nc", "xt", "nt"), [(120, 1000, 150, 1000), (5, 40, 14, 55), (900, 1000, 870, 990)]
)
def test_two_proportion_z_pvalue_matches_statsmodels_pooled(xc, nc, xt, nt, alternative):
    res = compare(ProportionStatistic(nc, xc), ProportionStatistic(nt, xt), alternative=alternative)
    z, p = proportions_ztest([xt, xc], [nt, nc], alternative=SM_ALT[alternative])
    assert res.statistic == pytest.approx(z, rel=1e-9)
    assert res.p_value == pytest.approx(p, rel=1e-9)
    assert res.df is None


def test_two_proportion_ci_is_newcombe_and_the_std_error_unpooled():
    from statsmodels.stats.proportion import confint_proportions_2indep

    res = compare(ProportionStatistic(1000, 120), ProportionStatistic(1000, 150))
    low, high = confint_proportions_2indep(150, 1000, 120, 1000, method="newcomb", compare="diff")
    assert res.absolute_ci == pytest.approx((low, high), rel=1e-9)
    assert res.interval_method == "newcombe" and res.relative_interval_method == "mover_r"
    assert res.std_error == pytest.approx(math.sqrt(0.12 * 0.88 / 1000 + 0.15 * 0.85 / 1000), rel=1e-12)


def test_known_published_welch_example():
    # Welch's t-test worked example (Wikipedia "Welch's t-test", example 1):
    # A1 vs A2 -> t = -2.46, df = 25.0 (approximately), two-sided p = 0.021
    a1 = np.array([27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4])
    a2 = np.array([27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4])
    res = compare(_ms(a2), _ms(a1))
    assert res.statistic == pytest.approx(-2.46, abs=0.005)
    assert res.df == pytest.approx(24.99, abs=0.01)
    assert res.p_value == pytest.approx(0.021, abs=0.0005)


def test_relative_ci_is_delta_method_not_rescaled_absolute():
    rng = np.random.default_rng(7)
    a = rng.normal(10, 3, 300)
    b = rng.normal(11, 4, 250)
    res = compare(_ms(a), _ms(b))
    ma, mb = a.mean(), b.mean()
    va, vb = a.var(ddof=1), b.var(ddof=1)
    var_rel = vb / (len(b) * ma**2) + mb**2 * va / (len(a) * ma**4)
    crit = st.t.ppf(0.975, res.df)
    assert res.relative_lift == pytest.approx(mb / ma - 1, rel=1e-12)
    assert res.relative_std_error == pytest.approx(math.sqrt(var_rel), rel=1e-12)
    assert res.relative_ci == pytest.approx(
        (mb / ma - 1 - crit * math.sqrt(var_rel), mb / ma - 1 + crit * math.sqrt(var_rel))
    )
    rescaled = tuple(x / ma for x in res.absolute_ci)
    assert res.relative_ci[0] != pytest.approx(rescaled[0], rel=1e-6)


def test_relative_ci_delta_method_coverage_simulation():
    rng = np.random.default_rng(11)
    cover = 0
    reps = 2000
    a = rng.normal(10, 4, (reps, 200))
    b = rng.normal(12, 4, (reps, 200))
    for i in range(reps):
        r = compare(_ms(a[i]), _ms(b[i]))
        cover += r.relative_ci[0] <= 0.2 <= r.relative_ci[1]
    assert abs(cover / reps - 0.95) < 0.015


def test_negative_control_mean_relative_lift_keeps_sign_of_difference():
    rng = np.random.default_rng(3)
    a = rng.normal(-10, 1, 200)
    b = rng.normal(-9, 1, 200)  # treatment higher (less negative)
    res = compare(_ms(a), _ms(b))
    assert res.absolute_lift > 0
    assert res.relative_lift > 0
    assert res.relative_lift == pytest.approx(res.absolute_lift / abs(a.mean()))
    assert res.relative_ci[0] < res.relative_lift < res.relative_ci[1]


def test_control_mean_zero_suppresses_relative_lift_with_reason():
    res = compare(ProportionStatistic(1000, 0), ProportionStatistic(1000, 12))
    assert res.status == Status.OK
    assert res.relative_status == RelativeStatus.CONTROL_MEAN_ZERO
    assert res.relative_lift is None and res.relative_ci is None
    assert "control mean" in res.reason
    assert res.p_value is not None
    _assert_json_safe(res)


def test_control_mean_near_zero_suppresses_relative_lift():
    rng = np.random.default_rng(5)
    a = rng.normal(0.001, 1, 500)
    b = rng.normal(0.2, 1, 500)
    res = compare(_ms(a), _ms(b))
    assert res.status == Status.OK
    assert res.relative_status == RelativeStatus.CONTROL_MEAN_NEAR_ZERO
    assert res.relative_lift is None
    _assert_json_safe(res)


EDGE_CASES = {
    "empty_arm": (MeanStatistic(0, 0, 0), MeanStatistic(10, 10, 20)),
    "single_unit_arm": (MeanStatistic(1, 3, 9), MeanStatistic(10, 10, 20)),
    "both_empty": (MeanStatistic(0, 0, 0), MeanStatistic(0, 0, 0)),
    "zero_variance_both_different": (MeanStatistic(10, 10, 10), MeanStatistic(10, 20, 40)),
    "constant_identical": (MeanStatistic(10, 10, 10), MeanStatistic(12, 12, 12)),
    "constant_identical_inexact_float": (
        MeanStatistic.from_values([0.1] * 7),
        MeanStatistic.from_values([0.1] * 13),
    ),
    "all_zero": (MeanStatistic(10, 0, 0), MeanStatistic(10, 0, 0)),
    "prop_empty": (ProportionStatistic(0, 0), ProportionStatistic(5, 1)),
    "prop_one_unit": (ProportionStatistic(1, 1), ProportionStatistic(100, 10)),
    "ratio_denominator_zero": (
        RatioStatistic(5, MeanStatistic(5, 0, 0), MeanStatistic(5, 0, 0), 0),
        RatioStatistic(5, MeanStatistic(5, 5, 7), MeanStatistic(5, 5, 5), 5),
    ),
    "ratio_single_unit_zero_denominator": (
        RatioStatistic(1, MeanStatistic(1, 0, 0), MeanStatistic(1, 0, 0), 0),
        RatioStatistic(5, MeanStatistic(5, 5, 7), MeanStatistic(5, 5, 5), 5),
    ),
}
EXPECTED_STATUS = {
    "empty_arm": Status.INSUFFICIENT_DATA,
    "single_unit_arm": Status.INSUFFICIENT_DATA,
    "both_empty": Status.INSUFFICIENT_DATA,
    "zero_variance_both_different": Status.ZERO_VARIANCE,
    "constant_identical": Status.CONSTANT_IDENTICAL,
    "constant_identical_inexact_float": Status.CONSTANT_IDENTICAL,
    "all_zero": Status.CONSTANT_IDENTICAL,
    "prop_empty": Status.INSUFFICIENT_DATA,
    "prop_one_unit": Status.INSUFFICIENT_DATA,
    "ratio_denominator_zero": Status.RATIO_DENOMINATOR_ZERO,
    "ratio_single_unit_zero_denominator": Status.INSUFFICIENT_DATA,
}


@pytest.mark.parametrize("alternative", ALTS)
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_cases_have_explicit_status_and_json_without_nan(case, alternative):
    c, t = EDGE_CASES[case]
    res = compare(c, t, alternative=alternative)
    assert res.status == EXPECTED_STATUS[case]
    assert res.reason
    assert res.p_value is None
    assert res.absolute_ci is None
    d = _assert_json_safe(res)
    for v in d.values():
        assert not (isinstance(v, float) and not math.isfinite(v))
    for name in ("control_mean", "treatment_mean", "absolute_lift", "relative_lift"):
        v = getattr(res, name)
        assert v is None or math.isfinite(v)


def test_one_arm_zero_variance_other_positive_is_ok():
    res = compare(MeanStatistic(10, 10, 10), _ms(np.arange(20.0)))
    assert res.status == Status.OK
    assert res.df == pytest.approx(19.0)


def test_one_sided_ci_open_end_is_none_in_json():
    rng = np.random.default_rng(0)
    res = compare(_ms(rng.normal(0, 1, 50) + 5), _ms(rng.normal(0, 1, 50) + 5.5), alternative="greater")
    assert res.absolute_ci[1] == math.inf
    d = _assert_json_safe(res)
    assert d["absolute_ci"][1] is None
    assert d["relative_ci"][1] is None


def test_invalid_arguments_raise_value_error():
    m = MeanStatistic(10, 10, 20)
    with pytest.raises(ValueError, match="alpha"):
        compare(m, m, alpha=1.5)
    with pytest.raises(ValueError, match="alternative"):
        compare(m, m, alternative="bigger")
    with pytest.raises(ValueError, match="same statistic type"):
        compare(m, ProportionStatistic(10, 3))


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: MeanStatistic(-1, 0, 0), "n must be >= 0"),
        (lambda: MeanStatistic(10, float("nan"), 1), "finite"),
        (lambda: MeanStatistic(10, 1.0, float("inf")), "finite"),
        (lambda: MeanStatistic(10, 10.0, 5.0), "inconsistent"),
        (lambda: MeanStatistic(2.5, 1, 1), "whole number"),
        (lambda: MeanStatistic(True, 1, 1), "integer"),
        (lambda: MeanStatistic(0, 1, 1), "n == 0"),
        (lambda: ProportionStatistic(10, 11), r"\[0, n=10\]"),
        (lambda: ProportionStatistic(10, -1), r"\[0, n=10\]"),
        (lambda: RatioStatistic(3, MeanStatistic(3, 3, 3), MeanStatistic(2, 2, 2), 2), "must both equal"),
        (lambda: RatioStatistic(3, MeanStatistic(3, 3, 5), MeanStatistic(3, 3, 5), 100), "Cauchy-Schwarz"),
    ],
)
def test_statistic_validation_raises_clear_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


def test_mean_statistic_properties_match_numpy():
    x = np.random.default_rng(2).normal(3, 2, 77)
    m = _ms(x)
    assert m.mean == pytest.approx(x.mean(), rel=1e-12)
    assert m.variance == pytest.approx(x.var(ddof=1), rel=1e-10)
    assert m.std_error == pytest.approx(st.sem(x), rel=1e-10)


def test_ratio_metric_delta_method_matches_raw_data_linearisation():
    rng = np.random.default_rng(21)

    def arm(n, tpt):
        turns = rng.poisson(4, n) + 1.0
        tokens = turns * tpt + rng.normal(0, 30, n) * np.sqrt(turns)
        return tokens, turns

    (mc, dc), (mt, dt) = arm(800, 100.0), arm(900, 104.0)

    def rs(m, d):
        return RatioStatistic(len(m), _ms(m), _ms(d), float(np.sum(m * d)))

    res = compare(rs(mc, dc), rs(mt, dt))
    # Delta method == variance of the linearised per-unit values (m - r d)/mean(d)
    # (Deng et al. 2018, section 3).
    for m, d, stat in ((mc, dc, rs(mc, dc)), (mt, dt, rs(mt, dt))):
        r = m.sum() / d.sum()
        lin = (m - r * d) / d.mean()
        assert stat.variance == pytest.approx(lin.var(ddof=1), rel=1e-8)
        assert stat.mean == pytest.approx(r, rel=1e-12)
    assert res.method == "ratio_delta_t"
    assert res.status == Status.OK
    assert res.absolute_lift == pytest.approx(mt.sum() / dt.sum() - mc.sum() / dc.sum(), rel=1e-12)
    _assert_json_safe(res)


def test_ratio_metric_ci_coverage_simulation():
    rng = np.random.default_rng(8)
    reps, n, true_ratio = 600, 300, 50.0
    cover = 0
    for _ in range(reps):
        stats = []
        for _arm in range(2):
            d = rng.poisson(3, n) + 1.0
            m = rng.gamma(d * 2.0, true_ratio / 2.0)
            stats.append(RatioStatistic(n, _ms(m), _ms(d), float(np.sum(m * d))))
        r = compare(stats[0], stats[1])
        cover += r.absolute_ci[0] <= 0 <= r.absolute_ci[1]
    assert abs(cover / reps - 0.95) < 0.03


finite = hs.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    hs.lists(finite, min_size=0, max_size=30),
    hs.lists(finite, min_size=0, max_size=30),
    hs.sampled_from(ALTS),
)
def test_property_never_nan_never_raises_on_valid_samples(a, b, alternative):
    res = compare(MeanStatistic.from_values(a), MeanStatistic.from_values(b), alternative=alternative)
    assert isinstance(res, ComparisonResult)
    json.dumps(res.to_dict(), allow_nan=False)
    if res.ok:
        assert 0.0 <= res.p_value <= 1.0
        assert res.absolute_ci[0] <= res.absolute_lift <= res.absolute_ci[1]


@settings(max_examples=150, deadline=None)
@given(
    hs.integers(0, 10_000),
    hs.integers(0, 10_000),
    hs.floats(0, 1),
    hs.floats(0, 1),
    hs.sampled_from(ALTS),
)
def test_property_proportions_json_safe_and_p_in_unit_interval(nc, nt, fc, ft, alternative):
    c = ProportionStatistic(nc, round(nc * fc))
    t = ProportionStatistic(nt, round(nt * ft))
    res = compare(c, t, alternative=alternative)
    json.dumps(res.to_dict(), allow_nan=False)
    if res.ok:
        assert 0.0 <= res.p_value <= 1.0


@settings(max_examples=80, deadline=None)
@given(hs.floats(-1e3, 1e3), hs.floats(0.1, 10), hs.integers(0, 2**31 - 1))
def test_property_welch_is_shift_invariant_in_absolute_terms(shift, scale, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(0, scale, 40)
    b = rng.normal(0.3, scale, 60)
    r1 = compare(_ms(a), _ms(b))
    r2 = compare(_ms(a + shift), _ms(b + shift))
    assert r2.p_value == pytest.approx(r1.p_value, rel=1e-5, abs=1e-9)
    assert r2.absolute_lift == pytest.approx(r1.absolute_lift, rel=1e-6, abs=1e-9 * (1 + abs(shift)))


def test_tiny_variances_give_the_welch_df_of_their_scaled_up_values():
    """Squared standard errors of 1e-174 underflow to 0: the df is computed on their shares."""
    tiny = compare(
        MeanStatistic.from_values([0.0, 0.0]), MeanStatistic.from_values([0.0, 5.389708335721727e-87])
    )
    scaled = compare(
        MeanStatistic.from_values([0.0, 0.0]), MeanStatistic.from_values([0.0, 5.389708335721727])
    )
    assert tiny.status == Status.OK and tiny.df == pytest.approx(scaled.df, rel=1e-12)
    assert tiny.p_value == pytest.approx(scaled.p_value, rel=1e-12)


def test_tiny_means_give_the_relative_lift_of_the_same_data_scaled_up():
    """A control mean of ~1e-100 once raised ZeroDivisionError (its fourth power is 0.0 in floats);
    the relative lift and its SE do not depend on the unit, so they equal those of the data × 1e100."""
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 5.0, 6.0]
    tiny = compare(
        MeanStatistic.from_values([x * 1e-100 for x in a]), MeanStatistic.from_values([x * 1e-100 for x in b])
    )
    plain = compare(MeanStatistic.from_values(a), MeanStatistic.from_values(b))
    assert tiny.relative_lift == pytest.approx(plain.relative_lift, rel=1e-9)
    assert tiny.relative_ci == pytest.approx(plain.relative_ci, rel=1e-9)
    assert plain.relative_lift == pytest.approx(0.6)  # 4.0 / 2.5 - 1
