"""The rollout decision (analytics/rollout_policy.py): breach before minimums, the minimums, the
untested guardrail, and the always-valid p-value against the sequential module's formula."""

from __future__ import annotations

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
    assert _decide([_reading(estimate=0.06, n=(5000, 10))]).action == "advance"
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
