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
"""

from __future__ import annotations

from . import _core
from .results import ComparisonResult
from .statistics import CovariateStatistic

__all__ = ["cuped_theta", "compare_cuped"]


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


def compare_cuped(
    control: CovariateStatistic,
    treatment: CovariateStatistic,
    *,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    theta: float | None = None,
) -> ComparisonResult:
    """Regression-adjusted (CUPED) Welch comparison.

    Args:
        control, treatment: :class:`CovariateStatistic` per arm.
        alpha, alternative: as :func:`analytics.stats.compare`.
        theta: override the adjustment coefficient (default: :func:`cuped_theta`).

    Returns:
        :class:`ComparisonResult` with ``method="cuped_welch_t"``, adjusted
        ``control_mean``/``treatment_mean``, ``theta`` and ``variance_reduction`` =
        ``1 - Var_adj(lift) / Var_unadj(lift)`` (fraction; None when undefined).
        ``extra`` holds the unadjusted means and the unadjusted standard error.

    Raises:
        ValueError: bad alpha/alternative or non-CovariateStatistic inputs.
    """
    _core.check_args(alpha, alternative)
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
    return _core.infer(
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
        },
        **common,
    )
