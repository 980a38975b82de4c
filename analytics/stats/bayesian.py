"""Bayesian Gaussian-approximation comparison (chance to beat control, risk).

Model (as GrowthBook gbstats ``bayesian/tests.py`` ``EffectBayesianABTest`` and PostHog
``bayesian_method``): the estimated lift ``d`` (absolute, or relative via the delta
method) is approximately ``N(delta, se^2)`` by the CLT.  With a Gaussian prior
``delta ~ N(m0, tau^2)`` the posterior is Gaussian with precision ``1/se^2 + 1/tau^2``
and mean ``(d/se^2 + m0/tau^2) / precision`` (conjugate normal-normal update).

**Default prior: flat / uninformative** (``prior_variance=None``, i.e. tau -> inf), so
the posterior is ``N(d, se^2)`` and the credible interval coincides numerically with
the z-based confidence interval.

Outputs:
* ``chance_to_win`` = P(delta > 0 | data) = Phi(mu/sigma).
* ``expected_loss_treatment`` (risk of shipping treatment) = E[max(-delta, 0)]
  = sigma phi(mu/sigma) - mu Phi(-mu/sigma); ``expected_loss_control`` =
  E[max(delta, 0)] = sigma phi(mu/sigma) + mu Phi(mu/sigma) (Stucchio 2015, "Bayesian A/B
  Testing at VWO"; closed form of the normal partial expectation).  Units: those of
  the effect (metric units if absolute, fraction of |control mean| if relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from scipy import special

from .frequentist import compare
from .results import RelativeStatus, Status, json_safe

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
        prior_mean, prior_variance: prior used (prior_variance None == flat).
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
    base = compare(control, treatment)
    common = {
        "effect": "relative" if relative else "absolute",
        "control_mean": base.control_mean,
        "treatment_mean": base.treatment_mean,
        "prior_mean": float(prior_mean),
        "prior_variance": prior_variance,
        "ci_level": float(ci_level),
    }
    if not base.ok:
        return BayesianResult(status=base.status, reason=base.reason, **common)
    if relative:
        if base.relative_status != RelativeStatus.OK:
            return BayesianResult(status=base.relative_status, reason=base.reason, **common)
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
