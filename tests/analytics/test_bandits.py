"""The bandit update and results on real rows (analytics/bandits.py): periods of first exposure,
sticky units left in their first period, the schedule's idempotence, the stratified lift."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from analytics.bandits import bandit_periods, bandit_results, bandit_update, running_bandit_ids
from analytics.stats.bandit import DEFAULT_DRAWS
from analytics.tasks import update_bandit
from muse_experiments.experiments.models import BanditUpdate, Experiment, ExperimentPhase
from routing.catalogue import avocado_id
from tests.analytics.conftest import Raw
from tests.factories import make_experiment, seed_catalogue

SETTINGS = {
    "metric": "task_success",
    "update_every_minutes": 10,
    "explore_minutes": 0,
    "min_weight_per_arm": 0.05,
    "stop_when_probability_best": 0.99,
}


def _bandit(**settings) -> Experiment:
    seed_catalogue()
    return make_experiment(
        key="bandit",
        arms=[("control", avocado_id(14), 0.5), ("b", avocado_id(15), 0.5)],
        type="bandit",
        bandit={**SETTINGS, **settings},
    )


def _units(raw: Raw, prefix: str, variant: str, n: int, successes: int) -> None:
    for i in range(n):
        unit = f"{prefix}-{variant}-{i}"
        raw.expose(unit, variant)
        if i < successes:
            raw.event(unit, "task_success", 1.0)


@pytest.mark.django_db
def test_an_update_moves_weights_to_the_better_arm_once_per_slot():
    experiment = _bandit()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 60, 25)
    _units(raw, "p1", "b", 60, 30)
    now = experiment.started_at + timedelta(minutes=25)
    update = bandit_update(experiment=experiment, now=now)
    assert update is not None and update.slot == 2 and update.decision == "update" and update.winner == ""
    assert update.units == {"control": 60, "b": 60}
    p_b = update.probability_best["b"]
    assert 0.6 < p_b < 0.99
    # GrowthBook's additive floor on the 1e-4 grid
    assert update.weights["b"] == pytest.approx(0.05 + 0.9 * p_b, abs=1e-4)
    assert bandit_update(experiment=experiment, now=now) is None  # run twice: nothing more
    assert bandit_update(experiment=experiment, now=now + timedelta(minutes=4)) is None  # same slot, late
    experiment.refresh_from_db()
    phases = ExperimentPhase.objects.filter(experiment=experiment).order_by("number")
    assert [p.reason for p in phases] == ["start", "bandit"] and experiment.phase == 2


@pytest.mark.django_db
def test_sticky_units_stay_in_their_first_period_with_all_their_outcomes():
    experiment = _bandit()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 40, 15)
    _units(raw, "p1", "b", 40, 20)
    bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10))
    experiment.refresh_from_db()
    raw.phase = experiment.phase  # period 2: returning units are sticky, new ones assigned
    for i in range(10):
        raw.expose(f"p1-control-{20 + i}", "control", reason="sticky")
    _units(raw, "p2", "control", 5, 1)
    _units(raw, "p2", "b", 45, 20)
    periods = bandit_periods(experiment=experiment)
    assert [p.phase for p in periods] == [1, 2]
    assert {k: s.n for k, s in periods[0].stats.items()} == {"control": 40, "b": 40}
    assert {k: s.n for k, s in periods[1].stats.items()} == {"control": 5, "b": 45}
    assert periods[0].stats["b"].sum == 20 and periods[1].stats["b"].sum == 20
    results = bandit_results(experiment=experiment)
    assert [p["units"] for p in results["periods"]] == [{"control": 40, "b": 40}, {"control": 5, "b": 45}]
    assert results["periods"][1]["weights"] == periods[1].weights
    assert results["periods"][1]["srm"]["status"] in ("ok", "mismatch")
    (lift,) = results["lifts"]
    # period weights 80/130 and 50/130; differences 0.50 − 0.375 and 20/45 − 1/5
    expected = (80 / 130) * (0.5 - 0.375) + (50 / 130) * (20 / 45 - 0.2)
    assert lift["variant"] == "b" and lift["absolute_lift"] == pytest.approx(expected)
    assert lift["absolute_ci"][0] < expected < lift["absolute_ci"][1]
    assert [u["slot"] for u in results["updates"]] == [1]


@pytest.mark.django_db
def test_exploration_keeps_equal_weights_and_the_fan_out_visits_running_bandits():
    experiment = _bandit(explore_minutes=60)
    raw = Raw(experiment)
    _units(raw, "p1", "control", 50, 5)
    _units(raw, "p1", "b", 50, 40)
    update = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=30))
    assert update.decision == "explore" and update.weights == {"control": 0.5, "b": 0.5}
    assert update.winner == "" and update.probability_best["b"] > 0.99
    experiment.refresh_from_db()
    assert experiment.phase == 1  # equal weights again: no new phase
    assert running_bandit_ids() == [experiment.id]
    assert update_bandit(experiment.id) is not None  # the task, now: slot 0 had no update yet
    assert update_bandit(experiment.id) is None  # and it ran once
    assert BanditUpdate.objects.filter(experiment=experiment).count() == 2


@pytest.mark.django_db
def test_a_clear_winner_gets_the_traffic_and_the_bandit_stops_updating(client):
    from muse_experiments.experiments.assignment.engine import route
    from muse_experiments.experiments.models import AuditEntry
    from muse_experiments.experiments.selectors import assignment_snapshot, sticky_variants

    experiment = _bandit(stop_when_probability_best=0.95)
    raw = Raw(experiment)
    _units(raw, "p1", "control", 100, 10)
    _units(raw, "p1", "b", 100, 60)
    update = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=11))
    assert update.decision == "winner" and update.winner == "b"
    # all but the control's floor of 0.05 to the winner, in a new period
    assert update.weights == {"control": 0.05, "b": 0.95} and update.phase == 2
    assert "declared the winner" in update.message and "95.00%" in update.message
    experiment.refresh_from_db()
    assert experiment.status == "running" and experiment.phase == 2
    assert {v.key: v.weight for v in experiment.variants.all()} == {"control": 0.05, "b": 0.95}
    audit = AuditEntry.objects.get(action="bandit_winner", actor="bandit")
    assert audit.changes["winner"] == "b" and audit.changes["phase"] == [1, 2]
    assert audit.changes["weights"] == [{"control": 0.5, "b": 0.5}, {"control": 0.05, "b": 0.95}]
    assert not AuditEntry.objects.filter(action="stop").exists()
    # the decision is final: later slots make no update, though the bandit still runs
    later = experiment.started_at + timedelta(minutes=45)
    assert bandit_update(experiment=experiment, now=later) is None
    assert running_bandit_ids() == [experiment.id] and BanditUpdate.objects.count() == 1
    # a unit first exposed to the control keeps it (the sticky scope spans both phases); new units
    # are hashed with the winner's weights
    snapshot = assignment_snapshot()
    kept = sticky_variants(experiment_ids=[experiment.id], session_id="p1-control-3", user_id="")
    assert kept == {(experiment.id, 2): "control"}
    assert route(snapshot, session_id="p1-control-3", user_id="", sticky=kept).variant_key == "control"
    fresh = [route(snapshot, session_id=f"new-{i}", user_id="").variant_key for i in range(400)]
    assert 360 <= fresh.count("b") <= 395  # 95 % of 400 = 380, binomial sd ≈ 4.4
    results = bandit_results(experiment=experiment)
    assert results["winner"] == "b" and results["winner_update"]["phase"] == 2
    assert results["winner_update"]["weights"] == {"control": 0.05, "b": 0.95}
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    page = client.get("/results/bandit/").content.decode()
    assert "Winner: b" in page and "from phase 2 it gets 95 % of new units" in page


@pytest.mark.django_db
def test_an_arm_credibly_over_the_cost_cap_keeps_the_floor_and_cannot_win(client):
    from muse_experiments.experiments.models import AuditEntry

    experiment = _bandit(stop_when_probability_best=0.95, max_cost_usd_per_call=0.002)
    raw = Raw(experiment)
    _units(raw, "p1", "control", 60, 10)
    _units(raw, "p1", "b", 60, 45)  # far better, and far dearer
    for i in range(60):
        for j in range(2):
            raw.call(f"p1-control-{i}", "control", cost_usd="0.001")
            raw.call(f"p1-b-{i}", "b", cost_usd=f"{0.004 + 0.001 * ((i + j) % 3):.3f}")
    update = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=11))
    assert update.decision == "update" and update.winner == ""
    assert update.weights == {"control": 0.95, "b": 0.05}  # b held at the floor, control alone within the cap
    assert update.probability_best == {"control": 1.0, "b": 0.0}
    assert "held at the floor: b" in update.message
    cost = AuditEntry.objects.get(action="bandit_update").changes["cost"]
    assert cost["cap_usd_per_call"] == 0.002
    assert cost["arms"]["control"]["cost_per_call"] == pytest.approx(0.001)
    assert cost["arms"]["b"]["cost_per_call"] == pytest.approx(0.005, abs=2e-4)
    assert cost["arms"]["b"]["over_cap"] and not cost["arms"]["control"]["over_cap"]
    results = bandit_results(experiment=experiment)
    assert results["cost"]["arms"]["b"]["probability_over"] > 0.999
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    page = client.get("/results/bandit/").content.decode()
    assert "Cost per call against the cap of $0.002" in page


@pytest.mark.django_db
def test_the_results_page_shows_weights_over_time_probability_best_and_the_stratified_lift(client):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    experiment = _bandit()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 60, 25)
    _units(raw, "p1", "b", 60, 30)
    bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10))
    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    response = client.get("/results/bandit/")
    assert response.status_code == 200
    page = response.content.decode()
    for text in (
        "Weights over time",
        "Probability best, per update",
        "Lift against control, stratified by period",
        "P(b best)",
        'id="data-bandit-weights"',
    ):
        assert text in page, text
    exported = client.get("/results/bandit/", {"export": "json", "table": "bandit_weights"})
    assert exported.status_code == 200
    rows = exported.json()["rows"] if isinstance(exported.json(), dict) else exported.json()
    assert [r["phase"] for r in rows] == [1, 2]
    assert rows[0]["w_control"] == 0.5 and rows[0]["n_b"] == 60
    assert "a schedule minute lasts" not in page  # 60 s: nothing to say


@pytest.mark.django_db
def test_the_results_page_says_when_a_schedule_minute_is_shortened(admin_client, settings):
    settings.BANDIT_MINUTE_S = 4.0
    _bandit()
    page = admin_client.get("/results/bandit/").content.decode()
    assert "(a schedule minute lasts 4.0 s on this platform: BANDIT_MINUTE_S)" in page


@pytest.mark.django_db
def test_a_bandit_phase_snapshot_analyses_the_units_new_to_that_phase():
    from analytics.services import results_compute

    experiment = _bandit()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 40, 15)
    _units(raw, "p1", "b", 40, 20)
    bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10))
    experiment.refresh_from_db()
    raw.phase = experiment.phase
    for i in range(30):  # returners assigned under the old 50/50 weights
        raw.expose(f"p1-control-{i}", "control", reason="sticky")
    _units(raw, "p2", "control", 4, 1)
    _units(raw, "p2", "b", 56, 25)
    snapshot = results_compute(experiment=experiment, apply_guardrails=False)
    units = {v["key"]: v["units"] for v in snapshot.results["variants"]}
    assert snapshot.phase == 2 and units == {"control": 4, "b": 56}


@pytest.mark.django_db
def test_an_update_without_new_data_is_recorded_but_keeps_the_phase_and_its_weights():
    experiment = _bandit()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 60, 25)
    _units(raw, "p1", "b", 60, 30)
    first = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10))
    assert first.decision == "update" and first.phase == 2
    # the next slots see the same units: only the Monte Carlo seed differs
    later = []
    for slot in (2, 3, 4):
        experiment.refresh_from_db()  # as the schedule's task loads it
        later.append(
            bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10 * slot + 1))
        )
    assert [u.decision for u in later] == ["unchanged"] * 3
    assert [u.phase for u in later] == [2, 2, 2]
    assert all(u.weights == first.weights for u in later)  # the weights in force, not the noisy ones
    assert len({u.probability_best["b"] for u in [first, *later]}) > 1  # P(best) recorded as drawn
    # two draws of the same P(best) differ by Monte Carlo noise only: the difference's standard error
    # is at most sqrt(2) * 0.5 / sqrt(draws) (~0.0071 at 10,000 draws); 4 of them bound it (the seed
    # follows the experiment's id, so the draws differ from run to run)
    bound = 4 * math.sqrt(2) * 0.5 / math.sqrt(DEFAULT_DRAWS)
    assert all(abs(u.probability_best["b"] - first.probability_best["b"]) < bound for u in later)
    experiment.refresh_from_db()
    assert experiment.phase == 2
    assert ExperimentPhase.objects.filter(experiment=experiment).count() == 2
    # new data that moves the posterior does open a phase
    raw.phase = experiment.phase
    # the control catches up, far from a winner: P(control best) ~0.71 over both periods, ~0.92 on
    # this one alone (60 vs 35 put it at ~0.987 against the 0.99 threshold, so the Monte Carlo seed,
    # which follows the experiment's id, sometimes declared it the winner on PostgreSQL)
    _units(raw, "p2", "control", 100, 55)
    _units(raw, "p2", "b", 100, 45)
    moved = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=51))
    assert (moved.decision, moved.phase) == ("update", 3)
    assert moved.weights["control"] > first.weights["control"] + 0.1


@pytest.mark.django_db
def test_an_update_with_an_arm_of_all_successes_and_one_of_all_failures_declares_the_winner():
    experiment = _bandit(stop_when_probability_best=0.95)
    raw = Raw(experiment)
    _units(raw, "p1", "control", 60, 0)  # every unit failed
    _units(raw, "p1", "b", 60, 60)  # every unit succeeded
    update = bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=10))
    assert update is not None and update.winner == "b"
    assert update.probability_best == {"control": 0.0, "b": 1.0}
    (lift,) = bandit_results(experiment=experiment)["lifts"]
    assert (lift["absolute_lift"], lift["p_value"]) == (1.0, 0.0)


@pytest.mark.django_db
def test_a_bandit_stored_with_a_quantile_metric_is_skipped_and_its_page_says_why(admin_client):
    """A bandit saved before quantile metrics were refused (or whose stored settings were edited
    by hand): the scheduled update skips it instead of failing with IndexError, and its results
    page and exports answer 200 with the reason instead of 500."""
    experiment = _bandit()
    Experiment.objects.filter(pk=experiment.pk).update(
        primary_metric="latency_p95_ms", bandit={**experiment.bandit, "metric": "latency_p95_ms"}
    )
    experiment.refresh_from_db()
    raw = Raw(experiment)
    _units(raw, "p1", "control", 5, 2)
    _units(raw, "p1", "b", 5, 3)
    assert bandit_update(experiment=experiment, now=experiment.started_at + timedelta(minutes=25)) is None
    assert not BanditUpdate.objects.filter(experiment=experiment).exists()
    results = bandit_results(experiment=experiment)
    assert results["status"] == "unsupported_metric"
    assert "'latency_p95_ms' is a quantile metric" in results["reason"]
    response = admin_client.get("/results/bandit/")
    assert response.status_code == 200
    assert "is a quantile metric; a bandit can optimise only" in response.content.decode()
    exported = admin_client.get("/results/bandit/", {"export": "json", "table": "bandit_weights"})
    assert exported.status_code == 200
