"""Power / sample size / MDE vs statsmodels.stats.power."""

from __future__ import annotations

import math

import pytest
from statsmodels.stats.power import NormalIndPower, TTestIndPower

from analytics.stats import (
    mde_mean,
    mde_proportion,
    power_mean,
    power_proportion,
    sample_size_mean,
    sample_size_proportion,
)

SM_ALT = {"two-sided": "two-sided", "greater": "larger", "less": "smaller"}


@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
@pytest.mark.parametrize(
    ("effect", "sd", "n", "ratio"), [(0.5, 2, 100, 1), (1.0, 3, 40, 2.5), (0.05, 1, 5000, 0.5)]
)
def test_power_mean_matches_statsmodels_ttestindpower(effect, sd, n, ratio, alternative):
    ours = power_mean(effect, sd, n, ratio=ratio, alternative=alternative)
    ref = TTestIndPower().power(effect / sd, n, 0.05, ratio=ratio, alternative=SM_ALT[alternative])
    assert ours == pytest.approx(ref, rel=1e-9)


def test_power_less_alternative_matches_statsmodels():
    ours = power_mean(-0.5, 2, 100, alternative="less")
    ref = TTestIndPower().power(-0.25, 100, 0.05, alternative="smaller")
    assert ours == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize(
    ("mde", "sd", "power", "ratio"), [(0.5, 2, 0.8, 1), (2, 10, 0.9, 2), (0.1, 1, 0.8, 1)]
)
def test_sample_size_mean_matches_statsmodels_solve_power(mde, sd, power, ratio):
    ss = sample_size_mean(mde, sd, power=power, ratio=ratio)
    ref = TTestIndPower().solve_power(mde / sd, power=power, alpha=0.05, ratio=ratio)
    assert ss.n_control == math.ceil(ref)
    assert power_mean(mde, sd, ss.n_control, ratio=ratio) >= power
    assert ss.total == ss.n_control + ss.n_treatment


def test_mde_mean_inverts_power():
    mde = mde_mean(250, 3.0, power=0.8)
    assert power_mean(mde, 3.0, 250) == pytest.approx(0.8, abs=1e-9)
    ref = TTestIndPower().solve_power(None, nobs1=250, power=0.8, alpha=0.05)
    assert mde / 3.0 == pytest.approx(ref, rel=1e-4)


def test_classic_known_value_two_sample_normal_approx():
    # Textbook: detecting d = 0.5 with 80% power, alpha .05 two-sided needs 64 per group (t-test).
    assert sample_size_mean(0.5, 1.0).n_control == 64


@pytest.mark.parametrize(("p1", "delta", "n"), [(0.1, 0.02, 3000), (0.5, -0.05, 800), (0.03, 0.006, 20000)])
def test_power_proportion_matches_normalindpower(p1, delta, n):
    p2 = p1 + delta
    es = delta / math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / 2)
    assert power_proportion(p1, delta, n) == pytest.approx(NormalIndPower().power(es, n, 0.05), rel=1e-9)


def test_sample_size_and_mde_proportion_roundtrip():
    ss = sample_size_proportion(0.1, 0.2, relative=True)
    p2 = 0.12
    es = 0.02 / math.sqrt((0.09 + p2 * (1 - p2)) / 2)
    assert ss.n_control == math.ceil(NormalIndPower().solve_power(es, power=0.8, alpha=0.05))
    mde = mde_proportion(0.1, ss.n_control, relative=True)
    assert 0.19 < mde <= 0.2
    assert power_proportion(0.1, mde, ss.n_control, relative=True) == pytest.approx(0.8, abs=1e-9)


def test_power_invalid_inputs_raise():
    with pytest.raises(ValueError):
        power_mean(1, 0, 10)
    with pytest.raises(ValueError):
        sample_size_mean(0, 1)
    with pytest.raises(ValueError):
        power_proportion(1.2, 0.1, 100)
    with pytest.raises(ValueError):
        sample_size_proportion(0.9, 0.2)
    with pytest.raises(ValueError):
        sample_size_mean(1, 1, power=1.5)


def test_mde_from_the_standard_error_matches_the_z_formula_and_scales_with_units():
    from scipy.stats import norm

    from analytics.stats import mde_from_std_error, units_for_effect

    assert mde_from_std_error(0.01, alpha=0.05, power=0.8) == pytest.approx(
        (norm.ppf(0.975) + norm.ppf(0.8)) * 0.01, rel=1e-12
    )
    # halving the MDE needs four times the units (SE ∝ 1/√n)
    mde = mde_from_std_error(0.02)
    assert units_for_effect(1000, 0.02, mde / 2) == pytest.approx(4000)
    assert units_for_effect(1000, 0.02, 0.0) == float("inf")


@pytest.mark.parametrize(
    ("units", "se", "status"),
    [
        (0, 0.01, "no_units"),
        (float("nan"), 0.01, "no_units"),
        (1000, None, "undefined_std_error"),
        (1000, float("nan"), "undefined_std_error"),
        (1000, float("inf"), "undefined_std_error"),
        (1000, -0.1, "undefined_std_error"),
    ],
)
def test_power_estimate_gives_a_status_for_degenerate_data_never_an_exception(units, se, status):
    from analytics.stats import power_estimate

    estimate = power_estimate(units_now=units, std_error=se, effect=0.05)
    assert (estimate.status, estimate.mde, estimate.units_needed) == (status, None, None)


def test_power_estimate_matches_scipy_on_valid_data():
    from scipy import stats

    from analytics.stats import power_estimate

    estimate = power_estimate(units_now=2000, std_error=0.02, effect=0.05, alpha=0.05, power=0.8)
    mde = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.02
    assert estimate.status == "ok"
    assert estimate.mde == pytest.approx(mde, rel=1e-12)
    assert estimate.units_needed == pytest.approx(2000 * (mde / 0.05) ** 2, rel=1e-12)
    with pytest.raises(ValueError):
        power_estimate(units_now=2000, std_error=0.02, effect=0.05, power=1.5)  # a parameter, not data
