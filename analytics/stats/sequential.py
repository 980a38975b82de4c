"""Always-valid inference: asymptotic confidence sequences (two-sided).

Reference: Waudby-Smith, Arbour, Sinha, Kennedy, Ramdas (2021/2023), "Time-uniform
central limit theory and asymptotic confidence sequences", arXiv:2103.06476v7 --
eq. (9) (the normal-mixture boundary) for the interval, eq. (155) for the e-value /
always-valid p-value and eq. (161) for the choice of rho.  The implementation mirrors
GrowthBook gbstats ``SequentialTwoSidedTTest`` (``gbstats/frequentist/tests.py``,
``sequential_rho`` / ``sequential_interval_halfwidth``).

With ``N = n_c + n_t`` total units, ``se`` the (unpooled) SE of the estimate and
``s2 = se^2 * N``::

    halfwidth = sqrt(s2) * sqrt( 2 (N rho^2 + 1) / (N rho)^2 * log( sqrt(N rho^2 + 1) / alpha ) )
    p_value   = min(1, sqrt(N rho^2 + 1) * exp( -N rho^2 z^2 / (2 (N rho^2 + 1)) )),  z = est/se

Tuning parameter: ``tuning_parameter`` (GrowthBook's ``sequentialTuningParameter``,
default 5000) is the *total sample size N at which the confidence sequence is
tightest*; set it to the experiment's expected total units.  It determines
``rho = sqrt((-2 log alpha + log(-2 log alpha + 1)) / tuning_parameter)``.  A wrong
guess costs only width, never validity: the false-positive rate stays <= alpha under
continuous monitoring ("peeking") for any choice.

All helpers accept floats or numpy arrays (they are plain ufunc expressions).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import _core, proportions
from .frequentist import compare
from .results import ComparisonResult, IntervalMethod, RelativeStatus
from .statistics import ProportionStatistic

__all__ = [
    "DEFAULT_TUNING_PARAMETER",
    "compare_sequential",
    "sequential_rho",
    "sequential_halfwidth",
    "sequential_p_value",
]

DEFAULT_TUNING_PARAMETER = 5000.0


def sequential_rho(alpha: float, tuning_parameter: float = DEFAULT_TUNING_PARAMETER) -> float:
    """rho from eq. (161) of Waudby-Smith et al.: optimises the width at N = tuning_parameter."""
    if tuning_parameter <= 0:
        raise ValueError(f"tuning_parameter must be > 0, got {tuning_parameter}")
    la = -2.0 * np.log(alpha)
    return float(np.sqrt((la + np.log(la + 1.0)) / tuning_parameter))


def sequential_halfwidth(se, n_total, alpha: float, rho: float):
    """Half-width of the two-sided (1 - alpha) asymptotic confidence sequence (eq. 9).

    Args: se -- standard error of the estimate at this look; n_total -- total units.
    """
    n = np.asarray(n_total, dtype=float)
    nr2 = n * rho * rho
    s2 = np.square(se) * n
    return np.sqrt(s2) * np.sqrt(2.0 * (nr2 + 1.0) / np.square(n * rho) * np.log(np.sqrt(nr2 + 1.0) / alpha))


def sequential_p_value(z, n_total, rho: float):
    """Always-valid two-sided p-value (1 / e-value, eq. 155), capped at 1.

    Dual to :func:`sequential_halfwidth`: ``p < alpha`` iff the CS excludes 0.
    """
    nr2 = np.asarray(n_total, dtype=float) * rho * rho
    log_p = 0.5 * np.log1p(nr2) - nr2 * np.square(z) / (2.0 * (nr2 + 1.0))
    return np.exp(np.minimum(log_p, 0.0))


def compare_sequential(
    control,
    treatment,
    *,
    alpha: float = 0.05,
    tuning_parameter: float = DEFAULT_TUNING_PARAMETER,
) -> ComparisonResult:
    """Two-sided always-valid comparison (safe under continuous monitoring).

    Accepts the same statistic types as :func:`analytics.stats.compare` (means,
    proportions, ratios, CUPED covariates -- the arm variances are computed the same
    way).  Uses normal asymptotics, so ``df`` is None and ``statistic`` is a z-score.

    Proportions: an arm with 0 or n successes has a Wald variance of 0, which would make the
    sequence ignore that arm's uncertainty; the sequence is therefore centred on the
    Agresti–Caffo estimates with their standard error (Agresti & Caffo 2000: one success and
    one failure added to each arm; :func:`analytics.stats.proportions.agresti_caffo`), never
    zero-width. ``absolute_lift``/``relative_lift`` stay the observed ones.

    Returns:
        :class:`ComparisonResult` with ``method="sequential_<base method>"``, the
        confidence-sequence ``absolute_ci``/``relative_ci`` and the always-valid
        ``p_value`` (dual to them); ``interval_method`` = ``confidence_sequence`` or
        ``confidence_sequence_agresti_caffo``; ``extra = {"tuning_parameter", "rho",
        "n_total"}`` (+ ``agresti_caffo`` centres for proportions).  Degenerate inputs yield
        the same statuses as :func:`compare`.

    Raises:
        ValueError: bad alpha or tuning_parameter.
    """
    _core.check_args(alpha, "two-sided")
    rho = sequential_rho(alpha, tuning_parameter)
    base = compare(control, treatment, alpha=alpha)
    n = base.control_n + base.treatment_n
    extra = dict(base.extra or {})
    extra.update({"tuning_parameter": float(tuning_parameter), "rho": rho, "n_total": n})
    if not base.ok:
        return dataclasses.replace(base, method="sequential_" + base.method, extra=extra)
    est, se = base.absolute_lift, base.std_error
    rel, rel_se = base.relative_lift, base.relative_std_error
    method = IntervalMethod.CONFIDENCE_SEQUENCE
    if isinstance(control, ProportionStatistic):
        # An arm with 0 or n successes has a Wald variance of 0: centre and scale the sequence on
        # the Agresti–Caffo estimates instead (one success and one failure added to each arm).
        pc, vc, pt, vt = proportions.agresti_caffo(control.sum, control.n, treatment.sum, treatment.n)
        est, se = pt - pc, math.sqrt(vc + vt)
        if base.relative_status == RelativeStatus.OK:
            rel, rel_se = pt / pc - 1.0, math.sqrt(vt / pc**2 + pt**2 * vc / pc**4)
        method = IntervalMethod.CONFIDENCE_SEQUENCE_AGRESTI_CAFFO
        extra["agresti_caffo"] = {"absolute_lift": est, "relative_lift": rel if rel_se else None}
    z = est / se
    hw = float(sequential_halfwidth(se, n, alpha, rho))
    rel_ci = rel_p = None
    if rel is not None and rel_se:
        rhw = float(sequential_halfwidth(rel_se, n, alpha, rho))
        rel_ci = (rel - rhw, rel + rhw)
        rel_p = float(sequential_p_value(rel / rel_se, n, rho))
    return dataclasses.replace(
        base,
        method="sequential_" + base.method,
        absolute_ci=(est - hw, est + hw),
        relative_ci=rel_ci,
        p_value=float(sequential_p_value(z, n, rho)),
        relative_p_value=rel_p,
        statistic=z,
        df=None,
        interval_method=method,
        relative_interval_method=method if rel_ci is not None else None,
        extra=extra,
    )
