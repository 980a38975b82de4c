"""Fixed-horizon frequentist comparison of two arms from sufficient statistics.

``compare(control, treatment)`` dispatches on the statistic type:

=========================  ===================================================
input type                 test
=========================  ===================================================
MeanStatistic              Welch's unequal-variance t-test, Welch-Satterthwaite
                           df (Welch 1947; identical to
                           ``scipy.stats.ttest_ind(equal_var=False)``)
ProportionStatistic        two-proportion z-test.  **p-value / z statistic use
                           the pooled SE** sqrt(p(1-p)(1/n_c + 1/n_t)) with
                           p = (x_c + x_t)/(n_c + n_t) (the null-hypothesis SE;
                           same as ``statsmodels proportions_ztest`` default).
                           **Intervals are valid at 0 and n successes**: the
                           absolute CI is Newcombe's hybrid score interval and
                           the relative CI the MOVER-R interval of the ratio,
                           both from each arm's Wilson interval (see
                           :mod:`analytics.stats.proportions`); the relative
                           p-value is the one dual to both intervals.  The
                           pooled z p-value and the Newcombe interval can
                           disagree about significance in rare borderline
                           cases (``std_error`` stays the unpooled Wald SE,
                           for power calculations).
RatioStatistic             delta-method variance of each arm's ratio (Deng et
                           al. 2018), then Welch t with Welch-Satterthwaite df
                           on the delta-method variances (as GrowthBook gbstats)
CovariateStatistic         CUPED / regression adjustment, see
                           :mod:`analytics.stats.cuped`
QuantileStatistic          z-test on the difference of two quantiles with
                           Woodruff / delta-method standard errors clustered
                           by unit, see :mod:`analytics.stats.quantiles`
=========================  ===================================================

Relative lift ``(mean_t - mean_c)/|mean_c|`` and its CI come from the delta method on
the ratio of the two means (Deng, Knoblich, Lu 2018, "Applying the Delta Method in
Metric Analytics", KDD 2018, section 4.1) -- not from rescaling the absolute CI.
"""

from __future__ import annotations

import math

from . import _core, proportions
from .quantiles import QuantileStatistic
from .results import ComparisonResult, IntervalMethod, RelativeStatus, Status
from .statistics import CovariateStatistic, MeanStatistic, ProportionStatistic, RatioStatistic

__all__ = ["compare", "ComparisonResult"]


