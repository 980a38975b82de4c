"""Sufficient-statistic input shapes for the statistics engine.

Every experiment arm is summarised by a small frozen dataclass of *sums* (never raw
rows), following the shape used by PostHog (``products/experiments/stats/shared/
statistics.py``) and GrowthBook (``gbstats/models/statistics.py``).  All classes
validate themselves in ``__post_init__`` and raise :class:`ValueError` with a clear
message on impossible input (negative counts, NaN/inf, a sum of squares smaller than
``sum**2 / n``, ...).

Variance conventions (per *unit*, i.e. the variance of one observation):

* :class:`MeanStatistic` -- sample variance with ``ddof=1`` (what Welch's t-test uses).
* :class:`ProportionStatistic` -- ``p * (1 - p)`` (``ddof=0``; the binomial variance
  used by the two-proportion z-test, as in ``statsmodels.stats.proportion``).
* :class:`RatioStatistic` -- delta-method variance of ``sum(m) / sum(d)`` scaled by
  ``n`` (Deng et al. 2018, "Applying the Delta Method in Metric Analytics", KDD, eq. 3).
* :class:`CovariateStatistic` -- moments of an outcome ``y`` and a pre-exposure
  covariate ``x`` for CUPED (Deng, Xu, Kohavi, Walker 2013, WSDM).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = [
    "ProportionStatistic",
    "MeanStatistic",
    "RatioStatistic",
    "CovariateStatistic",
    "Statistic",
]

# Relative tolerance used when checking Cauchy-Schwarz style consistency between sums:
# sums of squares are often accumulated in float64 by a database, so tiny negative
# "variances" caused by cancellation are clamped to zero instead of being rejected.
_CONSISTENCY_RTOL = 1e-9


def _check_n(cls_name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise ValueError(f"{cls_name}.n must be an integer count, got {n!r}")
    if isinstance(n, numbers.Integral):
        value = int(n)
    else:
        f = float(n)
        if not math.isfinite(f) or f != int(f):
            raise ValueError(f"{cls_name}.n must be a finite whole number, got {n!r}")
        value = int(f)
    if value < 0:
        raise ValueError(f"{cls_name}.n must be >= 0, got {value}")
    return value


def _check_finite(cls_name: str, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{cls_name}.{field} must be a real number, got {value!r}")
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"{cls_name}.{field} must be finite (no NaN/inf), got {value!r}")
    return f


def _centered_ss(cls_name: str, field: str, n: int, total: float, total_sq: float) -> float:
    """Return ``sum((x - mean)^2)`` from raw sums, validating consistency.

    Raises ValueError if ``total_sq`` is materially smaller than ``total**2 / n`` (which
    no real sample can produce); clamps tiny negative values due to rounding to 0.
    """
    if total_sq < 0:
        raise ValueError(f"{cls_name}.{field} must be >= 0, got {total_sq}")
    if n == 0:
        if total != 0 or total_sq != 0:
            raise ValueError(f"{cls_name}: with n == 0 all sums must be 0")
        return 0.0
    css = total_sq - total * total / n
    if css < -_CONSISTENCY_RTOL * max(total_sq, total * total / n, 1e-300):
        raise ValueError(
            f"{cls_name}: {field}={total_sq!r} is inconsistent with sum={total!r} and n={n} "
            f"(needs {field} >= sum**2 / n = {total * total / n!r})"
        )
    return max(css, 0.0)


@dataclass(frozen=True, slots=True)
class ProportionStatistic:
    """A binary (conversion) metric for one arm.

    Attributes:
        n: number of units (users/sessions) in the arm, ``>= 0``.
        sum: number of successes, ``0 <= sum <= n`` (a float is accepted, e.g. from SQL).

    Properties ``mean`` (= p), ``variance`` (= p(1-p), per unit, ddof=0) and
    ``std_error`` (= sqrt(p(1-p)/n)); all are ``nan`` when ``n == 0``.

    Raises:
        ValueError: negative/non-integer ``n``, non-finite ``sum``, ``sum`` outside [0, n].
    """

    n: int
    sum: float

    def __post_init__(self) -> None:
        n = _check_n("ProportionStatistic", self.n)
        s = _check_finite("ProportionStatistic", "sum", self.sum)
        if s < 0 or s > n:
            raise ValueError(f"ProportionStatistic.sum must be in [0, n={n}], got {s}")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "sum", s)

    @property
    def mean(self) -> float:
        return self.sum / self.n if self.n > 0 else math.nan

    @property
    def variance(self) -> float:
        if self.n == 0:
            return math.nan
        p = self.mean
        return p * (1.0 - p)

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance / self.n) if self.n > 0 else math.nan


@dataclass(frozen=True, slots=True)
class MeanStatistic:
    """A continuous metric for one arm (e.g. tokens per user, cost per session).

    Attributes:
        n: number of units, ``>= 0``.
        sum: sum of the per-unit values.
        sum_squares: sum of the squared per-unit values; must satisfy
            ``sum_squares >= sum**2 / n`` (up to a 1e-9 relative rounding tolerance).

    Properties: ``mean`` (sum/n), ``variance`` (sample variance, ddof=1; ``nan`` when
    ``n < 2``), ``std_error`` (sqrt(variance/n)).

    Raises:
        ValueError: negative/non-integer ``n``, NaN/inf sums, inconsistent ``sum_squares``.
    """

    n: int
    sum: float
    sum_squares: float

    def __post_init__(self) -> None:
        n = _check_n("MeanStatistic", self.n)
        s = _check_finite("MeanStatistic", "sum", self.sum)
        ss = _check_finite("MeanStatistic", "sum_squares", self.sum_squares)
        _centered_ss("MeanStatistic", "sum_squares", n, s, ss)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "sum", s)
        object.__setattr__(self, "sum_squares", ss)

    @property
    def mean(self) -> float:
        return self.sum / self.n if self.n > 0 else math.nan

    @property
    def variance(self) -> float:
        if self.n < 2:
            return math.nan
        css = max(self.sum_squares - self.sum * self.sum / self.n, 0.0)
        return css / (self.n - 1)

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance / self.n) if self.n >= 2 else math.nan

    @classmethod
    def from_values(cls, values) -> MeanStatistic:
        """Build from raw per-unit values (a sequence/array of floats). Test/helper use."""
        vals = [float(v) for v in values]
        return cls(len(vals), math.fsum(vals), math.fsum(v * v for v in vals))


@dataclass(frozen=True, slots=True)
class RatioStatistic:
    """A ratio metric ``sum(numerator) / sum(denominator)`` for one arm.

    Examples: tokens per turn (numerator = tokens per user, denominator = turns per
    user), cost per successful task.  The randomisation unit is ``n``; numerator and
    denominator are per-unit aggregates, so the ratio's variance must be computed with
    the delta method (Deng et al. 2018, "Applying the Delta Method in Metric
    Analytics", KDD, section 3; GrowthBook ``RatioStatistic``).

    Attributes:
        n: number of randomisation units; must equal ``m.n`` and ``d.n``.
        m: numerator per unit (MeanStatistic).
        d: denominator per unit (MeanStatistic).
        sum_of_products: ``sum_i m_i * d_i`` (for the numerator/denominator covariance).

    Properties: ``mean`` = mean(m)/mean(d); ``covariance`` (ddof=1);
    ``variance`` = per-unit delta-method variance
    ``var_m/mu_d^2 - 2 mu_m cov/mu_d^3 + mu_m^2 var_d/mu_d^4`` (so that
    ``variance / n`` is the variance of the ratio estimate); ``std_error``.

    Raises:
        ValueError: mismatched n, non-finite sum_of_products, or a covariance violating
        Cauchy-Schwarz (|cov| > sd_m * sd_d beyond rounding tolerance).
    """

    n: int
    m: MeanStatistic
    d: MeanStatistic
    sum_of_products: float

    def __post_init__(self) -> None:
        n = _check_n("RatioStatistic", self.n)
        if not isinstance(self.m, MeanStatistic) or not isinstance(self.d, MeanStatistic):
            raise ValueError("RatioStatistic.m and .d must be MeanStatistic instances")
        if self.m.n != n or self.d.n != n:
            raise ValueError(f"RatioStatistic: m.n={self.m.n} and d.n={self.d.n} must both equal n={n}")
        sop = _check_finite("RatioStatistic", "sum_of_products", self.sum_of_products)
        if n == 0 and sop != 0:
            raise ValueError("RatioStatistic: with n == 0 sum_of_products must be 0")
        if n >= 1:
            cm = _centered_ss("RatioStatistic", "m.sum_squares", n, self.m.sum, self.m.sum_squares)
            cd = _centered_ss("RatioStatistic", "d.sum_squares", n, self.d.sum, self.d.sum_squares)
            cxy = sop - self.m.sum * self.d.sum / n
            bound = math.sqrt(cm * cd)
            scale = max(abs(sop), abs(self.m.sum * self.d.sum / n), 1e-300)
            if abs(cxy) > bound + _CONSISTENCY_RTOL * scale:
                raise ValueError(
                    "RatioStatistic: sum_of_products is inconsistent with the numerator and "
                    "denominator sums of squares (violates Cauchy-Schwarz)"
                )
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "sum_of_products", sop)

    @property
    def mean(self) -> float:
        return self.m.sum / self.d.sum if self.d.sum != 0 else math.nan

    @property
    def covariance(self) -> float:
        if self.n < 2:
            return math.nan
        return (self.sum_of_products - self.m.sum * self.d.sum / self.n) / (self.n - 1)

    @property
    def variance(self) -> float:
        if self.n < 2 or self.d.sum == 0:
            return math.nan
        mu_m, mu_d = self.m.mean, self.d.mean
        v = (
            self.m.variance / mu_d**2
            - 2.0 * mu_m * self.covariance / mu_d**3
            + mu_m**2 * self.d.variance / mu_d**4
        )
        return max(v, 0.0)

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance / self.n) if self.n >= 2 and self.d.sum != 0 else math.nan


@dataclass(frozen=True, slots=True)
class CovariateStatistic:
    """Outcome ``y`` plus a pre-exposure covariate ``x`` for one arm (CUPED input).

    Attributes:
        n: number of units.
        sum_y, sum_y2: sum and sum of squares of the in-experiment metric.
        sum_x, sum_x2: sum and sum of squares of the pre-exposure covariate (typically
            the same metric measured before exposure; 0 for new users).
        sum_xy: sum of per-unit products ``x_i * y_i``.

    Properties: ``y`` and ``x`` (MeanStatistic views), ``mean`` (mean of y),
    ``covariance`` (sample covariance of x and y, ddof=1).

    Raises:
        ValueError: NaN/inf sums, inconsistent sums of squares, or |cov(x,y)| larger
        than sd(x)*sd(y) (Cauchy-Schwarz) beyond rounding tolerance.
    """

    n: int
    sum_y: float
    sum_y2: float
    sum_x: float
    sum_x2: float
    sum_xy: float

    def __post_init__(self) -> None:
        n = _check_n("CovariateStatistic", self.n)
        vals = {
            f: _check_finite("CovariateStatistic", f, getattr(self, f))
            for f in ("sum_y", "sum_y2", "sum_x", "sum_x2", "sum_xy")
        }
        cy = _centered_ss("CovariateStatistic", "sum_y2", n, vals["sum_y"], vals["sum_y2"])
        cx = _centered_ss("CovariateStatistic", "sum_x2", n, vals["sum_x"], vals["sum_x2"])
        if n == 0 and vals["sum_xy"] != 0:
            raise ValueError("CovariateStatistic: with n == 0 sum_xy must be 0")
        if n >= 1:
            cxy = vals["sum_xy"] - vals["sum_x"] * vals["sum_y"] / n
            scale = max(abs(vals["sum_xy"]), abs(vals["sum_x"] * vals["sum_y"] / n), 1e-300)
            if abs(cxy) > math.sqrt(cx * cy) + _CONSISTENCY_RTOL * scale:
                raise ValueError(
                    "CovariateStatistic: sum_xy is inconsistent with sum_x2/sum_y2 (violates Cauchy-Schwarz)"
                )
        object.__setattr__(self, "n", n)
        for f, v in vals.items():
            object.__setattr__(self, f, v)

    @property
    def y(self) -> MeanStatistic:
        return MeanStatistic(self.n, self.sum_y, self.sum_y2)

    @property
    def x(self) -> MeanStatistic:
        return MeanStatistic(self.n, self.sum_x, self.sum_x2)

    @property
    def mean(self) -> float:
        return self.sum_y / self.n if self.n > 0 else math.nan

    @property
    def covariance(self) -> float:
        if self.n < 2:
            return math.nan
        return (self.sum_xy - self.sum_x * self.sum_y / self.n) / (self.n - 1)

    @classmethod
    def from_values(cls, y, x) -> CovariateStatistic:
        """Build from raw paired values (test/helper use)."""
        ys = [float(v) for v in y]
        xs = [float(v) for v in x]
        if len(ys) != len(xs):
            raise ValueError("y and x must have the same length")
        return cls(
            len(ys),
            math.fsum(ys),
            math.fsum(v * v for v in ys),
            math.fsum(xs),
            math.fsum(v * v for v in xs),
            math.fsum(a * b for a, b in zip(xs, ys, strict=True)),
        )


Statistic = ProportionStatistic | MeanStatistic | RatioStatistic | CovariateStatistic
