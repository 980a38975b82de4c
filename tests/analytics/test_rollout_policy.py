"""The rollout decision (analytics/rollout_policy.py): breach before minimums, the minimums, the
untested guardrail, and the always-valid p-value against the sequential module's formula."""

from __future__ import annotations

import dataclasses
import math

import pytest

from analytics.rollout_policy import GuardrailReading, per_test_level, rollout_decide, step_tuning
from analytics.stats import sequential_p_value, sequential_rho

STEPS = [1, 5, 25, 50, 100]


def _reading(metric="error_rate", estimate=0.0, se=0.01, n=(5000, 500), status="ok", higher=False):
    return GuardrailReading(
        metric=metric,
        status=status,
        higher_is_better=higher,
        control_n=n[0],
        treatment_n=n[1],
        estimate=estimate,
        std_error=se,
        relative_lift=None,
    )


def _decide(readings, **kw):
    args = {
        "steps": STEPS,
        "percent": 5.0,
        "held_minutes": 90,
        "min_minutes": 60,
        "min_units": 100,
        "candidate_units": 500,
    }
    return rollout_decide(readings=readings, **{**args, **kw})


def test_a_breach_rolls_back_even_before_the_step_minimums():
    d = _decide([_reading(estimate=0.06, se=0.01), _reading("cost_usd")], held_minutes=5, candidate_units=40)
    assert (d.action, d.reason) == ("rollback", "rolled_back_guardrail")
    level = 0.05 / (2 * 4)
    assert d.evidence["level"] == pytest.approx(level)
    tuning = step_tuning(min_units=100, percent=5.0)
    want = sequential_p_value(6.0, 5500, sequential_rho(level, tuning))
    assert d.evidence["guardrails"][0]["always_valid_p"] == pytest.approx(float(want), rel=1e-12)
    assert "error_rate" in d.message


def test_an_improvement_or_a_small_arm_is_not_a_breach():
    assert _decide([_reading(estimate=-0.06)]).action == "advance"  # fewer errors: better
    small = _decide([_reading(estimate=0.06, n=(5000, 10))])
    assert (small.action, small.reason) == ("hold", "waiting_for_data")  # too few to test: no advance
    assert _decide([_reading("task_success", estimate=0.06, higher=True)]).action == "advance"


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"held_minutes": 59}, "min_time"),
        ({"candidate_units": 99}, "min_units"),
        ({"paused": True}, "paused"),
    ],
)
def test_a_clean_step_holds_until_its_minimums(kw, reason):
    d = _decide([_reading()], **kw)
    assert (d.action, d.reason) == ("hold", reason)


def test_a_guardrail_without_a_test_holds_the_step():
    d = _decide([_reading(), _reading("task_success", status="insufficient_data")])
    assert (d.action, d.reason) == ("hold", "untested_guardrail")
    assert _decide([_reading(status="constant_identical", se=0.0)]).action == "advance"


def test_the_level_splits_alpha_over_guardrails_and_tested_steps():
    assert per_test_level(alpha=0.05, guardrails=4, steps=STEPS) == pytest.approx(0.05 / 16)
    assert math.isclose(step_tuning(min_units=100, percent=1), 10_000)
    with pytest.raises(ValueError):
        _decide([_reading()], alpha=1.5)


def _with_data(reading: GuardrailReading, control: int, treatment: int) -> GuardrailReading:
    return dataclasses.replace(reading, control_with_data=control, treatment_with_data=treatment)


def test_a_guardrail_with_no_observations_waits_for_data_but_a_constant_one_with_data_is_clean():
    no_events = _with_data(_reading("task_success", se=0.0, status="constant_identical", higher=True), 0, 0)
    d = _decide([_reading(), no_events])
    assert (d.action, d.reason) == ("hold", "waiting_for_data")
    assert d.evidence["waiting_for_data"] == ["task_success"]
    assert "control 0, candidate 0" in d.message
    no_errors = _with_data(_reading(se=0.0, status="constant_identical"), 5000, 500)
    assert _decide([no_errors]).action == "advance"


@pytest.mark.parametrize(
    ("control", "treatment", "min_units", "action"),
    [
        (99, 500, 100, "hold"),
        (5000, 99, 100, "hold"),
        (100, 100, 100, "advance"),
        (5000, 0, 0, "hold"),  # a step with no minimum still needs an observation
        (5000, 1, 0, "advance"),
    ],
)
def test_each_arm_needs_the_step_minimum_of_units_with_data(control, treatment, min_units, action):
    reading = _with_data(_reading(), control, treatment)
    assert _decide([reading], min_units=min_units).action == action


def test_waiting_for_data_neither_hides_a_breach_nor_outranks_the_step_minimums():
    breach = _with_data(_reading(estimate=0.06, se=0.01), 5000, 500)
    empty = _with_data(_reading("task_success", status="constant_identical", higher=True), 0, 0)
    assert _decide([breach, empty]).action == "rollback"
    assert _decide([empty], held_minutes=5).reason == "min_time"
    missing = GuardrailReading(metric="rating", status="missing", higher_is_better=True)
    assert _decide([_reading(), missing]).reason == "untested_guardrail"


@pytest.mark.parametrize(
    ("status", "estimate", "higher", "action", "p"),
    [
        ("zero_variance", 0.01, False, "rollback", 0.0),  # cost certainly higher: breach
        ("zero_variance", -0.01, False, "advance", 0.0),  # cost certainly lower: clean
        ("constant_identical", 0.0, False, "advance", 1.0),  # the same constant: clean
        ("ok", -1.0, True, "rollback", 0.0),  # proportion 100 % vs 0 %, Wald SE 0: breach
        ("ok", 0.0, True, "advance", 1.0),  # proportion 0 % vs 0 %, SE 0: clean
    ],
)
def test_a_guardrail_with_standard_error_zero_is_decided(status, estimate, higher, action, p):
    reading = _reading("g", estimate=estimate, se=0.0, status=status, higher=higher)
    d = _decide([reading])
    assert d.action == action
    (test,) = d.evidence["guardrails"]
    assert test["always_valid_p"] == p and test["certain"] is (estimate != 0.0)
    if action == "rollback":
        assert "difference" in d.message and "certain (standard error 0)" in d.message
    small = _reading("g", estimate=estimate, se=0.0, status=status, higher=higher, n=(29, 29))
    assert (
        _decide([small], min_units=10).action == "advance"
    )  # a certain breach also needs MIN_BREACH_UNITS per arm
