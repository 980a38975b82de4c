"""Quantile metrics (p50 / p90 / p95 / p99 of latency) with a clustered standard error.

A quantile metric of an arm is the ``q``-quantile of every observation (every call) of the arm's
units, or of one value per unit. Calls of one unit are correlated (the same user, the same prompt
sizes), so the units, not the calls, are the independent draws: treating calls as independent
understates the variance (Deng, Knoblich & Lu 2018, "Applying the Delta Method in Metric
Analytics", KDD, section 4 "Quantile metrics").

The standard error follows that paper's recipe, which avoids estimating the density at the
quantile:

1. ``ξ̂ = Q(q)``, the sample quantile of all observations (linear interpolation between order
   statistics, ``numpy.quantile``'s default / Hyndman & Fan type 7).
2. ``F̂ = ΣS_i / ΣN_i`` with ``S_i`` = observations of unit ``i`` at or below ``ξ̂`` and ``N_i``
   = its observations: a ratio metric, whose variance is the delta-method one (Deng et al.
   eq. 3): ``σ² = Var_i(S_i − F̂·N_i) · n / (ΣN_i)²`` (sample variance over the ``n`` units).
3. Woodruff's interval (Woodruff 1952, "Confidence intervals for medians and other position
   measures", JASA 47): ``[Q(q − z·σ), Q(q + z·σ)]`` with ``z = Φ⁻¹(0.975)``, which is the
   delta-method interval ``ξ̂ ± z·σ / f(ξ)`` with the density read off the sample itself.
4. ``se = (upper − lower) / (2z)``, used by :func:`analytics.stats.compare` like any other
   standard error: absolute lift ``ξ_t − ξ_c`` with a normal interval, relative lift
   ``ξ_t / ξ_c − 1`` with the delta-method interval of the ratio of two independent estimates.

With one observation per unit (``clusters=None``) step 2 is the binomial ``q(1−q)/n`` and the
interval is the classical distribution-free one. Coverage of the relative-lift interval is checked
against a cluster bootstrap and by simulation in ``bench/bench_quantile_coverage.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = ["QuantileStatistic", "quantile_statistic", "WOODRUFF_Z"]

#: The normal quantile Woodruff's interval is built at; the standard error is its half-width / z.
WOODRUFF_Z = float(sps.norm.ppf(0.975))


@dataclass(frozen=True, slots=True)
class QuantileStatistic:
    """The ``q``-quantile of one arm and its (clustered) standard error.

    Attributes:
        n: independent units (clusters) with at least one observation, ``>= 0``.
        n_obs: observations (calls; equal to ``n`` for per-unit quantiles).
        q: the level in (0, 1), e.g. 0.95 for p95.
        estimate: the sample quantile, in the observations' unit (e.g. ms); nan when ``n_obs == 0``.
        std_error: Woodruff / delta-method standard error of ``estimate``; nan when ``n < 2``.

    ``mean`` (= ``estimate``) and ``variance`` (= ``std_error² · n``, a per-unit variance) let the
    engine's Welch/z machinery compare two arms (:func:`analytics.stats.compare`).

    Raises:
        ValueError: q outside (0, 1), negative counts, non-finite estimate with observations,
            negative standard error.
    """

    n: int
    n_obs: int
    q: float
    estimate: float
    std_error: float

    def __post_init__(self) -> None:
        if not 0.0 < float(self.q) < 1.0:
            raise ValueError(f"QuantileStatistic.q must be in (0, 1), got {self.q!r}")
        if int(self.n) < 0 or int(self.n_obs) < int(self.n):
            raise ValueError(f"QuantileStatistic needs 0 <= n <= n_obs, got n={self.n}, n_obs={self.n_obs}")
        if self.n_obs and not math.isfinite(self.estimate):
            raise ValueError("QuantileStatistic.estimate must be finite when there are observations")
        if self.n >= 2 and not (math.isfinite(self.std_error) and self.std_error >= 0.0):
            raise ValueError(f"QuantileStatistic.std_error must be finite and >= 0, got {self.std_error!r}")
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "n_obs", int(self.n_obs))

    @property
    def mean(self) -> float:
        """The point estimate (named ``mean`` so the engine treats it like an arm mean)."""
        return self.estimate if self.n_obs else math.nan

    @property
    def variance(self) -> float:
        """Per-unit variance ``se² · n`` (so that ``variance / n`` is the estimate's variance)."""
        return self.std_error**2 * self.n if self.n >= 2 else math.nan


def quantile_statistic(values, clusters=None, *, q: float, z: float = WOODRUFF_Z) -> QuantileStatistic:
    """The ``q``-quantile of ``values`` with a standard error clustered by ``clusters``.

    Args:
        values: 1-d array of observations (e.g. call latencies in ms); must be finite.
        clusters: same-length array of unit ids (any hashable numpy can sort), or None when
            every value is its own unit (a per-unit quantile).
        q: level in (0, 1).
        z: normal quantile the Woodruff interval is built at (the SE is its half-width / z).

    Returns:
        :class:`QuantileStatistic` (see the module docstring for the formulas).

    Raises:
        ValueError: q outside (0, 1), non-finite values, mismatched lengths.
    """
    if not 0.0 < float(q) < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q!r}")
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("quantile values must be finite")
    n_obs = x.size
    if clusters is None:
        inverse = np.arange(n_obs)
        n = n_obs
    else:
        ids = np.asarray(clusters).ravel()
        if ids.size != n_obs:
            raise ValueError(f"clusters has {ids.size} entries for {n_obs} values")
        _, inverse = np.unique(ids, return_inverse=True)
        n = int(inverse.max()) + 1 if n_obs else 0
    if n_obs == 0:
        return QuantileStatistic(n=0, n_obs=0, q=q, estimate=math.nan, std_error=math.nan)
    estimate = float(np.quantile(x, q))
    if n < 2:
        return QuantileStatistic(n=n, n_obs=n_obs, q=q, estimate=estimate, std_error=math.nan)
    below = np.bincount(inverse, weights=(x <= estimate).astype(float), minlength=n)
    sizes = np.bincount(inverse, minlength=n).astype(float)
    share = below.sum() / sizes.sum()
    resid = below - share * sizes
    sigma = math.sqrt(max(float(resid.var(ddof=1)), 0.0) * n) / sizes.sum()
    low, high = np.quantile(x, [max(q - z * sigma, 0.0), min(q + z * sigma, 1.0)])
    se = float(high - low) / (2.0 * z)
    return QuantileStatistic(n=n, n_obs=n_obs, q=q, estimate=estimate, std_error=se)
