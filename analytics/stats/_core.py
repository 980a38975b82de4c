"""Scalar inference kernel shared by the frequentist, ratio and CUPED comparisons.

Internal module: everything is expressed with per-arm ``(n, mean, per-unit variance)``
so that the same code serves means, proportions, delta-method ratios and
regression-adjusted (CUPED) means.  Uses ``math`` and ``scipy.special`` ufuncs only on
Python floats (far cheaper than ``scipy.stats`` distribution objects).
"""

from __future__ import annotations

import math
from typing import Any

from scipy import special

from .results import ComparisonResult, IntervalMethod, RelativeStatus, Status

ALTERNATIVES = ("two-sided", "greater", "less")

#: An arm's variance is treated as exactly 0 when var <= ZERO_VAR_RTOL * mean^2, i.e.
#: sd <= 1e-7 |mean|.  Variances derived from (sum, sum_squares) carry a cancellation
#: error of order 1e-16 * mean^2, so smaller values are indistinguishable from a
#: constant sample.
ZERO_VAR_RTOL = 1e-14
#: relative tolerance for "control mean is zero" (vs. the scale of the data).
ZERO_MEAN_RTOL = 1e-12


def check_args(alpha: float, alternative: str) -> None:
    if not isinstance(alpha, int | float) or not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be a float in (0, 1), got {alpha!r}")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")


def t_cdf(x: float, df: float | None) -> float:
    """CDF of Student t (``df``) or standard normal (``df is None``)."""
    return float(special.ndtr(x)) if df is None else float(special.stdtr(df, x))


def t_ppf(q: float, df: float | None) -> float:
    return float(special.ndtri(q)) if df is None else float(special.stdtrit(df, q))


def welch_df(var_c: float, n_c: int, var_t: float, n_t: int) -> float:
    """Welch-Satterthwaite degrees of freedom (Welch 1947; scipy ``_unequal_var_ttest_denom``).

    Computed on the shares ``a / (a + b)``, ``b / (a + b)`` of the squared standard error, so tiny
    variances (1e-174: their squares underflow to 0) give the same df as their scaled-up values."""
    a = var_c / n_c
    b = var_t / n_t
    ra, rb = a / (a + b), b / (a + b)
    return 1.0 / (ra * ra / (n_c - 1) + rb * rb / (n_t - 1))


def p_value_from_stat(stat: float, df: float | None, alternative: str) -> float:
    if alternative == "two-sided":
        return min(1.0, 2.0 * t_cdf(-abs(stat), df))
    if alternative == "greater":
        return t_cdf(-stat, df)
    return t_cdf(stat, df)


def ci(est: float, se: float, crit: float, alternative: str) -> tuple[float, float]:
    if alternative == "two-sided":
        return (est - crit * se, est + crit * se)
    if alternative == "greater":
        return (est - crit * se, math.inf)
    return (-math.inf, est + crit * se)


def critical_value(alpha: float, df: float | None, alternative: str) -> float:
    q = 1.0 - alpha / 2.0 if alternative == "two-sided" else 1.0 - alpha
    return t_ppf(q, df)


def is_zero_var(var: float, mean: float) -> bool:
    return var <= ZERO_VAR_RTOL * mean * mean


def relative_moments(
    n_c: int, mean_c: float, var_c: float, n_t: int, mean_t: float, var_t: float, crit2: float
) -> tuple[str, float | None, float | None]:
    """Relative lift ``(mean_t - mean_c)/|mean_c|`` and its delta-method SE.

    Var(mean_t/mean_c) ~= var_t/(n_t mu_c^2) + mu_t^2 var_c/(n_c mu_c^4)
    (Deng, Knoblich, Lu 2018, "Applying the Delta Method in Metric Analytics", KDD,
    eq. for the percent change; also GrowthBook ``TTest.variance``).  The arms are
    independent, so there is no covariance term.  Dividing by |mu_c| keeps the sign of
    the absolute difference for negative control means; the variance is unchanged.

    ``crit2`` is the two-sided critical value used for Fieller's g check. A variance of 0 (the
    treatment arm constant at 0, e.g. 5/1000 vs 0/1000) gives status ``zero_width_interval``:
    the lift is reported, its SE, CI and p-value are not.
    Returns (relative_status, relative_lift, relative_se).
    """
    scale = max(abs(mean_c), abs(mean_t), math.sqrt(max(var_c, 0.0)), math.sqrt(max(var_t, 0.0)))
    if mean_c == 0.0 or abs(mean_c) <= ZERO_MEAN_RTOL * scale:
        return RelativeStatus.CONTROL_MEAN_ZERO, None, None
    se_c2 = var_c / n_c
    # Fieller (1954): g >= 1  <=>  the control mean is not significantly != 0 and the
    # confidence set for the ratio is unbounded.
    if crit2 * crit2 * se_c2 >= mean_c * mean_c:
        return RelativeStatus.CONTROL_MEAN_NEAR_ZERO, None, None
    # the same sum, each variance divided by |mu_c| twice and the mean ratio squared, so that no
    # power of a tiny control mean (|mu_c| ~1e-100: mu_c^4 is 0.0 in floats) is ever formed
    m, ratio = abs(mean_c), mean_t / mean_c
    var_rel = var_t / n_t / m / m + ratio * ratio * (var_c / n_c / m / m)
    rel = (mean_t - mean_c) / m
    if not (math.isfinite(var_rel) and var_rel > 0.0) or not math.isfinite(rel):
        return RelativeStatus.ZERO_WIDTH, rel if math.isfinite(rel) else None, None
    return RelativeStatus.OK, rel, math.sqrt(var_rel)


