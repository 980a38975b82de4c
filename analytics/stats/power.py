"""Power, sample size and minimum detectable effect (MDE).

* Means: two-sample t-test power with the noncentral t distribution (Cohen 1988,
  ch. 2), ``df = n_c + n_t - 2``, noncentrality ``delta / (sd sqrt(1/n_c + 1/n_t))`` --
  the same formulation as ``statsmodels.stats.power.TTestIndPower`` (two-sided power
  counts both rejection tails).
* Proportions: normal approximation with the unpooled (Wald) variance under the
  alternative, ``SE = sqrt(p_c(1-p_c)/n_c + p_t(1-p_t)/n_t)`` with ``p_t = p_c + mde``
  (Chow, Shao, Wang, "Sample Size Calculations in Clinical Research", sec. 4.2 --
  identical to ``statsmodels NormalIndPower`` with effect size ``mde / sqrt((p_c q_c +
  p_t q_t)/2)`` when ``ratio == 1``).

Units: ``mde``/``effect`` are absolute (metric units, or proportion points) unless a
``relative=True`` flag says "fraction of the baseline".  ``ratio = n_treatment /
n_control``.  Sample sizes are rounded up to whole units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize, special

from ._core import check_args

__all__ = [
    "SampleSize",
    "power_mean",
    "sample_size_mean",
    "mde_mean",
    "power_proportion",
    "sample_size_proportion",
    "mde_proportion",
    "mde_from_std_error",
    "units_for_effect",
    "PowerEstimate",
    "power_estimate",
]


@dataclass(frozen=True, slots=True)
class SampleSize:
    """Units needed per arm (rounded up) and in total."""

    n_control: int
    n_treatment: int

    @property
    def total(self) -> int:
        return self.n_control + self.n_treatment


def _check_common(alpha: float, power: float | None, ratio: float, alternative: str) -> None:
    check_args(alpha, alternative)
    if power is not None and not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"ratio must be finite and > 0, got {ratio}")


def _t_power(nc: float, df: float, alpha: float, alternative: str) -> float:
    if alternative == "two-sided":
        crit = float(special.stdtrit(df, 1.0 - alpha / 2.0))
        return float(1.0 - special.nctdtr(df, nc, crit) + special.nctdtr(df, nc, -crit))
    crit = float(special.stdtrit(df, 1.0 - alpha))
    if alternative == "greater":
        return float(1.0 - special.nctdtr(df, nc, crit))
    return float(special.nctdtr(df, nc, -crit))


def _z_power(shift: float, alpha: float, alternative: str) -> float:
    if alternative == "two-sided":
        z = float(special.ndtri(1.0 - alpha / 2.0))
        return float(special.ndtr(shift - z) + special.ndtr(-shift - z))
    z = float(special.ndtri(1.0 - alpha))
    return float(special.ndtr(shift - z)) if alternative == "greater" else float(special.ndtr(-shift - z))


def power_mean(
    effect: float,
    sd: float,
    n_control: float,
    *,
    ratio: float = 1.0,
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> float:
    """Power of Welch/Student two-sample t-test to detect an absolute ``effect``.

    Args: effect (metric units, signed for one-sided tests), sd (per-unit standard
    deviation, assumed common), n_control (units in control; treatment = ratio * n).

    Raises: ValueError for sd <= 0, n_control < 2 or invalid alpha/ratio/alternative.
    """
    _check_common(alpha, None, ratio, alternative)
    if not sd > 0:
        raise ValueError(f"sd must be > 0, got {sd}")
    if not n_control >= 2:
        raise ValueError(f"n_control must be >= 2, got {n_control}")
    n_t = n_control * ratio
    df = n_control + n_t - 2.0
    nc = effect / (sd * math.sqrt(1.0 / n_control + 1.0 / n_t))
    return _t_power(nc, df, alpha, alternative)


def _solve_n(power_fn, power: float) -> float:
    lo, hi = 2.0, 4.0
    if power_fn(lo) >= power:
        return lo
    while power_fn(hi) < power:
        lo, hi = hi, hi * 2.0
        if hi > 1e13:
            raise ValueError("required sample size exceeds 1e13 units; effect too small")
    return optimize.brentq(lambda n: power_fn(n) - power, lo, hi, xtol=1e-10, rtol=1e-12)


def sample_size_mean(
    mde: float,
    sd: float,
    *,
    power: float = 0.8,
    alpha: float = 0.05,
    ratio: float = 1.0,
    alternative: str = "two-sided",
) -> SampleSize:
    """Units per arm for a t-test to detect absolute effect ``mde`` with ``power``.

    Raises: ValueError for mde == 0, sd <= 0 or invalid parameters.
    """
    _check_common(alpha, power, ratio, alternative)
    if mde == 0 or not math.isfinite(mde):
        raise ValueError("mde must be finite and non-zero")
    eff = mde if alternative != "two-sided" else abs(mde)
    n = _solve_n(lambda n: power_mean(eff, sd, n, ratio=ratio, alpha=alpha, alternative=alternative), power)
    n_c = math.ceil(n - 1e-9)
    return SampleSize(n_c, math.ceil(n_c * ratio - 1e-9))


def mde_mean(
    n_control: float,
    sd: float,
    *,
    power: float = 0.8,
    alpha: float = 0.05,
    ratio: float = 1.0,
    alternative: str = "two-sided",
) -> float:
    """Smallest absolute effect (metric units, > 0; negative for ``alternative="less"``)
    detectable with ``power`` given ``n_control`` units (t-test)."""
    _check_common(alpha, power, ratio, alternative)
    sign = -1.0 if alternative == "less" else 1.0
    se = sd * math.sqrt(1.0 / n_control + 1.0 / (n_control * ratio))

    def f(e: float) -> float:
        return power_mean(sign * e, sd, n_control, ratio=ratio, alpha=alpha, alternative=alternative) - power

    hi = se
    while f(hi) < 0:
        hi *= 2.0
    return sign * optimize.brentq(f, 0.0, hi, xtol=1e-14 * max(se, 1e-300), rtol=1e-12)


def _prop_args(baseline: float, mde: float, relative: bool) -> tuple[float, float]:
    if not 0.0 < baseline < 1.0:
        raise ValueError(f"baseline must be in (0, 1), got {baseline}")
    delta = mde * baseline if relative else mde
    p_t = baseline + delta
    if not 0.0 < p_t < 1.0 or delta == 0:
        raise ValueError(f"baseline + mde must be in (0, 1) and mde != 0, got p_t={p_t}")
    return delta, p_t


def power_proportion(
    baseline: float,
    mde: float,
    n_control: float,
    *,
    relative: bool = False,
    ratio: float = 1.0,
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> float:
    """Power of the two-proportion z-test (normal approximation, unpooled variance).

    Args: baseline -- control conversion rate in (0, 1); mde -- absolute difference in
    proportion points, or a fraction of baseline if ``relative``; n_control -- units.
    """
    _check_common(alpha, None, ratio, alternative)
    delta, p_t = _prop_args(baseline, mde, relative)
    se = math.sqrt(baseline * (1 - baseline) / n_control + p_t * (1 - p_t) / (n_control * ratio))
    return _z_power(delta / se, alpha, alternative)


def sample_size_proportion(
    baseline: float,
    mde: float,
    *,
    relative: bool = False,
    power: float = 0.8,
    alpha: float = 0.05,
    ratio: float = 1.0,
    alternative: str = "two-sided",
) -> SampleSize:
    """Units per arm to detect ``mde`` on a conversion rate (see :func:`power_proportion`)."""
    _check_common(alpha, power, ratio, alternative)
    _prop_args(baseline, mde, relative)
    if alternative == "two-sided" and mde < 0:
        pass  # sign irrelevant, variance uses p_t
    n = _solve_n(
        lambda n: power_proportion(
            baseline, mde, n, relative=relative, ratio=ratio, alpha=alpha, alternative=alternative
        ),
        power,
    )
    n_c = math.ceil(n - 1e-9)
    return SampleSize(n_c, math.ceil(n_c * ratio - 1e-9))


def mde_proportion(
    baseline: float,
    n_control: float,
    *,
    relative: bool = False,
    power: float = 0.8,
    alpha: float = 0.05,
    ratio: float = 1.0,
    alternative: str = "two-sided",
) -> float:
    """Smallest upward absolute (or relative) lift of a conversion rate detectable with
    ``power`` (downward for ``alternative="less"``).  Raises ValueError if not reachable
    within (0, 1)."""
    _check_common(alpha, power, ratio, alternative)
    sign = -1.0 if alternative == "less" else 1.0
    room = (1.0 - baseline) if sign > 0 else baseline
    hi_abs = room * (1 - 1e-9)

    def f(d_abs: float) -> float:
        return (
            power_proportion(
                baseline, sign * d_abs, n_control, ratio=ratio, alpha=alpha, alternative=alternative
            )
            - power
        )

    if f(hi_abs) < 0:
        raise ValueError("no detectable effect within the valid proportion range for this n")
    d = optimize.brentq(f, 1e-15, hi_abs, xtol=1e-14, rtol=1e-12)
    return sign * d / baseline if relative else sign * d


def mde_from_std_error(std_error: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable effect of a two-sided z-test whose estimate has ``std_error``.

    ``MDE = (z_{1-alpha/2} + z_{power}) * SE`` (Bloom 1995, "Minimum detectable effects"), in the
    units of ``std_error`` (pass the relative SE to get a relative MDE). Raises ValueError on a
    negative or non-finite SE or on alpha/power outside (0, 1).
    """
    check_args(alpha, "two-sided")
    if not (0.0 < power < 1.0):
        raise ValueError("power must be in (0, 1)")
    if not (math.isfinite(std_error) and std_error >= 0.0):
        raise ValueError("std_error must be finite and >= 0")
    return float((special.ndtri(1.0 - alpha / 2.0) + special.ndtri(power)) * std_error)


