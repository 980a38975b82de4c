"""Bayesian comparison: chance to beat control, risk and a credible interval.

Means, ratios and CUPED -- Gaussian approximation (as GrowthBook gbstats ``bayesian/tests.py``
``EffectBayesianABTest`` and PostHog ``bayesian_method``): the estimated lift ``d`` (absolute, or
relative via the delta method) is approximately ``N(delta, se^2)`` by the CLT.  With a Gaussian
prior ``delta ~ N(m0, tau^2)`` the posterior is Gaussian with precision ``1/se^2 + 1/tau^2``
and mean ``(d/se^2 + m0/tau^2) / precision`` (conjugate normal-normal update).
**Default prior: flat / uninformative** (``prior_variance=None``, i.e. tau -> inf), so
the posterior is ``N(d, se^2)`` and the credible interval coincides numerically with
the z-based confidence interval.

Proportions -- Beta-Binomial (``model="beta_binomial"``): each arm's rate has the posterior
``Beta(1 + x, 1 + n - x)`` (uniform ``Beta(1, 1)`` prior; the conjugate model of PostHog's and
VWO's Bayesian engines), so an arm with 0 or n successes still has posterior spread (the Gaussian
approximation would give it none).  The effect is ``p_t - p_c`` or ``p_t / p_c - 1``; its chance
to win, expected losses and equal-tailed credible interval are integrals over the two Beta
posteriors, computed by piecewise Gauss-Legendre quadrature (see :meth:`_Arms.expect_control`),
checked against ``scipy.integrate.quad`` on ``scipy.stats.beta`` in the tests.

Outputs:
* ``chance_to_win`` = P(delta > 0 | data) (Gaussian: Phi(mu/sigma)).
* ``expected_loss_treatment`` (risk of shipping treatment) = E[max(-delta, 0)]; Gaussian:
  sigma phi(mu/sigma) - mu Phi(-mu/sigma); ``expected_loss_control`` = E[max(delta, 0)] =
  E[delta] + E[max(-delta, 0)] (Stucchio 2015, "Bayesian A/B Testing at VWO"; closed form of the
  normal partial expectation).  Units: those of the effect (metric units if absolute, fraction
  of the control mean if relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy import special

from .frequentist import compare
from .results import RelativeStatus, Status, json_safe
from .statistics import ProportionStatistic

__all__ = ["BayesianResult", "compare_bayesian"]


@dataclass(frozen=True, slots=True)
class BayesianResult:
    """Posterior summary of the treatment effect.

    Attributes:
        status: "ok" or a :class:`~analytics.stats.results.Status` / relative status
            reason (``relative=True`` with a suppressed relative lift gives the
            relative status, e.g. "control_mean_zero").
        effect: "absolute" or "relative".
        control_mean, treatment_mean: arm means (metric units).
        posterior_mean, posterior_std: of the effect.
        credible_interval: equal-tailed (low, high) with probability ``ci_level``.
        chance_to_win: P(effect > 0).
        expected_loss_treatment, expected_loss_control: see module docstring.
        prior_mean, prior_variance: Gaussian prior on the effect (prior_variance None == flat).
        model: "gaussian" (means, ratios, CUPED) or "beta_binomial" (proportions: a Beta(1, 1)
            prior per arm; ``posterior_std`` is None when it is infinite, i.e. a relative effect
            with fewer than 3 control successes).
        reason: explanation when status != "ok".
    """

    status: str
    effect: str
    control_mean: float | None = None
    treatment_mean: float | None = None
    posterior_mean: float | None = None
    posterior_std: float | None = None
    credible_interval: tuple[float, float] | None = None
    chance_to_win: float | None = None
    expected_loss_treatment: float | None = None
    expected_loss_control: float | None = None
    prior_mean: float = 0.0
    prior_variance: float | None = None
    ci_level: float = 0.95
    model: str = "gaussian"
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: json_safe(getattr(self, f.name)) for f in fields(self)}


def gaussian_posterior_summary(mu: float, sigma: float, ci_level: float) -> dict[str, Any]:
    """Chance to win, expected losses and credible interval of N(mu, sigma^2), sigma > 0."""
    r = mu / sigma
    pdf = math.exp(-0.5 * r * r) / math.sqrt(2.0 * math.pi)
    q = float(special.ndtri(0.5 + ci_level / 2.0))
    return {
        "chance_to_win": float(special.ndtr(r)),
        "expected_loss_treatment": max(sigma * pdf - mu * float(special.ndtr(-r)), 0.0),
        "expected_loss_control": max(sigma * pdf + mu * float(special.ndtr(r)), 0.0),
        "credible_interval": (mu - q * sigma, mu + q * sigma),
    }


def compare_bayesian(
    control,
    treatment,
    *,
    relative: bool = False,
    ci_level: float = 0.95,
    prior_mean: float = 0.0,
    prior_variance: float | None = None,
) -> BayesianResult:
    """Gaussian-approximation Bayesian comparison.

    Args:
        control, treatment: statistics accepted by :func:`analytics.stats.compare`.
        relative: model the relative lift (fraction of |control mean|) instead of the
            absolute difference.
        ci_level: credible-interval probability in (0, 1).
        prior_mean, prior_variance: Gaussian prior on the effect (same units as the
            effect); ``prior_variance=None`` (default) is the flat prior.

    Returns:
        :class:`BayesianResult`; degenerate data gives an explicit status, no NaN.

    Raises:
        ValueError: ci_level outside (0, 1), non-positive/non-finite prior_variance.
    """
    if not 0.0 < ci_level < 1.0:
        raise ValueError(f"ci_level must be in (0, 1), got {ci_level}")
    if prior_variance is not None and not (math.isfinite(prior_variance) and prior_variance > 0):
        raise ValueError(f"prior_variance must be finite and > 0 (or None for flat), got {prior_variance}")
    if not math.isfinite(prior_mean):
        raise ValueError("prior_mean must be finite")
    beta = isinstance(control, ProportionStatistic)
    if beta and prior_variance is not None:
        raise ValueError(
            "proportions use a Beta(1, 1) prior on each arm's rate: a Gaussian effect prior "
            "(prior_variance) applies to means, ratios and CUPED only"
        )
    base = compare(control, treatment)
    common = {
        "effect": "relative" if relative else "absolute",
        "control_mean": base.control_mean,
        "treatment_mean": base.treatment_mean,
        "prior_mean": float(prior_mean),
        "prior_variance": prior_variance,
        "ci_level": float(ci_level),
        "model": "beta_binomial" if beta else "gaussian",
    }
    if not base.ok:
        return BayesianResult(status=base.status, reason=base.reason, **common)
    if relative and base.relative_status != RelativeStatus.OK:
        return BayesianResult(status=base.relative_status, reason=base.reason, **common)
    if beta:
        return BayesianResult(
            status=Status.OK, **beta_posterior_summary(control, treatment, relative, ci_level), **common
        )
    if relative:
        d, se = base.relative_lift, base.relative_std_error
    else:
        d, se = base.absolute_lift, base.std_error
    if d is None or se is None or not (math.isfinite(d) and math.isfinite(se) and se > 0):
        return BayesianResult(
            status=RelativeStatus.ZERO_WIDTH,
            reason="the effect's standard error is 0: no posterior spread to summarise",
            **common,
        )
    if prior_variance is None:
        mu, sigma = d, se
    else:
        prec = 1.0 / (se * se) + 1.0 / prior_variance
        mu = (d / (se * se) + prior_mean / prior_variance) / prec
        sigma = math.sqrt(1.0 / prec)
    return BayesianResult(
        status=Status.OK,
        posterior_mean=mu,
        posterior_std=sigma,
        **gaussian_posterior_summary(mu, sigma, ci_level),
        **common,
    )


#: Uniform prior on each arm's rate.
BETA_PRIOR = (1.0, 1.0)
#: Probability levels whose quantiles (of both posteriors) cut the integration range into pieces.
_LEVELS = np.array([1e-12, 1e-6, 1e-3, 0.03, 0.2, 0.5, 0.8, 0.97, 0.999, 1 - 1e-6, 1 - 1e-12])
#: Gauss-Legendre nodes per piece.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)


class _Beta:
    """One arm's posterior ``Beta(a, b)``: mean, quantile grid, CDF and density."""

    def __init__(self, stat: ProportionStatistic) -> None:
        a0, b0 = BETA_PRIOR
        self.a, self.b = a0 + stat.sum, b0 + stat.n - stat.sum
        self.mean = self.a / (self.a + self.b)
        self.var = self.mean * (1.0 - self.mean) / (self.a + self.b + 1.0)
        self.grid = special.betaincinv(self.a, self.b, _LEVELS)
        self._log_norm = special.betaln(self.a, self.b)

    def cdf(self, x):
        return special.betainc(self.a, self.b, np.clip(x, 0.0, 1.0))

    def pdf(self, x):
        inside = (x > 0.0) & (x < 1.0)
        y = np.where(inside, x, 0.5)
        log_pdf = (self.a - 1.0) * np.log(y) + (self.b - 1.0) * np.log1p(-y) - self._log_norm
        return np.where(inside, np.exp(log_pdf), 0.0)

    def shortfall(self, x):
        """``E[max(x - p, 0)] = x F(x) - mean I_x(a + 1, b)`` (the partial expectation)."""
        return x * self.cdf(x) - self.mean * special.betainc(self.a + 1.0, self.b, np.clip(x, 0.0, 1.0))


