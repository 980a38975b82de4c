"""The rollout decision at one check: roll back, advance, or hold (pure Python, no Django).

Inputs are the guardrail comparisons of the current step (its own experiment phase): per metric
the candidate-minus-control estimate, its standard error and the units of both arms, as
:func:`analytics.stats.compare` returns them for any metric type (ratio, mean, proportion,
quantile). Each is tested with the always-valid sequential test of
:mod:`analytics.stats.sequential` (Waudby-Smith et al. 2023; the p-value stays valid at every
check, however many), at ``alpha / (guardrails × steps with a control)`` so the chance of a false
rollback over the whole ramp stays below ``alpha`` (Bonferroni). The tuning parameter of a step
is fixed before its data: the total units the step needs, ``min_units × 100 / percent``.

Order of the rules (:func:`rollout_decide`):

1. a **breach** — a guardrail significantly worse for the candidate (always-valid p < the
   per-test level, effect in the bad direction, both arms with ``MIN_BREACH_UNITS``) → rollback;
2. paused → hold; 3. the step held less than its minimum minutes → hold;
4. fewer candidate units than the step's minimum → hold;
5. a guardrail **waiting for data** — an arm with fewer units that have an observation of the
   metric (e.g. an outcome event posted) than the step's minimum units (at least 1) → hold. The
   step's minimum must be met by units that say something about every guardrail: with no event
   at all, an event metric is 0 for every unit and comes back tested (0 vs 0: ``ok`` for a
   proportion, ``constant_identical`` for a mean), though nobody observed anything. A metric
   constant *with* data (no error in either arm over many calls) is a clean result;
6. a guardrail that could not be tested at this check (no comparison, or an arm with fewer than
   2 units) → hold, so a step never advances on a guardrail nobody looked at;
7. otherwise → advance.

**Standard error 0** (every unit of each arm has the same value, e.g. the same cost per call, or
no error at all: status ``constant_identical`` or ``zero_variance``, or a proportion at 0 or 100 %
in both arms) has no z-statistic, so it is decided here, not by the sequential test
(:func:`always_valid_worse`): equal values → a clean guardrail (``always_valid_p`` 1); different
values → the difference is certain (``always_valid_p`` 0, ``certain`` in the evidence), a
breach when it is in the bad direction (with ``MIN_BREACH_UNITS`` per arm, as any breach), clean
when it is in the good one. Neither holds the step: it advances once its minimums are met.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from .stats import sequential_p_value, sequential_rho

#: Both arms need this many units before a breach counts (the sequential test is asymptotic).
MIN_BREACH_UNITS = 30
#: Comparison statuses that count as "tested": a test ran, or both arms are constant (standard
#: error 0: the same value, nothing to see; different values, a certain difference).
TESTED_STATUSES = ("ok", "constant_identical", "zero_variance")
#: Statuses of comparisons whose arms are both constant (standard error 0).
CONSTANT_STATUSES = ("constant_identical", "zero_variance")
#: Reason of a hold for a guardrail waiting for data (also the history entry's reason).
WAITING_FOR_DATA = "waiting_for_data"


@dataclass(frozen=True)
class GuardrailReading:
    """One guardrail at one check: ``estimate`` = candidate − control in the metric's unit, its
    ``std_error``, units per arm, and the direction. ``status`` is the comparison's status.
    ``control_with_data`` / ``treatment_with_data``: units per arm with at least one observation
    of the metric (an event of its name, a call with its value); None when unknown (then the
    units per arm stand for them)."""

    metric: str
    status: str
    higher_is_better: bool
    control_n: int = 0
    treatment_n: int = 0
    estimate: float | None = None
    std_error: float | None = None
    relative_lift: float | None = None
    control_with_data: int | None = None
    treatment_with_data: int | None = None

    @property
    def units_with_data(self) -> tuple[int, int]:
        """``(control, candidate)`` units with data; the units per arm where that is unknown."""
        return (
            self.control_n if self.control_with_data is None else self.control_with_data,
            self.treatment_n if self.treatment_with_data is None else self.treatment_with_data,
        )

    def waiting_for_data(self, min_units: int) -> bool:
        """An arm has fewer than ``min_units`` (at least 1) units with data (a missing comparison
        is untested, not waiting)."""
        return self.status != "missing" and min(self.units_with_data) < max(min_units, 1)


@dataclass(frozen=True)
class RolloutDecision:
    """``action``: rollback | advance | hold; ``reason`` a short code; ``message`` for people;
    ``evidence``: the readings and each test's always-valid p-value and level."""

    action: str
    reason: str
    message: str
    evidence: dict = field(default_factory=dict)


def per_test_level(*, alpha: float, guardrails: int, steps: Sequence[float]) -> float:
    """Per-test level: ``alpha`` split over guardrails × steps that still have a control."""
    tested_steps = max(sum(1 for s in steps if s < 100), 1)
    return alpha / (max(guardrails, 1) * tested_steps)


def step_tuning(*, min_units: int, percent: float) -> float:
    """Total units (both arms) at which the step's confidence sequence is tightest."""
    return max(float(min_units) * 100.0 / max(percent, 1e-9), 100.0)


