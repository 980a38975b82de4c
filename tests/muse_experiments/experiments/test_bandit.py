"""Bandit experiments in the experiments app: REST create/edit with their settings, the first
start's equal weights, and the update service (new phase, audit, idempotent slot, a winner's
weights and no update after it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from muse_experiments.experiments.bandit_config import (
    bandit_config_clean,
    equal_weights,
    is_exploring,
    update_slot,
)
from muse_experiments.experiments.models import AuditEntry, BanditUpdate, Experiment, ExperimentPhase
from muse_experiments.experiments.selectors import sticky_scope
from muse_experiments.experiments.services.bandit import bandit_slot_due, bandit_update_record, bandit_winner
from muse_experiments.experiments.services.lifecycle import experiment_start
from tests.factories import api_key
from tests.muse_experiments.conftest import V2, V14, V15

URL = "/api/v1/experiments"
ARMS = [
    {"key": "control", "weight": 0.5, "model": V14, "is_control": True},
    {"key": "b", "weight": 0.3, "model": V15},
    {"key": "c", "weight": 0.2, "model": V2},
]
SETTINGS = {
    "metric": "task_success",
    "update_every_minutes": 30,
    "explore_minutes": 60,
    "min_weight_per_arm": 0.05,
    "stop_when_probability_best": 0.95,
}


def writer() -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['analytics:read', 'experiments:write'])}")
    return c


def create(c: APIClient, key: str = "bandit", **extra):
    body = {"key": key, "name": key, "type": "bandit", "bandit": SETTINGS, "variants": ARMS, **extra}
    return c.post(URL, body, format="json")


@pytest.mark.django_db
def test_a_bandit_is_created_through_rest_with_its_settings(catalogue):
    response = create(writer())
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["type"] == "bandit" and body["bandit"] == {**SETTINGS, "max_cost_usd_per_call": None}
    assert body["primary_metric"] == "task_success" and body["status"] == "draft"
    assert AuditEntry.objects.get(action="create").changes["type"] == [None, "bandit"]


@pytest.mark.django_db
def test_omitted_bandit_settings_take_their_defaults(catalogue):
    response = create(writer(), bandit={"update_every_minutes": 5})
    assert response.status_code == 201, response.json()
    assert response.json()["bandit"] == {
        "metric": "task_success",
        "update_every_minutes": 5,
        "explore_minutes": 60,
        "min_weight_per_arm": 0.01,
        "stop_when_probability_best": 0.95,
        "max_cost_usd_per_call": None,
    }
    plain = writer().post(URL, {"key": "ab", "name": "ab", "variants": ARMS}, format="json")
    assert plain.status_code == 201 and plain.json()["type"] == "ab" and plain.json()["bandit"] == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bandit", "field"),
    [
        ({"min_weight_per_arm": 0.5}, "min_weight_per_arm"),
        ({"min_weight_per_arm": 0.001}, "min_weight_per_arm"),
        ({"update_every_minutes": 0}, "update_every_minutes"),
        ({"explore_minutes": -1}, "explore_minutes"),
        ({"stop_when_probability_best": 1.5}, "stop_when_probability_best"),
        ({"stop_when_probability_best": "high"}, "stop_when_probability_best"),
        ({"surprise": 1}, "surprise"),
        ({"max_cost_usd_per_call": 0}, "max_cost_usd_per_call"),
        ({"max_cost_usd_per_call": -0.01}, "max_cost_usd_per_call"),
        ({"max_cost_usd_per_call": 1000}, "max_cost_usd_per_call"),
        ({"max_cost_usd_per_call": "cheap"}, "max_cost_usd_per_call"),
        ({"max_cost_usd_per_call": True}, "max_cost_usd_per_call"),
    ],
)
def test_bad_bandit_settings_are_400_with_field_errors(catalogue, bandit, field):
    response = create(writer(), bandit=bandit)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]["bandit"]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_a_draft_bandit_turned_back_into_an_ab_test_drops_its_settings(catalogue):
    """``{"type": "ab"}`` alone: the settings filled in for the bandit go with it (it was a 400 on
    ``bandit``, a field the client had not sent)."""
    c = writer()
    created = create(c)
    back = c.patch(f"{URL}/bandit", {"version": created.json()["version"], "type": "ab"}, format="json")
    assert back.status_code == 200, back.json()
    assert (back.json()["type"], back.json()["bandit"]) == ("ab", {})
    assert Experiment.objects.get(key="bandit").bandit == {}


@pytest.mark.django_db
def test_a_bandit_metric_other_than_the_primary_metric_is_refused(catalogue):
    response = create(writer(), primary_metric="task_success", bandit={**SETTINGS, "metric": "latency_ms"})
    assert response.status_code == 400
    assert "primary metric" in str(response.json()["error"]["fields"]["bandit"])
    ab = writer().post(URL, {"key": "ab", "name": "ab", "variants": ARMS, "bandit": SETTINGS}, format="json")
    assert ab.status_code == 400 and "bandit" in ab.json()["error"]["fields"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("extra", "kind"),
    [
        ({"bandit": {"metric": "latency_p95_ms"}}, "quantile"),
        ({"primary_metric": "ttft_p50_ms", "bandit": {}}, "quantile"),
        ({"bandit": {"metric": "error_rate"}}, "ratio"),
    ],
)
def test_a_bandit_on_a_quantile_or_ratio_metric_is_refused_at_creation(catalogue, extra, kind):
    """A bandit draws from one yes/no or mean value per unit: a quantile (no per-unit value) or a
    ratio metric made every scheduled update fail and the results page answer 500."""
    response = create(writer(), key="bx4", **extra)
    assert response.status_code == 400, response.json()
    messages = response.json()["error"]["fields"]["bandit"]
    assert any(f"is a {kind} metric" in m and "proportion" in m and "mean" in m for m in messages), messages
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_no_edit_puts_a_bandit_on_a_quantile_metric(catalogue, admin_client):
    """Every path that sets a bandit's metric: PATCH of its settings or of its primary metric, an
    A/B test turned into a bandit, the admin form."""
    c = writer()
    version = create(c).json()["version"]
    for body in (
        {"bandit": {**SETTINGS, "metric": "latency_p95_ms"}},
        {"primary_metric": "ttft_p50_ms", "bandit": {**SETTINGS, "metric": "ttft_p50_ms"}},
    ):
        response = c.patch(f"{URL}/bandit", {"version": version, **body}, format="json")
        assert response.status_code == 400, response.json()
        assert "is a quantile metric" in str(response.json()["error"]["fields"]["bandit"])
    stored = Experiment.objects.get(key="bandit")
    assert (stored.primary_metric, stored.bandit["metric"], stored.version) == (
        "task_success",
        "task_success",
        version,
    )

    ab = c.post(
        URL, {"key": "ab", "name": "ab", "primary_metric": "latency_p95_ms", "variants": ARMS}, format="json"
    )
    assert ab.status_code == 201, ab.json()  # an A/B test compares quantiles well
    response = c.patch(f"{URL}/ab", {"version": ab.json()["version"], "type": "bandit"}, format="json")
    assert response.status_code == 400, response.json()
    assert "'latency_p95_ms' is a quantile metric" in str(response.json()["error"]["fields"]["bandit"])
    assert (Experiment.objects.get(key="ab").type, Experiment.objects.get(key="ab").bandit) == ("ab", {})

    from django.urls import reverse

    from tests.muse_experiments.experiments.test_admin import errors_of, form_data

    data = form_data(key="admin-bandit", type="bandit", primary_metric="latency_p95_ms", bandit="{}")
    response = admin_client.post(reverse("admin:muse_experiments_experiment_add"), data)
    assert "&#x27;latency_p95_ms&#x27; is a quantile metric" in errors_of(response)
    assert not Experiment.objects.filter(key="admin-bandit").exists()


def test_the_settings_check_names_each_bad_field():
    config, errors = bandit_config_clean(
        {"min_weight_per_arm": 0.3, "explore_minutes": 1.5}, primary_metric="m"
    )
    assert config["metric"] == "m"
    assert [m.split(":")[0] for m in errors["bandit"]] == ["explore_minutes", "min_weight_per_arm"]
    assert bandit_config_clean(None, primary_metric="m")[1] == {}


@pytest.mark.django_db
def test_the_first_start_sets_equal_weights_and_a_patch_may_change_settings_not_weights(catalogue):
    c = writer()
    assert create(c).status_code == 201
    experiment = experiment_start(experiment=Experiment.objects.get(key="bandit"), actor="test")
    weights = {v.key: v.weight for v in experiment.variants.all()}
    assert weights == equal_weights(["control", "b", "c"]) == {"control": 0.3334, "b": 0.3333, "c": 0.3333}
    assert ExperimentPhase.objects.get(experiment=experiment, number=1).weights == weights
    start = AuditEntry.objects.get(action="start")
    assert start.changes["weights"][1] == weights
    version = c.get(f"{URL}/bandit").json()["version"]
    moved = [{**a, "weight": w} for a, w in zip(ARMS, (0.5, 0.25, 0.25), strict=True)]
    response = c.patch(f"{URL}/bandit", {"version": version, "variants": moved}, format="json")
    assert response.status_code == 400 and "weight" in response.json()["error"]["fields"]
    response = c.patch(
        f"{URL}/bandit",
        {"version": version, "bandit": {**SETTINGS, "update_every_minutes": 10}},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["bandit"]["update_every_minutes"] == 10
    response = c.patch(f"{URL}/bandit", {"version": version + 1, "type": "ab"}, format="json")
    assert response.status_code == 400 and "type" in response.json()["error"]["fields"]


@pytest.mark.django_db
def test_a_floor_too_high_for_the_number_of_arms_cannot_start(catalogue):
    arms = [*ARMS, {"key": "d", "weight": 0.0, "model": V14}, {"key": "e", "weight": 0.0, "model": V15}]
    arms += [{"key": "f", "weight": 0.0, "model": V2}]
    assert create(writer(), variants=arms, bandit={**SETTINGS, "min_weight_per_arm": 0.2}).status_code == 201
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as caught:
        experiment_start(experiment=Experiment.objects.get(key="bandit"), actor="test")
    assert "min_weight_per_arm" in str(caught.value.message_dict["bandit"])


def _running_bandit() -> Experiment:
    assert create(writer()).status_code == 201
    return experiment_start(experiment=Experiment.objects.get(key="bandit"), actor="test")


@pytest.mark.django_db
def test_an_update_opens_a_phase_with_the_same_seed_once_per_slot(catalogue):
    experiment = _running_bandit()
    now = experiment.started_at + timedelta(minutes=95)
    slot = bandit_slot_due(experiment=experiment, now=now)
    assert slot == update_slot(started_at=experiment.started_at, now=now, every_minutes=30) == 3
    weights = {"control": 0.05, "b": 0.25, "c": 0.7}
    kwargs = {
        "slot": slot,
        "now": now,
        "decision": "update",
        "weights": weights,
        "probability_best": {"control": 0.0, "b": 0.2, "c": 0.8},
        "units": {"control": 100, "b": 100, "c": 100},
    }
    update = bandit_update_record(experiment=experiment, **kwargs)
    assert update is not None and update.phase == 2
    assert bandit_update_record(experiment=experiment, **kwargs) is None  # the same slot again
    experiment.refresh_from_db()
    assert experiment.phase == 2 and BanditUpdate.objects.count() == 1
    phases = list(ExperimentPhase.objects.filter(experiment=experiment).order_by("number"))
    assert [p.reason for p in phases] == ["start", "bandit"] and phases[1].weights == weights
    assert phases[0].seed == phases[1].seed and phases[0].ended_at is not None
    assert sticky_scope(Experiment.objects.prefetch_related("phases").get(pk=experiment.pk)) == (1, 2)
    audit = AuditEntry.objects.get(action="bandit_update")
    assert audit.actor == "bandit" and audit.changes["phase"] == [1, 2]
    assert audit.changes["weights"][1] == weights
    assert bandit_slot_due(experiment=experiment, now=now) is None
    assert bandit_slot_due(experiment=experiment, now=now + timedelta(minutes=30)) == 4


@pytest.mark.django_db
def test_a_winner_gets_its_weights_in_a_new_phase_and_no_update_follows(catalogue):
    experiment = _running_bandit()
    now = timezone.now()
    winner_weights = {"control": 0.05, "b": 0.05, "c": 0.9}
    update = bandit_update_record(
        experiment=experiment,
        slot=5,
        now=now,
        decision="winner",
        weights=winner_weights,
        probability_best={"control": 0.0, "b": 0.03, "c": 0.97},
        units={"control": 1000, "b": 1000, "c": 1000},
        winner="c",
        message="c is best",
    )
    experiment.refresh_from_db()
    assert update.winner == "c" and update.phase == 2
    assert experiment.status == "running" and experiment.phase == 2
    assert ExperimentPhase.objects.get(experiment=experiment, number=2).weights == winner_weights
    audit = AuditEntry.objects.get(action="bandit_winner", actor="bandit")
    assert audit.changes["winner"] == "c" and audit.changes["message"] == "c is best"
    assert audit.changes["weights"][1] == winner_weights and audit.changes["phase"] == [1, 2]
    assert not AuditEntry.objects.filter(action="stop").exists()
    assert bandit_winner(experiment=experiment) == update
    assert bandit_slot_due(experiment=experiment, now=now + timedelta(hours=3)) is None
    again = {**winner_weights, "c": 0.8, "b": 0.15}
    late = bandit_update_record(
        experiment=experiment,
        slot=9,
        now=now,
        decision="update",
        weights=again,
        probability_best={},
        units={},
    )
    assert late is None and BanditUpdate.objects.count() == 1  # a late worker cannot undo the winner


@pytest.mark.django_db
def test_a_cost_cap_is_accepted_through_rest_and_the_admin_form_refuses_a_bad_one(catalogue, admin_client):
    response = create(writer(), bandit={**SETTINGS, "max_cost_usd_per_call": 0.0025})
    assert response.status_code == 201, response.json()
    assert response.json()["bandit"]["max_cost_usd_per_call"] == 0.0025
    nulled = create(writer(), key="nulled", bandit={**SETTINGS, "max_cost_usd_per_call": None})
    assert nulled.status_code == 201 and nulled.json()["bandit"]["max_cost_usd_per_call"] is None
    from django.urls import reverse

    from tests.muse_experiments.experiments.test_admin import errors_of, form_data

    data = form_data(key="admin-bandit", type="bandit", bandit='{"max_cost_usd_per_call": -1}')
    response = admin_client.post(reverse("admin:muse_experiments_experiment_add"), data)
    assert "max_cost_usd_per_call: must be null (no cap) or a number of USD per call" in errors_of(response)
    assert not Experiment.objects.filter(key="admin-bandit").exists()
    data = form_data(key="admin-bandit", type="bandit", bandit='{"max_cost_usd_per_call": 0.003}')
    assert admin_client.post(reverse("admin:muse_experiments_experiment_add"), data).status_code == 302
    assert Experiment.objects.get(key="admin-bandit").bandit["max_cost_usd_per_call"] == 0.003


def test_the_schedule_minute_setting_shortens_slots_and_exploration():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    at = lambda s: start + timedelta(seconds=s)  # noqa: E731
    assert [update_slot(started_at=start, now=at(s), every_minutes=1) for s in (0, 59, 60, 150)] == [
        0,
        0,
        1,
        2,
    ]
    assert [
        update_slot(started_at=start, now=at(s), every_minutes=2, minute_s=4.0) for s in (0, 7.9, 8, 17)
    ] == [0, 0, 1, 2]
    assert is_exploring(started_at=start, now=at(3.9), explore_minutes=1, minute_s=4.0)
    assert not is_exploring(started_at=start, now=at(4), explore_minutes=1, minute_s=4.0)
    assert is_exploring(started_at=start, now=at(59), explore_minutes=1)


@pytest.mark.django_db
def test_a_short_schedule_minute_makes_a_new_slot_due_within_seconds(catalogue, settings):
    settings.BANDIT_MINUTE_S = 4.0
    experiment = _running_bandit()  # update every 30 minutes: 120 s of 4-second minutes
    start = experiment.started_at
    assert bandit_slot_due(experiment=experiment, now=start + timedelta(seconds=119)) == 0
    assert bandit_slot_due(experiment=experiment, now=start + timedelta(seconds=121)) == 1