def _expect(arm: _Beta, g, cuts) -> np.ndarray:
    """``E[g(X)]``, ``X ~ Beta(a, b)``, by Gauss-Legendre quadrature of ``pdf · g`` on the pieces
    between consecutive quantiles of ``X`` (``_LEVELS``) and the points ``cuts`` (where ``g`` moves:
    the other posterior's quantiles mapped onto this scale). Each piece spans a fraction of one
    posterior's spread, so the integrand is smooth on it whatever the two widths (8 nodes a piece
    agree with ``scipy.integrate.quad`` to 1e-9); mass beyond the 1e-12 quantiles is left out.
    ``g`` maps the nodes to one row or several (e.g. a CDF and a density); so does the result."""
    lo, hi = arm.grid[0], arm.grid[-1]
    edges = np.unique(np.concatenate([arm.grid, np.clip(cuts, lo, hi)]))
    left, width = edges[:-1, None], np.diff(edges)[:, None]
    x = (left + width * (_NODES + 1.0) / 2.0).ravel()
    w = (width / 2.0 * _WEIGHTS).ravel() * arm.pdf(x)
    return np.asarray(g(x)) @ w


def beta_posterior_summary(
    control: ProportionStatistic, treatment: ProportionStatistic, relative: bool, ci_level: float
) -> dict[str, Any]:
    """Posterior summary of ``p_t - p_c`` (or ``p_t / p_c - 1``) under independent Beta posteriors.

    Returns ``posterior_mean``, ``posterior_std`` (None if infinite), ``chance_to_win`` =
    P(effect > 0), ``expected_loss_treatment`` = E[max(-effect, 0)], ``expected_loss_control`` =
    E[max(effect, 0)] and the equal-tailed ``credible_interval`` (quantiles by safeguarded Newton
    steps on the effect's CDF, whose derivative is the effect's density: both are expectations
    over the control posterior). The relative effect needs a control success (the caller checks).
    """
    c, t = _Beta(control), _Beta(treatment)
    chance = 1.0 - float(_expect(c, t.cdf, t.grid))
    if relative:
        e_inv = (c.a + c.b - 1.0) / (c.a - 1.0)  # E[1/p_c], a_c > 1
        mean = t.mean * e_inv - 1.0
        var = None
        if c.a > 2.0:  # E[1/p_c²] is finite
            e_inv2 = e_inv * (c.a + c.b - 2.0) / (c.a - 2.0)
            var = max((t.var + t.mean**2) * e_inv2 - (t.mean * e_inv) ** 2, 0.0)
        loss_t = float(_expect(c, lambda x: t.shortfall(x) / x, t.grid))

        def cdf_pdf(r: float) -> np.ndarray:  # P(p_t / p_c - 1 <= r) and its density
            return _expect(c, lambda x: (t.cdf((1.0 + r) * x), x * t.pdf((1.0 + r) * x)), t.grid / (1.0 + r))

        low_end = -1.0
    else:
        mean, var = t.mean - c.mean, t.var + c.var
        loss_t = float(_expect(c, t.shortfall, t.grid))

        def cdf_pdf(d: float) -> np.ndarray:  # P(p_t - p_c <= d) and its density
            return _expect(c, lambda x: (t.cdf(x + d), t.pdf(x + d)), t.grid - d)

        low_end = -1.0
    tail = (1.0 - ci_level) / 2.0
    sd = math.sqrt(var) if var is not None else None
    return {
        "posterior_mean": mean,
        "posterior_std": sd,
        "chance_to_win": min(max(chance, 0.0), 1.0),
        "expected_loss_treatment": max(loss_t, 0.0),
        "expected_loss_control": max(mean + loss_t, 0.0),
        "credible_interval": tuple(_quantile(cdf_pdf, q, low_end, mean, sd) for q in (tail, 1.0 - tail)),
    }


