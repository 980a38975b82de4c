"""Statistics of a shadow test: candidate against primary on the same calls, clustered by session.

The pairs of one session are not independent (same user, same task), so every interval treats
the session as the unit of resampling or variance (the cluster):

* :func:`ratio_of_means` -- ``sum(candidate) / sum(primary)`` over the sessions' totals (cost per
  call, output tokens per call): the ratio estimator with its linearised (delta-method) variance
  ``k / (k - 1) * sum_i (x_i - R y_i)^2 / (sum_i y_i)^2`` over the k sessions, the interval taken
  on ``log R`` (variance ``/ R^2``) so it stays positive, with Student's t on ``k - 1`` degrees
  of freedom (:func:`_t`). Sources: Cochran, *Sampling Techniques*
  (3rd ed., 1977), §6.4 eq. (6.13) and §9.8 (cluster ratio estimator); Deng, Knoblich & Lu,
  "Applying the Delta Method in Metric Analytics: A Practical Guide with Novel Ideas", KDD 2018, §3.
* :func:`clustered_rate` -- a share of pairs (tool-call agreement, judge win rate) as the same
  ratio estimator with ``x_i`` the session's successes (a tie counts one half) and ``y_i`` its
  pairs; a Wald interval on the rate (t on ``k - 1`` degrees of freedom), clipped to [0, 1]. Equal to the cluster-robust standard
  error of an intercept-only regression with the ``G / (G - 1)`` correction (statsmodels'
  ``cov_type="cluster"``), which the tests check.
* :func:`median_ratio` -- ``median(candidate) / median(primary)`` (latency p50): a percentile
  bootstrap over sessions (resample whole sessions with replacement; Field & Welsh, "Bootstrapping
  clustered data", JRSS B 69(3), 2007; Davison & Hinkley 1997, §3.8), on ``log`` of the ratio.

Coverage of all four 95 % intervals is checked by simulation in ``tests/analytics/test_stats_shadow.py``.
Pure numpy; no Django.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["Interval", "ratio_of_means", "clustered_rate", "median_ratio"]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided interval (``lo <= estimate <= hi``; all ``None`` when
    there is nothing to estimate, e.g. no sessions or a zero denominator)."""

    estimate: float | None
    lo: float | None
    hi: float | None

    def to_dict(self) -> dict:
        """``{"estimate", "ci": [lo, hi]}`` (the results API's shape)."""
        return {"estimate": self.estimate, "ci": [self.lo, self.hi]}


EMPTY = Interval(None, None, None)


def _t(alpha: float, sessions: int) -> float:
    """The two-sided critical value of Student's t with ``sessions - 1`` degrees of freedom: the
    small-sample choice for cluster-robust intervals (Cameron & Miller, "A Practitioner's Guide to
    Cluster-Robust Inference", J. Human Resources 50(2), 2015, §VI.C: T(G - 1))."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    return float(stats.t.ppf(1.0 - alpha / 2.0, sessions - 1))


def _totals(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ValueError("x and y must be 1-d sequences of the same length (one entry per session)")
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        raise ValueError("totals must be finite")
    return xs, ys


def _ratio_se(xs: np.ndarray, ys: np.ndarray, r: float) -> float:
    k = len(xs)
    resid = xs - r * ys
    return math.sqrt(k / (k - 1) * float(resid @ resid)) / float(ys.sum())


def ratio_of_means(x: Sequence[float], y: Sequence[float], *, alpha: float = 0.05) -> Interval:
    """``sum(x) / sum(y)`` with a session-clustered interval on the log scale.

    ``x[i]`` / ``y[i]``: session i's candidate / primary total over the same pairs (USD, tokens,
    ms). Needs at least 2 sessions and positive totals; else :data:`EMPTY` (or the estimate with
    no interval). Raises ``ValueError`` for mismatched or non-finite input."""
    xs, ys = _totals(x, y)
    if len(xs) == 0 or ys.sum() <= 0 or xs.sum() <= 0:
        return EMPTY
    r = float(xs.sum() / ys.sum())
    if len(xs) < 2:
        return Interval(r, None, None)
    half = _t(alpha, len(xs)) * _ratio_se(xs, ys, r) / r
    return Interval(r, r * math.exp(-half), r * math.exp(half))


def clustered_rate(successes: Sequence[float], trials: Sequence[float], *, alpha: float = 0.05) -> Interval:
    """``sum(successes) / sum(trials)`` with a session-clustered Wald interval clipped to [0, 1].

    ``successes[i]``: session i's successes (may be halves: a tie), ``trials[i]``: its pairs.
    :data:`EMPTY` with no trials. Raises ``ValueError`` for mismatched input or successes
    outside ``[0, trials]``."""
    xs, ys = _totals(successes, trials)
    if (xs < 0).any() or (xs > ys).any():
        raise ValueError("successes must lie between 0 and trials")
    if ys.sum() <= 0:
        return EMPTY
    keep = ys > 0
    xs, ys = xs[keep], ys[keep]
    p = float(xs.sum() / ys.sum())
    if len(xs) < 2:
        return Interval(p, None, None)
    half = _t(alpha, len(xs)) * _ratio_se(xs, ys, p)
    return Interval(p, max(0.0, p - half), min(1.0, p + half))


def median_ratio(
    candidate: Sequence[Sequence[float]],
    primary: Sequence[Sequence[float]],
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int | None = 0,
) -> Interval:
    """``median(all candidate values) / median(all primary values)`` with a percentile interval
    from ``n_boot`` bootstrap resamples of whole sessions.

    ``candidate[i]`` / ``primary[i]``: session i's values over the same pairs (e.g. latency, ms;
    positive). ``seed`` makes the interval reproducible. :data:`EMPTY` without values; no interval
    with fewer than 2 sessions. Raises ``ValueError`` when a session's two lists differ in length."""
    sizes = [len(c) for c in candidate]
    if sizes != [len(p) for p in primary]:
        raise ValueError("each session needs as many candidate values as primary values")
    sessions = [i for i, m in enumerate(sizes) if m > 0]
    if not sessions:
        return EMPTY
    cand = [np.asarray(candidate[i], dtype=float) for i in sessions]
    prim = [np.asarray(primary[i], dtype=float) for i in sessions]
    est_den = float(np.median(np.concatenate(prim)))
    if est_den <= 0:
        return EMPTY
    estimate = float(np.median(np.concatenate(cand))) / est_den
    k = len(sessions)
    if k < 2 or estimate <= 0:
        return Interval(estimate, None, None)
    width = max(sizes)
    padded_c = np.full((k, width), np.nan)
    padded_p = np.full((k, width), np.nan)
    for i in range(k):
        padded_c[i, : len(cand[i])] = cand[i]
        padded_p[i, : len(prim[i])] = prim[i]
    rng = np.random.default_rng(seed)
    logs = []
    chunk = max(1, 2_000_000 // (k * width))  # bound the memory of one batch of resamples
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, k, size=(min(chunk, n_boot - start), k))
        med_c = np.nanmedian(padded_c[idx].reshape(len(idx), -1), axis=1)
        med_p = np.nanmedian(padded_p[idx].reshape(len(idx), -1), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs.append(np.log(med_c / med_p))
    values = np.concatenate(logs)
    values = values[np.isfinite(values)]
    lo, hi = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(estimate, float(math.exp(lo)), float(math.exp(hi)))
