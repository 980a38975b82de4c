"""The scheduled rollout check on real rows: a breach rolls back to 0 % with evidence, audit and a
metric; a clean step advances once however often the check runs; a kill switch holds the ramp;
the results page shows the ramp and the alert."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from prometheus_client import REGISTRY

from analytics.rollouts import rollout_check
from analytics.tasks import check_rollout, check_rollouts
from muse_experiments.experiments.models import AuditEntry, Rollout
from muse_experiments.experiments.selectors import model_by_id_or_label
from muse_experiments.experiments.services.rollouts import rollout_create, rollout_start
from routing.catalogue import avocado_id
from routing.models import KillSwitch
from tests.analytics.conftest import Raw
from tests.factories import seed_catalogue


def _rollout(guardrails=("error_rate", "latency_p95_ms"), min_minutes=10, min_units=30) -> Rollout:
    seed_catalogue()
    rollout = rollout_create(
        key="ramp",
        candidate=model_by_id_or_label(avocado_id(15))[0],
        current=model_by_id_or_label(avocado_id(14))[0],
        steps=[1, 5, 25, 50, 100],
        step_min_minutes=min_minutes,
        step_min_units=min_units,
        guardrails=list(guardrails),
        actor="test",
    )
    return rollout_start(rollout=rollout, actor="test")


def _traffic(rollout: Rollout, *, candidate_error: float, control_error=0.02, units=60, seed=1) -> None:
    rng = random.Random(seed)
    rollout.experiment.refresh_from_db()
    raw = Raw(rollout.experiment)
    for i in range(2 * units):
        unit, variant = f"r{rollout.experiment.phase}-{i}", ("current", "candidate")[i % 2]
        raw.expose(unit, variant)
        for _ in range(3):
            failed = rng.random() < (candidate_error if variant == "candidate" else control_error)
            raw.call(unit, variant, status="failed" if failed else "succeeded", latency_ms=rng.gauss(300, 40))


@pytest.mark.django_db
def test_a_breach_rolls_back_to_zero_with_evidence_audit_and_a_metric(django_capture_on_commit_callbacks):
    rollout = _rollout()
    _traffic(rollout, candidate_error=0.6)
    before = REGISTRY.get_sample_value(
        "muse_rollout_rollbacks_total", {"rollout": "ramp", "metric": "error_rate"}
    )
    with django_capture_on_commit_callbacks(execute=True):
        decision = rollout_check(rollout_id=rollout.pk, now=rollout.step_started_at + timedelta(minutes=1))
    assert decision.action == "rollback"
    rollout.refresh_from_db()
    assert (rollout.state, rollout.percent) == ("rolled_back", 0.0)
    assert {v.key: v.weight for v in rollout.experiment.variants.all()} == {"current": 1.0, "candidate": 0.0}
    last = rollout.history.last()
    assert (last.reason, last.from_percent, last.to_percent) == ("rolled_back_guardrail", 1.0, 0.0)
    worse = [g for g in last.evidence["guardrails"] if g["worse"]]
    assert [g["metric"] for g in worse] == ["error_rate"] and worse[0]["always_valid_p"] < last.evidence[
        "level"
    ]
    assert last.evidence["snapshot"] and "error_rate" in last.message
    assert AuditEntry.objects.filter(action="rollout_roll_back", actor="analytics:rollouts").exists()
    after = REGISTRY.get_sample_value(
        "muse_rollout_rollbacks_total", {"rollout": "ramp", "metric": "error_rate"}
    )
    assert after == (before or 0.0) + 1.0
    assert rollout_check(rollout_id=rollout.pk) is None  # rolled back: nothing more to check


@pytest.mark.django_db
def test_a_clean_step_advances_once_however_often_the_check_runs():
    rollout = _rollout()
    _traffic(rollout, candidate_error=0.02)
    early = rollout_check(rollout_id=rollout.pk, now=rollout.step_started_at + timedelta(minutes=5))
    assert (early.action, early.reason) == ("hold", "min_time")
    now = rollout.step_started_at + timedelta(minutes=11)
    assert rollout_check(rollout_id=rollout.pk, now=now).action == "advance"
    assert rollout_check(rollout_id=rollout.pk, now=now).reason == "min_time"  # run twice: one advance
    rollout.refresh_from_db()
    assert (rollout.state, rollout.step, rollout.percent) == ("running", 1, 5.0)
    assert rollout.experiment.phase == 2
    later = rollout_check(rollout_id=rollout.pk, now=now + timedelta(minutes=30))
    assert (later.action, later.reason) == ("hold", "min_units")  # the new step has no units yet
    assert [h.reason for h in rollout.history.all()] == ["started", "advanced"]
    advanced = rollout.history.last()
    assert advanced.evidence["phase"] == 1 and len(advanced.evidence["guardrails"]) == 2


@pytest.mark.django_db
def test_a_kill_switch_wins_over_the_ramp():
    rollout = _rollout()
    _traffic(rollout, candidate_error=0.02)
    KillSwitch.objects.create(scope="experiment", target="ramp", reason="incident", updated_by="ops")
    now = rollout.step_started_at + timedelta(minutes=20)
    assert check_rollouts() == 1
    for _ in range(2):
        assert check_rollout(rollout.pk) == "hold"
    assert rollout_check(rollout_id=rollout.pk, now=now).reason == "held_kill_switch"
    rollout.refresh_from_db()
    assert rollout.percent == 1.0
    assert [h.reason for h in rollout.history.all()] == ["started", "held_kill_switch"]


@pytest.mark.django_db
def test_the_results_page_shows_the_ramp_and_the_rollback_alert(client):
    rollout = _rollout()
    _traffic(rollout, candidate_error=0.6)
    rollout_check(rollout_id=rollout.pk, now=timezone.now())
    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    page = client.get("/results/ramp/").content.decode()
    assert 'id="rollout"' in page and "Rolled back" in page
    assert "rolled_back_guardrail" in page and "error_rate" in page


@pytest.mark.django_db
def test_a_guardrail_without_outcome_events_holds_the_step_as_waiting_for_data_until_they_come():
    rollout = _rollout(guardrails=("error_rate", "task_success"))
    _traffic(rollout, candidate_error=0.02)  # calls, but no outcome event yet: task_success is 0 vs 0
    now = rollout.step_started_at + timedelta(minutes=11)
    for _ in range(2):  # the hold is written to the history once
        decision = rollout_check(rollout_id=rollout.pk, now=now)
        assert (decision.action, decision.reason) == ("hold", "waiting_for_data")
    rollout.refresh_from_db()
    assert (rollout.step, rollout.percent) == (0, 1.0)  # neither advanced nor rolled back
    assert [h.reason for h in rollout.history.all()] == ["started", "waiting_for_data"]
    waiting = rollout.history.last()
    assert waiting.evidence["waiting_for_data"] == ["task_success"]
    readings = {g["metric"]: g for g in waiting.evidence["guardrails"]}
    assert readings["task_success"]["status"] == "ok"  # 0 of 60 vs 0 of 60: it used to count as tested
    assert (
        readings["task_success"]["control_with_data"],
        readings["task_success"]["treatment_with_data"],
    ) == (
        0,
        0,
    )
    assert (readings["error_rate"]["control_with_data"], readings["error_rate"]["treatment_with_data"]) == (
        60,
        60,
    )
    assert "task_success" in waiting.message and "error_rate" not in waiting.message

    raw = Raw(rollout.experiment)
    for i in range(2 * 60):  # now every unit reports its task's outcome
        raw.event(f"r{rollout.experiment.phase}-{i}", "task_success", float(i % 3 != 0))
    assert rollout_check(rollout_id=rollout.pk, now=now + timedelta(minutes=1)).action == "advance"


@pytest.mark.django_db
def test_a_guardrail_constant_with_data_is_clean_and_the_step_advances():
    rollout = _rollout(guardrails=("error_rate",))
    _traffic(rollout, candidate_error=0.0, control_error=0.0)  # no error in either arm: 0 vs 0, with data
    decision = rollout_check(rollout_id=rollout.pk, now=rollout.step_started_at + timedelta(minutes=11))
    (reading,) = decision.evidence["guardrails"]
    assert reading["status"] == "constant_identical"
    assert (reading["control_with_data"], reading["treatment_with_data"]) == (60, 60)
    assert decision.action == "advance"


def _constant_cost_traffic(rollout: Rollout, *, control_cost: str, candidate_cost: str, units=60) -> None:
    """Every call of an arm costs the same: cost per unit is constant in each arm (SE 0)."""
    rollout.experiment.refresh_from_db()
    raw = Raw(rollout.experiment)
    for i in range(2 * units):
        unit, variant = f"c{rollout.experiment.phase}-{i}", ("current", "candidate")[i % 2]
        raw.expose(unit, variant)
        for _ in range(3):
            cost = candidate_cost if variant == "candidate" else control_cost
            raw.call(unit, variant, latency_ms=300.0, cost_usd=cost)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("candidate_cost", "action", "reason"),
    [
        ("0.002", "rollback", "rolled_back_guardrail"),  # dearer, certainly: breach
        ("0.0005", "advance", "advanced"),  # cheaper, certainly: clean
        ("0.001", "advance", "advanced"),  # the same constant: clean
    ],
)
def test_a_guardrail_constant_in_both_arms_is_decided_not_held_forever(
    client, candidate_cost, action, reason
):
    rollout = _rollout(guardrails=("cost_usd",))
    _constant_cost_traffic(rollout, control_cost="0.001", candidate_cost=candidate_cost)
    now = rollout.step_started_at + timedelta(minutes=11)
    decision = rollout_check(rollout_id=rollout.pk, now=now)
    assert (decision.action, decision.reason) == (action, reason)
    (reading,) = decision.evidence["guardrails"]
    assert reading["std_error"] == 0.0
    same = candidate_cost == "0.001"
    assert reading["status"] == ("constant_identical" if same else "zero_variance")
    assert reading["certain"] is (not same) and reading["always_valid_p"] == (1.0 if same else 0.0)
    rollout.refresh_from_db()
    last = rollout.history.last()
    assert last.reason == reason
    if action == "rollback":
        assert (rollout.state, rollout.percent) == ("rolled_back", 0.0)
        assert "both arms constant, difference +0.003 certain (standard error 0)" in last.message
        user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
        user.groups.add(Group.objects.get(name="Analyst"))
        client.force_login(user)
        page = client.get("/results/ramp/").content.decode()
        assert "cost_usd: both arms constant, difference +0.003 certain (SE 0) WORSE" in page
        step = client.get("/results/ramp/", {"phase": 1}).content.decode()  # the step rolled back
        assert "Worse (both arms constant: certain)" in step  # its guardrail's row in the metric table
    else:
        assert (rollout.state, rollout.percent) == ("running", 5.0)
