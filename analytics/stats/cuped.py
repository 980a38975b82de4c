"""CUPED / regression adjustment with a pre-exposure covariate.

Reference: Deng, Xu, Kohavi, Walker (2013), "Improving the Sensitivity of Online
Controlled Experiments by Utilizing Pre-Experiment Data", WSDM (CUPED).  The adjusted
outcome is ``Y_cv = Y - theta (X - E[X])`` with ``theta = cov(X, Y) / var(X)``.

Choice of theta: a single theta **pooled across arms from within-arm moments**,
``theta = (S_xy,c + S_xy,t) / (S_xx,c + S_xx,t)`` with ``S`` the centred sums.  This
is exactly the OLS coefficient of ``x`` in ``y ~ 1 + treatment + x`` (ANCOVA; Lin 2013
shows it is consistent in randomised experiments), so the adjusted difference in means
equals the OLS treatment coefficient.  Using one theta for both arms keeps the
estimator unbiased for the treatment effect (Deng et al. 2013, section 3.2).  It is
shift-invariant: adding a constant to ``x`` or ``y`` changes neither theta nor the
adjusted difference.

Per-arm adjusted variance (per unit, ddof=1): ``var(y) + theta^2 var(x) - 2 theta
cov(x, y)``; theta is treated as known (standard CUPED practice, also GrowthBook's
``RegressionAdjustedStatistic``).  Inference is then Welch's t on the adjusted means.
Adjusted arm means are ``ybar_a - theta (xbar_a - xbar_pooled)``, so they stay on the
metric's scale.

Covariate balance (a pre-period A/A check) before adjusting.  The adjustment moves the effect by
``theta (xbar_t - xbar_c)``.  Under randomisation the pre-period covariate has the same
distribution in both arms, so that term is noise; when the covariate was not measured alike in
the two arms (missing for one arm and stored as 0, a lookback window that overlaps exposure in
one arm...), it is a bias that CUPED would add to the effect (a 0.2 difference, p 0.32, became
11.3 with p ~ 1e-175).  So the covariate is tested first, and the unadjusted Welch result is
reported instead -- with ``cuped_status`` and a ``warning`` saying why -- when:

* the covariate is constant in one arm while it varies in the other (``covariate_missing``;
  no pre-period information in that arm), or
* Welch's two-sample t-test of the covariate means between arms (Welch 1947; the same test as
  the metric's) gives ``p < balance_alpha`` (``covariate_imbalanced``).  The default 0.001 is
  the deliberately conservative threshold experimentation platforms use for such health checks
  (the sample-ratio check here, Microsoft ExP; Statsig's pre-experiment bias check runs the
  standard test on the pre-experiment window and flags only strong differences,
  https://docs.statsig.com/experiments/statistical-methods/pre-experiment-bias), so a correctly
  randomised experiment loses CUPED for a metric about once in a thousand comparisons (Kohavi,
  Tang & Xu 2020, "Trustworthy Online Controlled Experiments", ch. 3 and 21, on retrospective
  A/A checks of the pre-period).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from . import _core
from .results import ComparisonResult, CupedStatus
from .statistics import CovariateStatistic

__all__ = ["BALANCE_ALPHA", "covariate_balance", "cuped_theta", "compare_cuped"]

#: CUPED is not applied when the covariate balance test gives p below this.
BALANCE_ALPHA = 0.001


def _centred(s: CovariateStatistic) -> tuple[float, float, float]:
    """(S_xx, S_xy, S_yy) centred sums for one arm (0 when n == 0)."""
    if s.n == 0:
        return 0.0, 0.0, 0.0
    sxx = max(s.sum_x2 - s.sum_x * s.sum_x / s.n, 0.0)
    syy = max(s.sum_y2 - s.sum_y * s.sum_y / s.n, 0.0)
    sxy = s.sum_xy - s.sum_x * s.sum_y / s.n
    return sxx, sxy, syy


def cuped_theta(control: CovariateStatistic, treatment: CovariateStatistic) -> float:
    """Pooled within-arm CUPED coefficient ``sum S_xy / sum S_xx`` (0.0 if x is constant).

    Equals the OLS coefficient of x in ``y ~ 1 + treatment + x``.
    """
    cxx, cxy, _ = _centred(control)
    txx, txy, _ = _centred(treatment)
    sxx = cxx + txx
    if sxx <= 0.0:
        return 0.0
    return (cxy + txy) / sxx


def covariate_balance(control: CovariateStatistic, treatment: CovariateStatistic) -> dict[str, Any]:
    """Welch's two-sample t-test of the pre-period covariate between arms (each arm ``n >= 2``).

    Returns ``{"control_mean", "treatment_mean", "statistic", "df", "p_value", "constant_in"}``:
    ``constant_in`` names the arm(s) whose covariate has no variation ("control", "treatment",
    "both" or None); with both arms constant the test is undefined (``p_value`` None; CUPED's
    theta is then 0 and the adjustment changes nothing).
    """
    xc, xt = control.x, treatment.x
    zc = _core.is_zero_var(xc.variance, xc.mean)
    zt = _core.is_zero_var(xt.variance, xt.mean)
    out: dict[str, Any] = {
        "control_mean": xc.mean,
        "treatment_mean": xt.mean,
        "statistic": None,
        "df": None,
        "p_value": None,
        "constant_in": "both" if zc and zt else "control" if zc else "treatment" if zt else None,
    }
    if zc and zt:
        return out
    vc, vt = (0.0 if zc else xc.variance), (0.0 if zt else xt.variance)
    stat = (xt.mean - xc.mean) / math.sqrt(vc / xc.n + vt / xt.n)
    df = _core.welch_df(vc, xc.n, vt, xt.n)
    out.update(statistic=stat, df=df, p_value=_core.p_value_from_stat(stat, df, "two-sided"))
    return out


def compare_cuped(
    control: CovariateStatistic,
    treatment: CovariateStatistic,
    *,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    theta: float | None = None,
    balance_alpha: float = BALANCE_ALPHA,
) -> ComparisonResult:
    """Regression-adjusted (CUPED) Welch comparison, after a covariate balance check.

    Args:
        control, treatment: :class:`CovariateStatistic` per arm.
        alpha, alternative: as :func:`analytics.stats.compare`.
        theta: override the adjustment coefficient (default: :func:`cuped_theta`).
        balance_alpha: the covariate balance test's threshold (see the module docstring).

    Returns:
        :class:`ComparisonResult`.  Applied (``cuped_status="applied"``): ``method=
        "cuped_welch_t"``, adjusted ``control_mean``/``treatment_mean``, ``theta`` and
        ``variance_reduction`` = ``1 - Var_adj(lift) / Var_unadj(lift)`` (fraction; None when
        undefined).  Not applied (``covariate_missing`` / ``covariate_imbalanced``): the
        unadjusted Welch result (``method="welch_t"``) with a ``warning`` saying why.
        ``extra`` holds the unadjusted means and standard error and ``covariate_balance``
        (:func:`covariate_balance`).

    Raises:
        ValueError: bad alpha/alternative/balance_alpha or non-CovariateStatistic inputs.
    """
    _core.check_args(alpha, alternative)
    if not 0.0 < balance_alpha < 1.0:
        raise ValueError(f"balance_alpha must be in (0, 1), got {balance_alpha!r}")
    if not isinstance(control, CovariateStatistic) or not isinstance(treatment, CovariateStatistic):
        raise ValueError("compare_cuped expects two CovariateStatistic instances")
    common = {"method": "cuped_welch_t", "alpha": alpha, "alternative": alternative, "use_t": True}
    if control.n < 2 or treatment.n < 2:
        return _core.infer(
            n_c=control.n,
            mean_c=control.mean,
            var_c=float("nan"),
            n_t=treatment.n,
            mean_t=treatment.mean,
            var_t=float("nan"),
            **common,
        )
    balance = covariate_balance(control, treatment)
    refused = _refusal(balance, balance_alpha)
    if refused is not None:
        status, warning = refused
        unadjusted = _core.infer(
            method="welch_t",
            alpha=alpha,
            alternative=alternative,
            use_t=True,
            n_c=control.n,
            mean_c=control.y.mean,
            var_c=control.y.variance,
            n_t=treatment.n,
            mean_t=treatment.y.mean,
            var_t=treatment.y.variance,
        )
        return dataclasses.replace(
            unadjusted,
            cuped_status=status,
            warning=warning,
            extra={
                "unadjusted_control_mean": control.y.mean,
                "unadjusted_treatment_mean": treatment.y.mean,
                "unadjusted_std_error": unadjusted.std_error,
                "covariate_balance": balance,
            },
        )
    th = cuped_theta(control, treatment) if theta is None else float(theta)
    x_pooled = (control.sum_x + treatment.sum_x) / (control.n + treatment.n)

    def adjusted(s: CovariateStatistic) -> tuple[float, float, float, float]:
        sxx, sxy, syy = _centred(s)
        vy = syy / (s.n - 1)
        v_adj = max((syy + th * th * sxx - 2.0 * th * sxy) / (s.n - 1), 0.0)
        mean_adj = s.sum_y / s.n - th * (s.sum_x / s.n - x_pooled)
        return mean_adj, v_adj, s.sum_y / s.n, vy

    mc, vc, mc_raw, vc_raw = adjusted(control)
    mt, vt, mt_raw, vt_raw = adjusted(treatment)
    se2_raw = vc_raw / control.n + vt_raw / treatment.n
    se2_adj = vc / control.n + vt / treatment.n
    vr = 1.0 - se2_adj / se2_raw if se2_raw > 0 else None
    adjusted_result = _core.infer(
        n_c=control.n,
        mean_c=mc,
        var_c=vc,
        n_t=treatment.n,
        mean_t=mt,
        var_t=vt,
        theta=th,
        variance_reduction=vr,
        extra={
            "unadjusted_control_mean": mc_raw,
            "unadjusted_treatment_mean": mt_raw,
            "unadjusted_std_error": se2_raw**0.5,
            "covariate_balance": balance,
        },
        **common,
    )
    return dataclasses.replace(adjusted_result, cuped_status=CupedStatus.APPLIED)


def _refusal(balance: dict[str, Any], balance_alpha: float) -> tuple[str, str] | None:
    """``(cuped_status, warning)`` when the covariate must not be used, else None."""
    arm = balance["constant_in"]
    if arm in ("control", "treatment"):
        return (
            CupedStatus.COVARIATE_MISSING,
            f"CUPED not applied: the pre-period covariate is constant in the {arm} arm (missing?) "
            "while it varies in the other; showing the unadjusted result",
        )
    p = balance["p_value"]
    if p is not None and p < balance_alpha:
        return (
            CupedStatus.COVARIATE_IMBALANCED,
            f"CUPED not applied: the pre-period covariate differs between arms (Welch t-test "
            f"p={p:.2g} < {balance_alpha:g}: mean {balance['control_mean']:.4g} in control, "
            f"{balance['treatment_mean']:.4g} in treatment); showing the unadjusted result",
        )
    return None