REL_REASON = {
    RelativeStatus.CONTROL_MEAN_ZERO: "relative lift suppressed: control mean is 0",
    RelativeStatus.CONTROL_MEAN_NEAR_ZERO: (
        "relative lift suppressed: control mean is not distinguishable from 0 "
        "(Fieller g >= 1), the ratio's confidence set is unbounded"
    ),
    RelativeStatus.ZERO_WIDTH: (
        "relative interval suppressed: its delta-method standard error is 0 (an arm is constant), "
        "and a zero-width interval is not a valid inference"
    ),
}


def infer(
    *,
    method: str,
    alpha: float,
    alternative: str,
    n_c: int,
    mean_c: float,
    var_c: float,
    n_t: int,
    mean_t: float,
    var_t: float,
    use_t: bool,
    theta: float | None = None,
    variance_reduction: float | None = None,
    extra: dict[str, Any] | None = None,
) -> ComparisonResult:
    """Core Welch / z inference from per-arm (n, mean, per-unit variance).

    * SE of the difference: sqrt(var_c/n_c + var_t/n_t) (unpooled).
    * ``use_t``: Student t with Welch-Satterthwaite df; otherwise standard normal.
    * Proportions have their own path (:func:`analytics.stats.frequentist._compare_proportions`:
      pooled z-test, intervals valid at the boundary); here they only get the n < 2 status.
    """
    base: dict[str, Any] = {
        "method": method,
        "alternative": alternative,
        "alpha": float(alpha),
        "control_n": int(n_c),
        "treatment_n": int(n_t),
        "theta": theta,
        "variance_reduction": variance_reduction,
        "extra": extra,
    }
    if n_c < 2 or n_t < 2:
        means: dict[str, Any] = {
            "control_mean": mean_c if n_c >= 1 and math.isfinite(mean_c) else None,
            "treatment_mean": mean_t if n_t >= 1 and math.isfinite(mean_t) else None,
        }
        if means["control_mean"] is not None and means["treatment_mean"] is not None:
            means["absolute_lift"] = mean_t - mean_c
        return ComparisonResult(
            status=Status.INSUFFICIENT_DATA,
            reason=f"each arm needs at least 2 units (control n={n_c}, treatment n={n_t})",
            **means,
            **base,
        )

    zc = is_zero_var(var_c, mean_c)
    zt = is_zero_var(var_t, mean_t)
    var_c = 0.0 if zc else var_c
    var_t = 0.0 if zt else var_t
    diff = mean_t - mean_c
    if zc and zt:
        same = math.isclose(mean_c, mean_t, rel_tol=1e-12, abs_tol=0.0)
        return ComparisonResult(
            status=Status.CONSTANT_IDENTICAL if same else Status.ZERO_VARIANCE,
            reason=(
                "both arms are constant with the same value: no variation to test"
                if same
                else "both arms have zero variance: the difference is deterministic, "
                "no p-value or confidence interval"
            ),
            control_mean=mean_c,
            treatment_mean=mean_t,
            absolute_lift=0.0 if same else diff,
            std_error=0.0,
            **base,
        )

    se2 = var_c / n_c + var_t / n_t
    se = math.sqrt(se2)
    df = welch_df(var_c, n_c, var_t, n_t) if use_t else None
    stat = diff / se
    p = p_value_from_stat(stat, df, alternative)
    crit = critical_value(alpha, df, alternative)
    abs_ci = ci(diff, se, crit, alternative)

    crit2 = crit if alternative == "two-sided" else critical_value(alpha, df, "two-sided")
    rel_status, rel, rel_se = relative_moments(n_c, mean_c, var_c, n_t, mean_t, var_t, crit2)
    rel_ci = rel_p = None
    if rel is not None and rel_se is not None:
        rel_ci = ci(rel, rel_se, crit, alternative)
        rel_p = p_value_from_stat(rel / rel_se, df, alternative)
    return ComparisonResult(
        status=Status.OK,
        reason=REL_REASON.get(rel_status),
        control_mean=mean_c,
        treatment_mean=mean_t,
        absolute_lift=diff,
        absolute_ci=abs_ci,
        std_error=se,
        relative_lift=rel,
        relative_ci=rel_ci,
        relative_std_error=rel_se,
        relative_status=rel_status,
        p_value=p,
        relative_p_value=rel_p,
        statistic=stat,
        df=df,
        interval_method=IntervalMethod.WALD,
        relative_interval_method=IntervalMethod.DELTA if rel_ci is not None else None,
        **base,
    )
