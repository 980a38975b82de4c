"""Intervals for two independent proportions that stay valid with 0 or n successes in an arm.

The Wald interval ``p ± z sqrt(p(1-p)/n)`` treats an arm with 0 (or n) successes out of n as
known exactly: its variance is 0, so the interval of the difference ignores that arm and the
interval of the ratio has zero width. Score-type intervals do not: the Wilson interval of 0/n is
``[0, z²/(n + z²)]``. Everything here is built from each arm's Wilson interval with the method of
variance estimates recovery (MOVER, Zou & Donner 2008):

* difference ``p_t - p_c``: Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation
  for the difference between independent proportions", Stat Med 17:873, method 10; statsmodels
  ``confint_proportions_2indep(method="newcomb", compare="diff")``);
* ratio ``p_t / p_c`` (relative lift + 1): MOVER-R (Donner & Zou 2012, "Closed-form confidence
  intervals for functions of the normal mean and standard deviation", Stat Methods Med Res
  21:347, eq. for the ratio; recommended for the ratio of proportions by Fagerland, Lydersen &
  Laake 2015, Stat Methods Med Res 24:224);
* the p-value dual to both: the Newcombe lower (upper) limit crosses 0 exactly when the MOVER-R
  lower (upper) limit crosses 1 -- both compare ``p_t - p_c`` with the same Wilson half-widths --
  so :func:`newcombe_z` (the signed normal quantile at which it happens) gives one p-value whose
  level-alpha test rejects exactly when either interval excludes "no effect";
* Agresti–Caffo (2000, "Simple and effective confidence intervals for proportions and differences
  of proportions result from adding two successes and two failures", Am Stat 54:280): one
  success and one failure added to each arm, for procedures that need an estimate and a
  standard error (the sequential confidence sequence).

Every function takes floats or numpy arrays (``x`` successes, ``n`` trials, ``z`` > 0 a normal
quantile) and uses only arithmetic that works for both; callers make sure ``n >= 1``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

__all__ = ["wilson", "newcombe", "mover_r", "newcombe_gap", "newcombe_z", "agresti_caffo"]


def _where(cond, a, b):
    """``np.where`` for arrays, a conditional expression for scalars (much cheaper on floats)."""
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else (a if cond else b)


def _clip01(v):
    return np.clip(v, 0.0, 1.0) if isinstance(v, np.ndarray) else min(max(v, 0.0), 1.0)


def _max0(v):
    return np.maximum(v, 0.0) if isinstance(v, np.ndarray) else max(v, 0.0)


def wilson(x, n, z):
    """Wilson score interval ``(low, high)`` of ``x`` successes in ``n`` trials (Wilson 1927).

    Same as ``statsmodels.stats.proportion.proportion_confint(x, n, method="wilson")`` at
    ``z = ndtri(1 - alpha/2)``; ``low`` is exactly 0 when ``x == 0``, ``high`` exactly 1 when
    ``x == n``.
    """
    z2 = z * z
    centre = (x + z2 / 2.0) / (n + z2)
    half = z / (n + z2) * (x * (n - x) / n + z2 / 4.0) ** 0.5
    return _where(x <= 0, 0.0, _clip01(centre - half)), _where(x >= n, 1.0, _clip01(centre + half))


def newcombe(x_c, n_c, x_t, n_t, z):
    """Newcombe's interval ``(low, high)`` of ``p_t - p_c`` (method 10 of Newcombe 1998)."""
    p_c, p_t = x_c / n_c, x_t / n_t
    l_c, u_c = wilson(x_c, n_c, z)
    l_t, u_t = wilson(x_t, n_t, z)
    d = p_t - p_c
    return d - ((p_t - l_t) ** 2 + (u_c - p_c) ** 2) ** 0.5, d + ((u_t - p_t) ** 2 + (p_c - l_c) ** 2) ** 0.5


def mover_r(x_c, n_c, x_t, n_t, z):
    """MOVER-R interval ``(low, high)`` of the ratio ``p_t / p_c`` (Donner & Zou 2012); needs
    ``x_c > 0`` (the ratio is undefined when the control has no success).

    With Wilson limits ``(l, u)`` the lower limit solves ``p_t - L p_c = sqrt((p_t - l_t)² +
    L² (u_c - p_c)²)``, i.e. ``L = c / (p_t p_c + sqrt(p_t² p_c² - a c))`` with
    ``c = l_t (2 p_t - l_t)`` and ``a = u_c (2 p_c - u_c)`` (the rationalised root, stable when
    ``a`` is near 0; ``a c <= p_t² p_c²`` always); the upper limit is the larger root of the same
    quadratic with ``(u_t, l_c)``, ``U = (p_t p_c + sqrt(p_t² p_c² - a c)) / a``. ``L = 0`` when
    ``x_t == 0``.
    """
    p_c, p_t = x_c / n_c, x_t / n_t
    l_c, u_c = wilson(x_c, n_c, z)
    l_t, u_t = wilson(x_t, n_t, z)
    pp = p_t * p_c
    c_low, a_low = l_t * (2.0 * p_t - l_t), u_c * (2.0 * p_c - u_c)
    c_high, a_high = u_t * (2.0 * p_t - u_t), l_c * (2.0 * p_c - l_c)
    root_low = _max0(pp * pp - a_low * c_low) ** 0.5
    root_high = _max0(pp * pp - a_high * c_high) ** 0.5
    low = _where(x_t <= 0, 0.0, c_low / _where(x_t <= 0, 1.0, pp + root_low))
    return low, (pp + root_high) / a_high