def compare(
    control: MeanStatistic | ProportionStatistic | RatioStatistic | CovariateStatistic,
    treatment: MeanStatistic | ProportionStatistic | RatioStatistic | CovariateStatistic,
    *,
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> ComparisonResult:
    """Compare ``treatment`` against ``control`` (fixed-horizon, frequentist).

    Args:
        control, treatment: sufficient statistics of the same type (see module table).
        alpha: significance level in (0, 1); CIs have coverage ``1 - alpha``
            (one-sided CIs for one-sided alternatives).
        alternative: ``"two-sided"``, ``"greater"`` (H1: treatment mean > control mean)
            or ``"less"``.

    Returns:
        :class:`ComparisonResult` (``interval_method`` / ``relative_interval_method`` name how
        its intervals were built).  Degenerate data never raises and never yields NaN:
        ``status`` is ``"insufficient_data"`` (an arm with < 2 units),
        ``"zero_variance"`` (both arms constant, different values),
        ``"constant_identical"`` (both arms constant, same value) or
        ``"ratio_denominator_zero"``; undefined fields are None.  Proportions are never
        "constant": an arm with 0 or n successes still has binomial uncertainty, and gets
        ``status="ok"`` with intervals valid at the boundary.  The relative lift is
        suppressed (``relative_status`` != "ok", with ``reason``) when the control mean
        is 0 or not distinguishable from 0.

    Raises:
        ValueError: mismatched statistic types, alpha outside (0, 1), unknown alternative.
        TypeError: unsupported statistic type.
    """
    _core.check_args(alpha, alternative)
    if type(control) is not type(treatment):
        raise ValueError(
            f"control and treatment must be the same statistic type, got "
            f"{type(control).__name__} and {type(treatment).__name__}"
        )
    if isinstance(control, MeanStatistic):
        return _core.infer(
            method="welch_t",
            alpha=alpha,
            alternative=alternative,
            n_c=control.n,
            mean_c=control.mean,
            var_c=control.variance,
            n_t=treatment.n,
            mean_t=treatment.mean,
            var_t=treatment.variance,
            use_t=True,
        )
    if isinstance(control, ProportionStatistic):
        return _compare_proportions(control, treatment, alpha, alternative)
    if isinstance(control, RatioStatistic):
        return _compare_ratios(control, treatment, alpha, alternative)
    if isinstance(control, QuantileStatistic):
        if control.q != treatment.q:
            raise ValueError(f"quantile levels differ: control q={control.q}, treatment q={treatment.q}")
        # Woodruff / delta-method standard errors (analytics.stats.quantiles), normal z-test; the
        # relative lift's interval is the delta method on the ratio of the two quantiles.
        return _core.infer(
            method="quantile_woodruff_z",
            alpha=alpha,
            alternative=alternative,
            n_c=control.n,
            mean_c=control.mean,
            var_c=control.variance,
            n_t=treatment.n,
            mean_t=treatment.mean,
            var_t=treatment.variance,
            use_t=False,
            extra={"q": control.q, "control_obs": control.n_obs, "treatment_obs": treatment.n_obs},
        )
    if isinstance(control, CovariateStatistic):
        from .cuped import compare_cuped

        return compare_cuped(control, treatment, alpha=alpha, alternative=alternative)
    raise TypeError(f"unsupported statistic type {type(control).__name__}")


def _compare_proportions(
    c: ProportionStatistic, t: ProportionStatistic, alpha: float, alternative: str
) -> ComparisonResult:
    """Two-proportion comparison with intervals valid at 0 and n successes (see the module table)."""
    if c.n < 2 or t.n < 2:
        return _core.infer(
            method="two_proportion_z",
            alpha=alpha,
            alternative=alternative,
            n_c=c.n,
            mean_c=c.mean,
            var_c=c.variance,
            n_t=t.n,
            mean_t=t.mean,
            var_t=t.variance,
            use_t=False,
        )
    x_c, n_c, x_t, n_t = c.sum, c.n, t.sum, t.n
    p_c, p_t = c.mean, t.mean
    diff = p_t - p_c
    pooled = (x_c + x_t) / (n_c + n_t)
    pooled_var = pooled * (1.0 - pooled) * (1.0 / n_c + 1.0 / n_t)
    # both arms all 0 or all 1: the data are exactly the null hypothesis (z = 0, p = 1 two-sided)
    stat = diff / math.sqrt(pooled_var) if pooled_var > 0 else 0.0
    z = _core.critical_value(alpha, None, alternative)
    low, high = proportions.newcombe(x_c, n_c, x_t, n_t, z)
    abs_ci = (
        low if alternative != "less" else -math.inf,
        high if alternative != "greater" else math.inf,
    )
    rel: dict = {"relative_status": RelativeStatus.CONTROL_MEAN_ZERO}
    if x_c > 0:
        r_low, r_high = proportions.mover_r(x_c, n_c, x_t, n_t, z)
        var_rel = t.variance / (n_t * p_c**2) + p_t**2 * c.variance / (n_c * p_c**4)
        rel = {
            "relative_status": RelativeStatus.OK,
            "relative_lift": diff / p_c,
            "relative_ci": (
                float(r_low) - 1.0 if alternative != "less" else -math.inf,
                float(r_high) - 1.0 if alternative != "greater" else math.inf,
            ),
            "relative_std_error": math.sqrt(var_rel) if var_rel > 0 else None,
            "relative_p_value": _core.p_value_from_stat(
                proportions.newcombe_z(x_c, n_c, x_t, n_t), None, alternative
            ),
            "relative_interval_method": IntervalMethod.MOVER_R,
        }
    return ComparisonResult(
        status=Status.OK,
        reason=_core.REL_REASON.get(rel["relative_status"]),
        method="two_proportion_z",
        alternative=alternative,
        alpha=float(alpha),
        control_n=n_c,
        treatment_n=n_t,
        control_mean=p_c,
        treatment_mean=p_t,
        absolute_lift=diff,
        absolute_ci=abs_ci,
        std_error=math.sqrt(c.variance / n_c + t.variance / n_t),
        p_value=_core.p_value_from_stat(stat, None, alternative),
        statistic=stat,
        interval_method=IntervalMethod.NEWCOMBE,
        **rel,
    )


def _compare_ratios(c: RatioStatistic, t: RatioStatistic, alpha: float, alternative: str) -> ComparisonResult:
    if c.n >= 2 and t.n >= 2 and (c.d.sum == 0 or t.d.sum == 0):
        return ComparisonResult(
            status=Status.RATIO_DENOMINATOR_ZERO,
            reason="the ratio's denominator sums to 0 in "
            + ("both arms" if c.d.sum == 0 and t.d.sum == 0 else "control" if c.d.sum == 0 else "treatment"),
            method="ratio_delta_t",
            alternative=alternative,
            alpha=float(alpha),
            control_n=c.n,
            treatment_n=t.n,
            control_mean=None if c.d.sum == 0 else c.mean,
            treatment_mean=None if t.d.sum == 0 else t.mean,
        )
    return _core.infer(
        method="ratio_delta_t",
        alpha=alpha,
        alternative=alternative,
        n_c=c.n,
        mean_c=c.mean if c.d.sum != 0 else math.nan,
        var_c=c.variance,
        n_t=t.n,
        mean_t=t.mean if t.d.sum != 0 else math.nan,
        var_t=t.variance,
        use_t=True,
    )