def _quantile(cdf_pdf, q: float, low: float, mean: float, sd: float | None) -> float:
    """The ``q`` quantile of a continuous effect above ``low`` whose ``cdf_pdf(v)`` gives its CDF
    and density: Newton steps from the normal approximation ``mean + z_q sd``, kept inside the
    bracket known so far (bisection, or doubling upwards while no upper end is known: a relative
    effect is unbounded above; at most 4 sd at a time then), until the CDF is within 1e-11 of
    ``q``."""
    scale = sd if sd else 1.0
    v = max(mean + float(special.ndtri(q)) * scale, low + 1e-12 * scale)
    lo, hi = low, math.inf
    for _ in range(100):
        cdf, pdf = cdf_pdf(v)
        gap = cdf - q
        if abs(gap) < 1e-11:
            break
        lo, hi = (lo, v) if gap > 0 else (v, hi)
        nxt = v - gap / pdf if pdf > 0 else math.nan
        bounded = math.isfinite(hi)
        if not (lo < nxt < hi and (bounded or nxt - v <= 4.0 * scale)):
            # outside the bracket (or a leap from a flat tail): bisect, or step up while no upper end
            nxt = (lo + hi) / 2.0 if bounded else v + 2.0 * max(v - lo, scale)
        if abs(nxt - v) <= 1e-14 * max(abs(v), scale):
            break
        v = nxt
    return float(v)