def newcombe_gap(x_c, n_c, x_t, n_t, z):
    """How far the Newcombe interval at ``z`` stays from 0 on the side of the estimate:
    ``low`` when ``p_t > p_c``, ``-high`` otherwise (positive iff the interval excludes 0).
    Decreasing in ``z`` (Wilson half-widths grow with ``z``)."""
    low, high = newcombe(x_c, n_c, x_t, n_t, z)
    return _where(x_t / n_t > x_c / n_c, low, -high)


#: Search range of :func:`newcombe_z`: beyond it the p-value is below 1e-300 anyway.
Z_MAX = 37.0


def _z_guess(x_c, n_c, x_t, n_t, d):
    """A starting point for :func:`newcombe_z`. At the root ``d² = (p_t - l_t)² + (u_c - p_c)²``,
    and a Wilson limit ``w`` of ``x/n`` satisfies ``(x/n - w)² = z² w (1 - w) / n``, so
    ``z* = |d| / sqrt(l_t (1 - l_t) / n_t + u_c (1 - u_c) / n_c)`` at ``z*`` (mirrored limits when
    ``d < 0``): two fixed-point steps of that identity from the Wald z."""
    up = d > 0
    v = x_c / n_c * (1 - x_c / n_c) / n_c + x_t / n_t * (1 - x_t / n_t) / n_t
    z = _clip_z(abs(d) / _where(v > 0, v, 1.0) ** 0.5)
    for _ in range(2):
        l_t, u_t = wilson(x_t, n_t, z)
        l_c, u_c = wilson(x_c, n_c, z)
        w_t, w_c = _where(up, l_t, u_t), _where(up, u_c, l_c)
        v = w_t * (1 - w_t) / n_t + w_c * (1 - w_c) / n_c
        z = _clip_z(abs(d) / _where(v > 0, v, 1.0) ** 0.5)
    return z


def _clip_z(z):
    return np.clip(z, 1e-6, Z_MAX) if isinstance(z, np.ndarray) else min(max(z, 1e-6), Z_MAX)


def newcombe_z(x_c, n_c, x_t, n_t):
    """The signed normal quantile ``z*`` at which the Newcombe interval (equivalently the MOVER-R
    interval of the ratio) just touches "no effect", with the sign of ``p_t - p_c``.

    The two-sided p-value is ``2 Φ(-|z*|)`` and the one-sided ones ``Φ(-z*)`` (greater) and
    ``Φ(z*)`` (less): the interval at level ``1 - alpha`` excludes 0 exactly when that p-value is
    below ``alpha``. ``z*`` is the root of the decreasing :func:`newcombe_gap` on ``(0, Z_MAX]``,
    bracketed around :func:`_z_guess` and found by Brent's method (one comparison) or bisection
    (arrays, 48 halvings of the bracket); ``0`` when the estimates are equal, ``± Z_MAX`` when even
    that interval excludes 0.
    """
    d = x_t / n_t - x_c / n_c
    guess = _z_guess(x_c, n_c, x_t, n_t, d)
    if not isinstance(d, np.ndarray):
        if d == 0:
            return 0.0

        def gap(z: float) -> float:
            return newcombe_gap(x_c, n_c, x_t, n_t, z)

        lo, hi = guess / 1.2, min(guess * 1.2, Z_MAX)
        while gap(lo) <= 0:
            lo /= 2.0
        while gap(hi) > 0:
            if hi >= Z_MAX:
                return math.copysign(Z_MAX, d)
            hi = min(hi * 2.0, Z_MAX)
        return math.copysign(optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-12), d)
    lo, hi = guess / 1.2, np.minimum(guess * 1.2, Z_MAX)
    wide = (newcombe_gap(x_c, n_c, x_t, n_t, lo) <= 0) | (newcombe_gap(x_c, n_c, x_t, n_t, hi) > 0)
    lo, hi = np.where(wide, 0.0, lo), np.where(wide, Z_MAX, hi)  # rows the guess missed: everything
    for _ in range(48):
        mid = (lo + hi) / 2.0
        inside = newcombe_gap(x_c, n_c, x_t, n_t, mid) > 0
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    return np.sign(d) * (lo + hi) / 2.0


def agresti_caffo(x_c, n_c, x_t, n_t):
    """Agresti–Caffo estimates: ``(p̃_c, var_c, p̃_t, var_t)`` with ``p̃ = (x + 1) / (n + 2)`` and
    ``var = p̃ (1 - p̃) / (n + 2)`` (the variance of the arm's estimate, never 0)."""
    pc, pt = (x_c + 1.0) / (n_c + 2.0), (x_t + 1.0) / (n_t + 2.0)
    return pc, pc * (1.0 - pc) / (n_c + 2.0), pt, pt * (1.0 - pt) / (n_t + 2.0)