def units_for_effect(
    units_now: float, std_error: float, effect: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Total units at which ``effect`` becomes the MDE, assuming ``SE ∝ 1/sqrt(units)``.

    ``n = units_now * (mde_now / |effect|)**2`` with ``mde_now`` from :func:`mde_from_std_error`;
    ``inf`` for a zero effect. Raises ValueError on ``units_now`` <= 0.
    """
    if units_now <= 0:
        raise ValueError("units_now must be > 0")
    if effect == 0:
        return math.inf
    mde = mde_from_std_error(std_error, alpha, power)
    return float(units_now * (mde / abs(effect)) ** 2)


@dataclass(frozen=True, slots=True)
class PowerEstimate:
    """What an experiment can detect now and how many units a target effect needs.

    ``mde`` is in the units of the standard error passed (relative SE -> relative MDE);
    ``units_needed`` is a total over both arms (``inf`` for a zero target effect). ``status`` is
    ``ok``, ``no_units`` (nothing exposed yet) or ``undefined_std_error`` (the SE is missing,
    negative, NaN or infinite -- e.g. a metric with no variance or a zero control mean); both are
    ``None`` unless ``status == "ok"``.
    """

    status: str
    mde: float | None = None
    units_needed: float | None = None


def power_estimate(
    *, units_now: float, std_error: float | None, effect: float, alpha: float = 0.05, power: float = 0.8
) -> PowerEstimate:
    """:func:`mde_from_std_error` and :func:`units_for_effect` for data that may be degenerate.

    Degenerate data gives a status, never an exception; only invalid parameters (``alpha`` or
    ``power`` outside (0, 1)) raise ValueError, as in the functions it wraps.
    """
    check_args(alpha, "two-sided")
    if not (0.0 < power < 1.0):
        raise ValueError("power must be in (0, 1)")
    if not (units_now > 0 and math.isfinite(units_now)):
        return PowerEstimate("no_units")
    if std_error is None or not (math.isfinite(std_error) and std_error >= 0.0):
        return PowerEstimate("undefined_std_error")
    return PowerEstimate(
        "ok",
        mde_from_std_error(std_error, alpha, power),
        units_for_effect(units_now, std_error, effect, alpha, power),
    )