def certain_difference(reading: GuardrailReading) -> bool | None:
    """Whether a reading with standard error 0 shows a difference: True (different constants, the
    difference is certain), False (the same value in both arms); None when its standard error is
    not 0 or it was not tested (then the sequential test decides)."""
    if reading.status not in TESTED_STATUSES or reading.estimate is None:
        return None
    if reading.status == "ok" and reading.std_error != 0.0:
        return None
    if reading.status == "constant_identical":
        return False
    return reading.estimate != 0.0


def always_valid_worse(
    reading: GuardrailReading, *, level: float, tuning: float
) -> tuple[bool, float | None]:
    """``(worse, always-valid two-sided p)`` of one reading (worse: p < level and the estimate
    in the bad direction, with ``MIN_BREACH_UNITS`` per arm).

    Standard error 0 (both arms constant; see the module docstring): p is 1 for equal values and
    0 for different ones (the limit of the always-valid p as z grows without bound), so a certain
    difference in the bad direction is a breach. p is None when no test ran."""
    bad = reading.estimate is not None and (
        reading.estimate < 0 if reading.higher_is_better else reading.estimate > 0
    )
    enough = min(reading.control_n, reading.treatment_n) >= MIN_BREACH_UNITS
    certain = certain_difference(reading)
    if certain is not None:
        return bool(certain and bad and enough), 0.0 if certain else 1.0
    if reading.status != "ok" or not reading.std_error or reading.estimate is None:
        return False, None
    n = reading.control_n + reading.treatment_n
    p = float(sequential_p_value(reading.estimate / reading.std_error, n, sequential_rho(level, tuning)))
    return bool(bad and enough and p < level), p


def rollout_decide(
    *,
    readings: Sequence[GuardrailReading],
    steps: Sequence[float],
    percent: float,
    held_minutes: float,
    min_minutes: float,
    min_units: int,
    candidate_units: int,
    paused: bool = False,
    alpha: float = 0.05,
) -> RolloutDecision:
    """The decision at one check (rules in the module docstring).

    Args:
        readings: one per guardrail (a guardrail missing from the results counts as untested:
            pass it with ``status="missing"``).
        steps: the ramp in percent; percent: the current step's percent.
        held_minutes: minutes since the step started; min_minutes / min_units: the step minimums.
        candidate_units: units on the candidate in the step.

    Raises:
        ValueError: alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    level = per_test_level(alpha=alpha, guardrails=len(readings), steps=steps)
    tuning = step_tuning(min_units=min_units, percent=percent)
    tests, breaches = [], []
    for r in readings:
        worse, p = always_valid_worse(r, level=level, tuning=tuning)
        tests.append(
            {**asdict(r), "always_valid_p": p, "worse": worse, "certain": bool(certain_difference(r))}
        )
        if worse:
            breaches.append(tests[-1])
    evidence = {
        "percent": percent,
        "level": level,
        "tuning": tuning,
        "held_minutes": held_minutes,
        "candidate_units": candidate_units,
        "guardrails": tests,
    }
    if breaches:
        worst = min(breaches, key=lambda b: b["always_valid_p"])
        lift = worst.get("relative_lift")
        lift_text = f", relative lift {lift:+.1%}" if lift is not None and math.isfinite(lift) else ""
        why = (
            f"both arms constant, difference {worst['estimate']:+.4g} certain (standard error 0)"
            if worst["certain"]
            else f"always-valid p={worst['always_valid_p']:.2g} < {level:.2g}"
        )
        message = f"guardrail {worst['metric']} worse for the candidate at {percent:g} % ({why}{lift_text})"
        return RolloutDecision("rollback", "rolled_back_guardrail", message, evidence)
    if paused:
        return RolloutDecision("hold", "paused", "paused: guardrails checked, no advance", evidence)
    if held_minutes < min_minutes:
        return RolloutDecision(
            "hold", "min_time", f"step held {held_minutes:.0f} of {min_minutes:g} minutes", evidence
        )
    if candidate_units < min_units:
        return RolloutDecision(
            "hold", "min_units", f"{candidate_units} of {min_units} candidate units", evidence
        )
    waiting = [r for r in readings if r.waiting_for_data(min_units)]
    if waiting:
        evidence["waiting_for_data"] = [r.metric for r in waiting]
        counts = ", ".join(
            f"{r.metric} (units with data: control {r.units_with_data[0]}, candidate {r.units_with_data[1]})"
            for r in waiting
        )
        return RolloutDecision(
            "hold",
            WAITING_FOR_DATA,
            f"waiting for data: {counts}; each arm needs {max(min_units, 1)}",
            evidence,
        )
    untested = [r.metric for r in readings if r.status not in TESTED_STATUSES]
    if untested:
        return RolloutDecision(
            "hold", "untested_guardrail", f"no test yet for {', '.join(untested)}", evidence
        )
    return RolloutDecision("advance", "advanced", f"every guardrail clean at {percent:g} %", evidence)
