"""Sample ratio mismatch (SRM) check.

Pearson chi-square goodness-of-fit test of the observed units per arm against the
configured traffic weights (Fabijan et al. 2019, "Diagnosing Sample Ratio Mismatch in
Online Controlled Experiments", KDD; same statistic as ``scipy.stats.chisquare``).
An experiment is flagged when ``p < 0.001`` (the conventional, deliberately strict SRM
threshold used by Microsoft ExP, GrowthBook and PostHog).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from scipy import special

from .results import json_safe

__all__ = ["srm_test", "SrmResult", "SRM_P_THRESHOLD"]

SRM_P_THRESHOLD = 0.001


class SrmStatus:
    """One vocabulary: ``status`` says what ``flagged`` says ("ok" is never flagged)."""

    #: the split matches the weights (p >= 0.001).
    OK = "ok"
    #: the split does not match the weights (p < 0.001): flagged.
    MISMATCH = "mismatch"
    #: no units at all yet.
    NO_DATA = "no_data"
    #: fewer than two arms with positive weight -> nothing to compare.
    SINGLE_ARM = "single_arm"
    #: units were observed in an arm configured with weight 0 (certain mismatch).
    UNITS_IN_ZERO_WEIGHT_ARM = "units_in_zero_weight_arm"


@dataclass(frozen=True, slots=True)
class SrmResult:
    """Result of :func:`srm_test`.

    Attributes:
        chi2: Pearson chi-square statistic over the kept arms (None if not computable).
        p_value: upper-tail chi-square p-value with ``df`` degrees of freedom
            (0.0 when units landed in a zero-weight arm; None if not computable).
        df: number of kept arms - 1.
        flagged: True iff ``p_value < 0.001`` or units were seen in a zero-weight arm.
        status: "ok" (not flagged), "mismatch" (flagged by the p-value),
            "units_in_zero_weight_arm" (flagged), "no_data" or "single_arm" (not flagged).
        expected_counts: expected units per *input* arm (same order as the input).
        reason: human readable explanation when status != "ok".
    """

    chi2: float | None
    p_value: float | None
    df: int
    flagged: bool
    status: str
    expected_counts: tuple[float, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: json_safe(getattr(self, f.name)) for f in fields(self)}


def srm_test(observed_counts: Sequence[int], expected_weights: Sequence[float]) -> SrmResult:
    """Chi-square SRM test of observed unit counts against configured weights.

    Args:
        observed_counts: units assigned per arm (non-negative integers), length k >= 1.
        expected_weights: configured traffic weights per arm (non-negative, finite, not
            all zero; need not sum to 1 -- they are normalised over all arms).

    Rules: arms with weight > 0 are always kept (an arm with 0 units is strong evidence
    of SRM); arms with weight 0 and count 0 are dropped; an arm with weight 0 but a
    positive count is a certain mismatch -> ``flagged=True``,
    ``status="units_in_zero_weight_arm"``, ``p_value=0.0`` (chi2 is still computed over
    the positive-weight arms, for information).

    Returns:
        :class:`SrmResult` (never raises on degenerate data, e.g. all-zero counts).

    Raises:
        ValueError: length mismatch, negative / non-integer counts, negative / non-finite
        weights, or all weights zero.
    """
    if len(observed_counts) != len(expected_weights):
        raise ValueError(
            f"observed_counts ({len(observed_counts)}) and expected_weights "
            f"({len(expected_weights)}) must have the same length"
        )
    if len(observed_counts) == 0:
        raise ValueError("need at least one arm")
    counts: list[int] = []
    for c in observed_counts:
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or float(c) != math.floor(float(c)):
            raise ValueError(f"observed counts must be non-negative integers, got {c!r}")
        if c < 0:
            raise ValueError(f"observed counts must be non-negative integers, got {c!r}")
        counts.append(int(c))
    weights: list[float] = []
    for w in expected_weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(float(w)) or w < 0:
            raise ValueError(f"expected weights must be finite and >= 0, got {w!r}")
        weights.append(float(w))
    w_max = max(weights)
    if w_max <= 0:
        raise ValueError("expected weights must not all be zero")
    # Normalise first (scaled by the largest weight so the sum cannot overflow near 1.8e308): a
    # weight so small relative to the others that its share underflows to 0 (5e-324 beside 1.0)
    # is a zero-weight arm, never a division by zero.
    scaled = [w / w_max for w in weights]
    total_w = math.fsum(scaled)
    shares = [w / total_w for w in scaled]

    total = sum(counts)
    kept = [i for i, s in enumerate(shares) if s > 0]
    stray = [i for i, s in enumerate(shares) if s == 0 and counts[i] > 0]
    kept_total = sum(counts[i] for i in kept)
    kept_share = math.fsum(shares[i] for i in kept)
    expected = tuple(total * s for s in shares)
    df = max(len(kept) - 1, 0)

    chi2: float | None = None
    p: float | None = None
    if len(kept) >= 2 and kept_total > 0:
        exp_kept = [kept_total * shares[i] / kept_share for i in kept]
        chi2 = _chi2_sum([float(counts[i]) for i in kept], exp_kept)
        p = float(special.chdtrc(df, chi2))

    if stray:
        return SrmResult(
            chi2=chi2,
            p_value=0.0,
            df=df,
            flagged=True,
            status=SrmStatus.UNITS_IN_ZERO_WEIGHT_ARM,
            expected_counts=expected,
            reason=f"units observed in arm(s) {stray} configured with weight 0",
        )
    if total == 0:
        return SrmResult(None, None, df, False, SrmStatus.NO_DATA, expected, "no units observed yet")
    if len(kept) < 2:
        return SrmResult(
            None, None, df, False, SrmStatus.SINGLE_ARM, expected, "fewer than two arms with positive weight"
        )
    assert chi2 is not None and p is not None
    if p < SRM_P_THRESHOLD:
        return SrmResult(
            chi2, p, df, True, SrmStatus.MISMATCH, expected, f"chi-square p = {p:.3g} < {SRM_P_THRESHOLD}"
        )
    return SrmResult(chi2, p, df, False, SrmStatus.OK, expected)


def _chi2_sum(observed: Sequence[float], expected: Sequence[float]) -> float:
    """Pearson's statistic sum((o - e)^2 / e), +inf when it exceeds the float range.

    Written as ``d * (d / e)`` so a tiny expected count (a weight near 1e-308) overflows to
    +inf instead of raising; the p-value of an infinite statistic is 0 (certain mismatch).
    """
    terms = []
    for o, e in zip(observed, expected, strict=True):
        d = o - e
        terms.append(d * (d / e))
    if not all(math.isfinite(t) for t in terms):
        return math.inf
    try:
        return math.fsum(terms)
    except OverflowError:
        return math.inf
