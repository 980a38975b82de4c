"""Result containers shared by the statistics engine, and JSON-safe serialisation.

Every result exposes ``to_dict()`` which never emits NaN or +/-Infinity: any
non-finite float (e.g. the open end of a one-sided confidence interval, or a
quantity that is undefined for the given ``status``) becomes ``None``, so the output
is always accepted by ``json.dumps(..., allow_nan=False)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = ["ComparisonResult", "CupedStatus", "IntervalMethod", "Status", "RelativeStatus", "json_safe"]


class Status:
    """Values of ``ComparisonResult.status`` (plain strings, stable API)."""

    OK = "ok"
    #: an arm has fewer than 2 units -> no variance estimate, no inference.
    INSUFFICIENT_DATA = "insufficient_data"
    #: both arms have (numerically) zero variance and different means: the difference
    #: is deterministic, a p-value/CI is not meaningful.
    ZERO_VARIANCE = "zero_variance"
    #: both arms are constant and equal (e.g. every unit has the same value).
    CONSTANT_IDENTICAL = "constant_identical"
    #: ratio metric whose denominator sums to 0 in some arm.
    RATIO_DENOMINATOR_ZERO = "ratio_denominator_zero"


class RelativeStatus:
    """Values of ``ComparisonResult.relative_status``."""

    OK = "ok"
    #: the control mean is 0 (or 0 up to 1e-12 relative to the data's scale).
    CONTROL_MEAN_ZERO = "control_mean_zero"
    #: the control mean is not distinguishable from 0 (Fieller's g = c^2 se_c^2 / mean_c^2
    #: >= 1, Fieller 1954): the ratio's confidence set is unbounded and the delta-method
    #: interval meaningless, so the relative lift is suppressed.
    CONTROL_MEAN_NEAR_ZERO = "control_mean_near_zero"
    #: the delta-method standard error of the relative lift is 0 (e.g. a treatment arm with
    #: mean exactly 0 and no variance: 5/1000 vs 0/1000): a zero-width interval is not a valid
    #: inference, so no relative CI or p-value is reported.
    ZERO_WIDTH = "zero_width_interval"
    #: the main comparison failed (see ``status``).
    NOT_COMPUTED = "not_computed"


class IntervalMethod:
    """Values of ``ComparisonResult.interval_method`` / ``relative_interval_method``: how the
    absolute / relative interval was built."""

    #: estimate ± (Welch t or normal) critical value × unpooled standard error (means, CUPED,
    #: delta-method ratio metrics).
    WALD = "wald"
    #: relative lift ± critical value × its delta-method standard error (Deng et al. 2018).
    DELTA = "delta"
    #: difference of two proportions: Newcombe's hybrid score interval from each arm's Wilson
    #: interval (Newcombe 1998, method 10; statsmodels ``confint_proportions_2indep(method=
    #: "newcomb")``); valid with 0 or n successes in an arm.
    NEWCOMBE = "newcombe"
    #: ratio of two proportions (relative lift + 1): MOVER-R from each arm's Wilson interval
    #: (Donner & Zou 2012); valid with 0 or n successes in an arm.
    MOVER_R = "mover_r"
    #: always-valid confidence sequence (Waudby-Smith et al. 2023) on the standard error.
    CONFIDENCE_SEQUENCE = "confidence_sequence"
    #: the same, on the Agresti–Caffo estimate and standard error of proportions (one success and
    #: one failure added to each arm; Agresti & Caffo 2000), never a zero-width sequence.
    CONFIDENCE_SEQUENCE_AGRESTI_CAFFO = "confidence_sequence_agresti_caffo"


class CupedStatus:
    """Values of ``ComparisonResult.cuped_status`` (None when the comparison had no covariate)."""

    #: the regression adjustment was applied.
    APPLIED = "applied"
    #: the pre-period covariate differs between arms (Welch test p < the balance threshold): the
    #: adjustment would carry the difference into the effect, so the unadjusted result is reported.
    COVARIATE_IMBALANCED = "covariate_imbalanced"
    #: the covariate is constant (typically missing, stored as 0) in one arm while it varies in the
    #: other: the unadjusted result is reported.
    COVARIATE_MISSING = "covariate_missing"


def json_safe(value: Any) -> Any:
    """Recursively convert ``value`` to JSON-safe builtins: non-finite floats -> None,
    tuples/arrays -> lists, numpy scalars -> Python scalars."""
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    return value


@dataclass(frozen=True, slots=True)
class ComparisonResult:
    """Treatment-vs-control comparison of one metric.

    Units: ``control_mean``/``treatment_mean``/``absolute_lift``/``absolute_ci`` are in
    the metric's units (for proportions: fractions in [0, 1]); ``relative_lift`` and
    ``relative_ci`` are fractions of ``|control_mean|`` (0.05 == +5 %), with the sign of
    the absolute difference even when the control mean is negative.

    Fields that cannot be computed for the given ``status`` are ``None`` (never NaN).
    One-sided tests have a half-open CI; the open end is ``+/-inf`` in the dataclass and
    ``None`` in :meth:`to_dict`.

    Attributes:
        status: "ok" or a :class:`Status` reason string.
        reason: human readable explanation when status != "ok" or relative lift is
            suppressed; otherwise None.
        method: "welch_t", "two_proportion_z", "ratio_delta_t", "cuped_welch_t",
            "sequential_*" ...
        alternative: "two-sided", "greater" (treatment > control) or "less".
        alpha: significance level; CIs have coverage 1 - alpha.
        control_n, treatment_n: units per arm.
        control_mean, treatment_mean: arm means (CUPED: regression-adjusted means).
        absolute_lift: treatment_mean - control_mean.
        absolute_ci: (low, high) CI of the absolute lift.
        std_error: standard error of absolute_lift (unpooled).
        relative_lift: absolute_lift / |control_mean|.
        relative_ci: delta-method CI on the ratio of means (Deng et al. 2018), not a
            rescaled absolute CI; for proportions the MOVER-R interval (Wilson limits).
        relative_std_error: delta-method standard error of relative_lift.
        relative_status: :class:`RelativeStatus` value.
        p_value: p-value of H0: no difference, for ``alternative`` (the absolute scale: the
            test that matches ``absolute_ci``).
        relative_p_value: p-value of H0: relative lift = 0 from the same test as
            ``relative_ci`` (delta method: ``relative_lift / relative_std_error``; proportions:
            the level at which the Newcombe / MOVER-R intervals touch 0), so the relative CI
            excludes 0 exactly when ``relative_p_value < alpha``; report it next to the
            relative CI. None when the relative lift is suppressed.
        statistic: t or z statistic.
        df: Welch-Satterthwaite degrees of freedom (None for z-tests).
        theta, variance_reduction: CUPED only -- the adjustment coefficient and the
            achieved fractional reduction of Var(absolute_lift) (0.3 == 30 %).
        interval_method, relative_interval_method: :class:`IntervalMethod` values naming how
            ``absolute_ci`` / ``relative_ci`` were built (None when there is no interval).
        cuped_status: :class:`CupedStatus` for a comparison with a covariate, else None.
        warning: a human readable caveat the page must show next to the result (e.g. why CUPED
            was not applied), else None.
        extra: method-specific additions (e.g. sequential tuning parameter, covariate balance).
    """

    status: str
    method: str
    alternative: str
    alpha: float
    control_n: int
    treatment_n: int
    control_mean: float | None = None
    treatment_mean: float | None = None
    absolute_lift: float | None = None
    absolute_ci: tuple[float, float] | None = None
    std_error: float | None = None
    relative_lift: float | None = None
    relative_ci: tuple[float, float] | None = None
    relative_std_error: float | None = None
    relative_status: str = RelativeStatus.NOT_COMPUTED
    p_value: float | None = None
    relative_p_value: float | None = None
    statistic: float | None = None
    df: float | None = None
    reason: str | None = None
    theta: float | None = None
    variance_reduction: float | None = None
    interval_method: str | None = None
    relative_interval_method: str | None = None
    cuped_status: str | None = None
    warning: str | None = None
    extra: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def is_significant(self) -> bool:
        """True iff status is ok and ``p_value < alpha``."""
        return self.ok and self.p_value is not None and self.p_value < self.alpha

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (no NaN/inf: non-finite values become None)."""
        return {f.name: json_safe(getattr(self, f.name)) for f in fields(self)}
