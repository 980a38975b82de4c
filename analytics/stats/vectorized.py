"""Vectorised comparisons over arrays of sufficient statistics.

``compare_many`` evaluates many metric x variant comparisons at once with numpy
ufuncs (no Python loop over rows), using exactly the formulas of
:func:`analytics.stats.compare` (Welch t and delta-method relative lift for means; for
proportions the pooled two-proportion z-test with Newcombe / MOVER-R intervals and the relative
p-value dual to them), and the same edge-case statuses.  Results agree with the
scalar path to floating-point rounding (see ``tests/analytics/test_stats_vectorized.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from . import proportions
from ._core import ZERO_MEAN_RTOL, ZERO_VAR_RTOL, check_args
from .results import ComparisonResult, IntervalMethod, RelativeStatus, Status

__all__ = ["compare_many", "ManyComparisonResult"]

_REASONS = {
    Status.INSUFFICIENT_DATA: "each arm needs at least 2 units",
    Status.ZERO_VARIANCE: "both arms have zero variance: the difference is deterministic, "
    "no p-value or confidence interval",
    Status.CONSTANT_IDENTICAL: "both arms are constant with the same value: no variation to test",
    RelativeStatus.CONTROL_MEAN_ZERO: "relative lift suppressed: control mean is 0",
    RelativeStatus.CONTROL_MEAN_NEAR_ZERO: "relative lift suppressed: control mean is not "
    "distinguishable from 0 (Fieller g >= 1), the ratio's confidence set is unbounded",
    RelativeStatus.ZERO_WIDTH: "relative interval suppressed: its delta-method standard error is 0 "
    "(an arm is constant), and a zero-width interval is not a valid inference",
}


@dataclass(frozen=True)
class ManyComparisonResult:
    """Column-oriented results of :func:`compare_many`; every array has shape ``(k,)``.

    Float arrays hold NaN where a value is undefined for that row's ``status`` /
    ``relative_status`` (use :meth:`to_results` or :meth:`to_dicts` for None-based,
    JSON-safe rows).  One-sided CIs have +/-inf at the open end.
    """

    method: str
    alternative: str
    alpha: float
    #: how each row's intervals were built (:class:`IntervalMethod`; rows without one get None).
    interval_method: str
    relative_interval_method: str
    status: np.ndarray  # str
    relative_status: np.ndarray  # str
    control_n: np.ndarray
    treatment_n: np.ndarray
    control_mean: np.ndarray
    treatment_mean: np.ndarray
    absolute_lift: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    std_error: np.ndarray
    relative_lift: np.ndarray
    relative_ci_low: np.ndarray
    relative_ci_high: np.ndarray
    relative_std_error: np.ndarray
    p_value: np.ndarray
    relative_p_value: np.ndarray
    statistic: np.ndarray
    df: np.ndarray

    def __len__(self) -> int:
        return int(self.status.shape[0])

    def result(self, i: int) -> ComparisonResult:
        """Row ``i`` as a :class:`ComparisonResult` (NaN -> None)."""

        def f(a: np.ndarray) -> float | None:
            v = float(a[i])
            return None if np.isnan(v) else v

        st, rs = str(self.status[i]), str(self.relative_status[i])
        ok = st == Status.OK
        rel_ok = rs == RelativeStatus.OK
        return ComparisonResult(
            status=st,
            method=self.method,
            alternative=self.alternative,
            alpha=self.alpha,
            control_n=int(self.control_n[i]),
            treatment_n=int(self.treatment_n[i]),
            control_mean=f(self.control_mean),
            treatment_mean=f(self.treatment_mean),
            absolute_lift=f(self.absolute_lift),
            absolute_ci=(float(self.ci_low[i]), float(self.ci_high[i])) if ok else None,
            std_error=f(self.std_error),
            relative_lift=f(self.relative_lift) if rel_ok or rs == RelativeStatus.ZERO_WIDTH else None,
            relative_ci=(float(self.relative_ci_low[i]), float(self.relative_ci_high[i])) if rel_ok else None,
            relative_std_error=f(self.relative_std_error) if rel_ok else None,
            relative_status=rs,
            p_value=f(self.p_value),
            relative_p_value=f(self.relative_p_value) if rel_ok else None,
            statistic=f(self.statistic),
            df=f(self.df),
            reason=_REASONS.get(st) if not ok else _REASONS.get(rs),
            interval_method=self.interval_method if ok else None,
            relative_interval_method=self.relative_interval_method if rel_ok else None,
        )

    def to_results(self) -> list[ComparisonResult]:
        return [self.result(i) for i in range(len(self))]

    def to_dicts(self) -> list[dict]:
        """JSON-safe rows (never NaN/inf)."""
        return [r.to_dict() for r in self.to_results()]


def _arr(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN/inf)")
    return a


def _arm(kind: str, prefix: str, n, s, ss) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = _arr(f"{prefix}_n", n)
    s = _arr(f"{prefix}_sum", s)
    if np.any(n < 0) or np.any(n != np.floor(n)):
        raise ValueError(f"{prefix}_n must be non-negative integers")
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, s / np.where(n > 0, n, 1.0), np.nan)
        if kind == "proportion":
            if np.any(s < 0) or np.any(s > n):
                raise ValueError(f"{prefix}_sum must be in [0, {prefix}_n]")
            var = mean * (1.0 - mean)
        else:
            if ss is None:
                raise ValueError(f"{prefix}_sum_squares is required for kind='mean'")
            ss = _arr(f"{prefix}_sum_squares", ss)
            nn = np.where(n > 0, n, 1.0)
            css = ss - s * s / nn
            tol = 1e-9 * np.maximum(np.maximum(ss, s * s / nn), 1e-300)
            if np.any(ss < 0) or np.any(css < -tol):
                raise ValueError(f"{prefix}_sum_squares inconsistent with {prefix}_sum (must be >= sum**2/n)")
            var = np.where(n > 1, np.maximum(css, 0.0) / np.where(n > 1, n - 1.0, 1.0), np.nan)
    return n, mean, var


def compare_many(
    *,
    control_n,
    control_sum,
    treatment_n,
    treatment_sum,
    control_sum_squares=None,
    treatment_sum_squares=None,
    kind: str = "mean",
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> ManyComparisonResult:
    """Vectorised :func:`analytics.stats.compare` for k comparisons at once.

    Args:
        control_n, control_sum, treatment_n, treatment_sum: array-likes broadcastable to
            a common 1-D shape ``(k,)`` (scalars allowed).
        control_sum_squares, treatment_sum_squares: required for ``kind="mean"``.
        kind: ``"mean"`` (Welch t, Welch-Satterthwaite df) or ``"proportion"``
            (two-proportion z with the pooled SE for the statistic/p-value; Newcombe and
            MOVER-R intervals, valid with 0 or n successes, see :mod:`analytics.stats.proportions`).
        alpha, alternative: as :func:`analytics.stats.compare`.

    Returns:
        :class:`ManyComparisonResult` (column arrays).

    Raises:
        ValueError: unknown kind, NaN/inf inputs, negative or non-integer n,
        inconsistent sums (same rules as the scalar dataclasses).
    """
    check_args(alpha, alternative)
    if kind not in ("mean", "proportion"):
        raise ValueError(f"kind must be 'mean' or 'proportion', got {kind!r}")
    n_c, m_c, v_c = _arm(kind, "control", control_n, control_sum, control_sum_squares)
    n_t, m_t, v_t = _arm(kind, "treatment", treatment_n, treatment_sum, treatment_sum_squares)
    n_c, m_c, v_c, n_t, m_t, v_t = (
        np.atleast_1d(a) for a in np.broadcast_arrays(n_c, m_c, v_c, n_t, m_t, v_t)
    )
    if n_c.ndim != 1:
        raise ValueError("inputs must broadcast to a 1-D shape")
    if kind == "proportion":
        x_c = np.broadcast_to(_arr("control_sum", control_sum), n_c.shape)
        x_t = np.broadcast_to(_arr("treatment_sum", treatment_sum), n_c.shape)
        return _many_proportions(n_c, x_c, v_c, n_t, x_t, v_t, alpha, alternative)
    two = alternative == "two-sided"

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        insufficient = (n_c < 2) | (n_t < 2)
        zc = v_c <= ZERO_VAR_RTOL * m_c * m_c
        zt = v_t <= ZERO_VAR_RTOL * m_t * m_t
        v_c = np.where(zc, 0.0, v_c)
        v_t = np.where(zt, 0.0, v_t)
        both_zero = zc & zt & ~insufficient
        same = np.abs(m_t - m_c) <= 1e-12 * np.maximum(np.abs(m_c), np.abs(m_t))
        ok = ~insufficient & ~both_zero

        diff = m_t - m_c
        a = v_c / n_c
        b = v_t / n_t
        se2 = a + b
        se = np.sqrt(se2)
        ra, rb = a / se2, b / se2  # shares of the squared SE: no underflow (see _core.welch_df)
        df = 1.0 / (ra * ra / (n_c - 1.0) + rb * rb / (n_t - 1.0))
        df = np.where(ok, df, np.nan)
        stat = diff / se

        def cdf(x):
            return special.stdtr(df, x)

        def ppf(q):
            return special.stdtrit(df, q)

        if two:
            p = np.minimum(1.0, 2.0 * cdf(-np.abs(stat)))
            crit = ppf(1.0 - alpha / 2.0)
            crit2 = crit
        else:
            p = cdf(-stat) if alternative == "greater" else cdf(stat)
            crit = ppf(1.0 - alpha)
            crit2 = ppf(1.0 - alpha / 2.0)
        lo = diff - crit * se if alternative != "less" else np.full_like(diff, -np.inf)
        hi = diff + crit * se if alternative != "greater" else np.full_like(diff, np.inf)

        scale = np.maximum.reduce([np.abs(m_c), np.abs(m_t), np.sqrt(v_c), np.sqrt(v_t)])
        c_zero = (m_c == 0) | (np.abs(m_c) <= ZERO_MEAN_RTOL * scale)
        c_near = ~c_zero & (crit2 * crit2 * v_c / n_c >= m_c * m_c)
        rel_defined = ok & ~c_zero & ~c_near
        mc2 = m_c * m_c
        rel_se = np.sqrt(v_t / (n_t * mc2) + m_t * m_t * v_c / (n_c * mc2 * mc2))
        rel = diff / np.abs(m_c)
        zero_width = rel_defined & ~(np.isfinite(rel_se) & (rel_se > 0))
        rel_ok = rel_defined & ~zero_width
        rz = rel / rel_se
        if two:
            rel_p = np.minimum(1.0, 2.0 * cdf(-np.abs(rz)))
        else:
            rel_p = cdf(-rz) if alternative == "greater" else cdf(rz)
        rlo = rel - crit * rel_se if alternative != "less" else np.full_like(rel, -np.inf)
        rhi = rel + crit * rel_se if alternative != "greater" else np.full_like(rel, np.inf)

    nan = np.nan
    status = np.where(
        insufficient,
        Status.INSUFFICIENT_DATA,
        np.where(both_zero, np.where(same, Status.CONSTANT_IDENTICAL, Status.ZERO_VARIANCE), Status.OK),
    )
    rel_status = np.where(
        ~ok,
        RelativeStatus.NOT_COMPUTED,
        np.where(
            c_zero,
            RelativeStatus.CONTROL_MEAN_ZERO,
            np.where(
                c_near,
                RelativeStatus.CONTROL_MEAN_NEAR_ZERO,
                np.where(zero_width, RelativeStatus.ZERO_WIDTH, "ok"),
            ),
        ),
    )
    have_c = n_c >= 1
    have_t = n_t >= 1
    abs_lift = np.where(have_c & have_t, np.where(both_zero & same, 0.0, diff), nan)
    return ManyComparisonResult(
        method="welch_t",
        interval_method=IntervalMethod.WALD,
        relative_interval_method=IntervalMethod.DELTA,
        alternative=alternative,
        alpha=float(alpha),
        status=status,
        relative_status=rel_status,
        control_n=n_c.astype(np.int64),
        treatment_n=n_t.astype(np.int64),
        control_mean=np.where(have_c, m_c, nan),
        treatment_mean=np.where(have_t, m_t, nan),
        absolute_lift=abs_lift,
        ci_low=np.where(ok, lo, nan),
        ci_high=np.where(ok, hi, nan),
        std_error=np.where(ok, se, np.where(both_zero, 0.0, nan)),
        relative_lift=np.where(rel_ok | zero_width, rel, nan),
        relative_ci_low=np.where(rel_ok, rlo, nan),
        relative_ci_high=np.where(rel_ok, rhi, nan),
        relative_std_error=np.where(rel_ok, rel_se, nan),
        p_value=np.where(ok, p, nan),
        relative_p_value=np.where(rel_ok, rel_p, nan),
        statistic=np.where(ok, stat, nan),
        df=df,
    )


def _many_proportions(n_c, x_c, v_c, n_t, x_t, v_t, alpha: float, alternative: str) -> ManyComparisonResult:
    """The proportion rows of :func:`compare_many`: the scalar path's formulas on arrays (pooled z
    p-value; Newcombe and MOVER-R intervals; the relative p-value dual to them)."""
    nan = np.nan
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = (n_c >= 2) & (n_t >= 2)
        p_c = np.where(n_c > 0, x_c / np.where(n_c > 0, n_c, 1.0), nan)
        p_t = np.where(n_t > 0, x_t / np.where(n_t > 0, n_t, 1.0), nan)
        # rows without inference get placeholder arms (1 of 2) so no formula sees n = 0
        nc, nt = np.where(ok, n_c, 2.0), np.where(ok, n_t, 2.0)
        x_c, x_t = np.where(ok, x_c, 1.0), np.where(ok, x_t, 1.0)
        diff = p_t - p_c
        pooled = (x_c + x_t) / (nc + nt)
        pooled_var = pooled * (1.0 - pooled) * (1.0 / nc + 1.0 / nt)
        stat = np.where(pooled_var > 0, (x_t / nt - x_c / nc) / np.sqrt(pooled_var), 0.0)
        crit = special.ndtri(1.0 - alpha / 2.0 if alternative == "two-sided" else 1.0 - alpha)
        low, high = proportions.newcombe(x_c, nc, x_t, nt, crit)
        rel_ok = ok & (x_c > 0)
        r_low, r_high = proportions.mover_r(np.where(rel_ok, x_c, 1.0), nc, x_t, nt, crit)
        zstar = proportions.newcombe_z(x_c, nc, x_t, nt)
        mc2 = p_c * p_c
        rel_var = v_t / (n_t * mc2) + p_t * p_t * v_c / (n_c * mc2 * mc2)
        rel_se = np.sqrt(rel_var)
        rel = diff / p_c
        se = np.sqrt(v_c / n_c + v_t / n_t)

    def p_of(z):
        if alternative == "two-sided":
            return np.minimum(1.0, 2.0 * special.ndtr(-np.abs(z)))
        return special.ndtr(-z) if alternative == "greater" else special.ndtr(z)

    inf = np.full_like(diff, np.inf)
    have_c, have_t = n_c >= 1, n_t >= 1
    return ManyComparisonResult(
        method="two_proportion_z",
        interval_method=IntervalMethod.NEWCOMBE,
        relative_interval_method=IntervalMethod.MOVER_R,
        alternative=alternative,
        alpha=float(alpha),
        status=np.where(ok, Status.OK, Status.INSUFFICIENT_DATA),
        relative_status=np.where(
            ok,
            np.where(rel_ok, RelativeStatus.OK, RelativeStatus.CONTROL_MEAN_ZERO),
            RelativeStatus.NOT_COMPUTED,
        ),
        control_n=n_c.astype(np.int64),
        treatment_n=n_t.astype(np.int64),
        control_mean=np.where(have_c, p_c, nan),
        treatment_mean=np.where(have_t, p_t, nan),
        absolute_lift=np.where(have_c & have_t, diff, nan),
        ci_low=np.where(ok, low if alternative != "less" else -inf, nan),
        ci_high=np.where(ok, high if alternative != "greater" else inf, nan),
        std_error=np.where(ok, se, nan),
        relative_lift=np.where(rel_ok, rel, nan),
        relative_ci_low=np.where(rel_ok, r_low - 1.0 if alternative != "less" else -inf, nan),
        relative_ci_high=np.where(rel_ok, r_high - 1.0 if alternative != "greater" else inf, nan),
        relative_std_error=np.where(rel_ok & (rel_var > 0), rel_se, nan),
        p_value=np.where(ok, p_of(stat), nan),
        relative_p_value=np.where(rel_ok, p_of(zstar), nan),
        statistic=np.where(ok, stat, nan),
        df=np.full_like(diff, nan),
    )
