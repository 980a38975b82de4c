"""Progressive rollouts over REST: create (validated), start, pause, roll back, read; the
experiment they drive keeps candidate units on the candidate as the percent grows."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from muse_experiments.experiments.assignment.vectorised import assign_many
from muse_experiments.experiments.models import AuditEntry, Rollout
from muse_experiments.experiments.selectors import experiment_spec
from muse_experiments.experiments.services.rollouts import rollout_advance
from routing.catalogue import avocado_id
from tests.factories import api_key, seed_catalogue

BODY = {
    "key": "avocado-16",
    "model": avocado_id(15),
    "replaces": avocado_id(14),
    "steps": [1, 5, 25, 50, 100],
    "step_min_minutes": 30,
    "step_min_units": 200,
    "guardrails": ["error_rate", "latency_p95_ms", "cost_usd", "task_success"],
}


@pytest.fixture
def api(db):
    seed_catalogue()
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write', 'analytics:read'])}")


def test_create_start_pause_resume_and_roll_back(api):
    created = api.post("/api/v1/rollouts", BODY, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["state"], body["percent"], body["model"], body["replaces"]) == (
        "draft",
        0.0,
        avocado_id(15),
        avocado_id(14),
    )
    started = api.post("/api/v1/rollouts/avocado-16/start").json()
    assert (started["state"], started["step"], started["percent"]) == ("running", 0, 1.0)
    rollout = Rollout.objects.get(key="avocado-16")
    weights = {v.key: v.weight for v in rollout.experiment.variants.all()}
    assert weights == {"current": pytest.approx(0.99), "candidate": pytest.approx(0.01)}
    assert (
        rollout.experiment.status == "running" and rollout.experiment.guardrail_metrics == BODY["guardrails"]
    )
    assert rollout.experiment.name == "Rollout of avocado-v15 replacing avocado-v14"  # labels, not hex ids

    assert api.post("/api/v1/rollouts/avocado-16/pause").json()["state"] == "paused"
    assert api.post("/api/v1/rollouts/avocado-16/start").json()["state"] == "running"
    back = api.post("/api/v1/rollouts/avocado-16/rollback").json()
    assert (back["state"], back["percent"]) == ("rolled_back", 0.0)
    assert [h["reason"] for h in back["history"]] == ["started", "paused", "resumed", "rolled_back_manual"]
    assert back["history"][-1]["from_percent"] == 1.0 and back["history"][-1]["to_percent"] == 0.0
    assert {v.key: v.weight for v in rollout.experiment.variants.all()}["candidate"] == 0.0
    assert AuditEntry.objects.filter(action="rollout_roll_back", object_id=str(rollout.pk)).exists()
    # a rolled-back rollout cannot start again: a field error, not a 500
    again = api.post("/api/v1/rollouts/avocado-16/start")
    assert again.status_code == 400
    assert again.json()["error"]["fields"]["state"] == ["A rolled-back rollout cannot be started."]  # no code
    read = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(['analytics:read'])}")
    assert read.get("/api/v1/rollouts/avocado-16").json()["state"] == "rolled_back"
    assert read.post("/api/v1/rollouts/avocado-16/pause").status_code == 403


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "avocado/unknown"}, "model"),
        ({"replaces": "nope/none"}, "replaces"),
        ({"steps": [1, 5, 5, 100]}, "steps"),
        ({"steps": [1, 5, 50]}, "steps"),
        ({"steps": [0, 50, 100]}, "steps"),
        ({"guardrails": ["error_rate", "not_a_metric"]}, "guardrails"),
        ({"replaces": avocado_id(15)}, "replaces"),
        ({"key": "Bad Key"}, "key"),
        ({"steps": [i / 10 for i in range(1, 1000)] + [100]}, "steps"),  # 1,000 steps: never detects
    ],
)
def test_bad_input_is_a_400_with_field_errors(api, change, field):
    response = api.post("/api/v1/rollouts", {**BODY, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not Rollout.objects.exists()


@pytest.mark.parametrize(
    ("change", "errors"),
    [
        ({"steps": [True, 100]}, {"steps": {"0": ["Must be a JSON number (not a string or a boolean)."]}}),
        (
            {"steps": ["5", "100"]},
            {
                "steps": {
                    "0": ["Must be a JSON number (not a string or a boolean)."],
                    "1": ["Must be a JSON number (not a string or a boolean)."],
                }
            },
        ),
        ({"guardrails": ["error_rate", 5]}, {"guardrails": {"1": ["Must be a JSON string."]}}),
        (
            {"guardrails": ["error_rate", "cost_usd", "error_rate"]},
            {"guardrails": ["error_rate is listed more than once: name each guardrail once."]},
        ),
    ],
)
def test_list_items_of_the_wrong_json_type_or_repeated_are_400(api, change, errors):
    """A boolean or a string is not a step (DRF's FloatField took true as 1 and "5" as 5), a number
    is not a guardrail name, and a guardrail named twice would be tested twice (its alpha halved)."""
    response = api.post("/api/v1/rollouts", {**BODY, **change}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == errors
    assert not Rollout.objects.exists()


def test_a_unit_on_the_candidate_keeps_it_when_the_percent_grows(api):
    api.post("/api/v1/rollouts", BODY, format="json")
    api.post("/api/v1/rollouts/avocado-16/start")
    rollout = Rollout.objects.get(key="avocado-16")
    units = [f"session-{i}" for i in range(20_000)]
    at_1 = assign_many(experiment_spec(rollout.experiment), units)
    rollout_advance(rollout=rollout, actor="test")
    rollout.refresh_from_db()
    rollout.experiment.refresh_from_db()
    assert rollout.percent == 5.0 and rollout.experiment.phase == 2
    at_5 = assign_many(experiment_spec(rollout.experiment), units)
    candidate = 1 if rollout.experiment.variants.get(key="candidate").position else 0
    on_candidate_at_1 = at_1 == candidate
    assert 150 < on_candidate_at_1.sum() < 250  # about 1 %
    assert (at_5[on_candidate_at_1] == candidate).all()
    assert 900 < (at_5 == candidate).sum() < 1100  # about 5 %


def test_the_admin_lists_rollouts_and_shows_the_ramp_read_only(api, admin_client):
    api.post("/api/v1/rollouts", BODY, format="json")
    api.post("/api/v1/rollouts/avocado-16/start")
    rollout = Rollout.objects.get(key="avocado-16")
    listing = admin_client.get("/admin/muse_experiments/rollout/")
    assert listing.status_code == 200 and "avocado-16" in listing.content.decode()
    detail = admin_client.get(f"/admin/muse_experiments/rollout/{rollout.pk}/change/").content.decode()
    assert "started" in detail and "Running" in detail
    assert admin_client.get("/admin/muse_experiments/rollout/add/").status_code == 403


def test_a_rollout_rolls_back_even_when_the_candidate_model_was_disabled(api):
    from routing.models import ModelEndpoint

    api.post("/api/v1/rollouts", BODY, format="json")
    api.post("/api/v1/rollouts/avocado-16/start")
    ModelEndpoint.objects.filter(public_id=avocado_id(15)).update(enabled=False)
    back = api.post("/api/v1/rollouts/avocado-16/rollback")
    assert back.status_code == 200 and back.json()["percent"] == 0.0


def test_sessions_need_the_experiment_permissions(db):
    from tests.factories import user_in_group

    seed_catalogue()
    pm, analyst = APIClient(), APIClient()
    pm.force_login(user_in_group("Product manager", "pm"))
    analyst.force_login(user_in_group("Analyst", "ana"))
    assert analyst.post("/api/v1/rollouts", BODY, format="json").status_code == 403
    assert pm.post("/api/v1/rollouts", BODY, format="json").status_code == 201
    assert pm.post("/api/v1/rollouts/avocado-16/start").json()["state"] == "running"
    assert analyst.get("/api/v1/rollouts/avocado-16").json()["percent"] == 1.0
    assert analyst.post("/api/v1/rollouts/avocado-16/rollback").status_code == 403


def test_the_experiment_of_a_rollout_changes_its_ramp_only_through_the_rollout(api):
    """A PATCH of the weights, models, coverage or variant set of a rollout's experiment would move
    traffic behind the rollout's back (after a rollback, to 100 % on the candidate): a 400,
    nothing saved. Its descriptive fields still change; the rollout's own steps still apply."""
    api.post("/api/v1/rollouts", BODY, format="json")
    api.post("/api/v1/rollouts/avocado-16/start")
    api.post("/api/v1/rollouts/avocado-16/rollback")
    version = api.get("/api/v1/experiments/avocado-16").json()["version"]
    to_candidate = [
        {"key": "current", "weight": 0.0, "model": avocado_id(14)},
        {"key": "candidate", "weight": 1.0, "model": avocado_id(15)},
    ]
    other_model = [
        {"key": "current", "weight": 1.0, "model": avocado_id(13)},
        {"key": "candidate", "weight": 0.0, "model": avocado_id(15)},
    ]
    for edit, field in [
        ({"variants": to_candidate}, "variants"),
        ({"variants": other_model}, "variants"),
        ({"coverage": 0.5}, "coverage"),
    ]:
        refused = api.patch("/api/v1/experiments/avocado-16", {"version": version, **edit}, format="json")
        assert refused.status_code == 400, refused.content
        assert "rollout 'avocado-16'" in refused.json()["error"]["fields"][field][0]
    weights = {v.key: v.weight for v in Rollout.objects.get(key="avocado-16").experiment.variants.all()}
    assert weights == {"current": 1.0, "candidate": 0.0}
    renamed = api.patch(
        "/api/v1/experiments/avocado-16", {"version": version, "name": "Avocado 16 ramp"}, format="json"
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "Avocado 16 ramp"


def test_the_experiment_of_a_rollout_is_neither_started_alone_nor_re_randomised(api):
    """The admin's "Start" and "Re-randomise" actions (the lifecycle services) ran on a rollout's
    experiment: a start left the rollout in draft while traffic flowed, and a new seed moved the
    candidate's units back to the current model (phase 2, seed changed, rollout still "running")."""
    from django.core.exceptions import ValidationError

    from muse_experiments.experiments.services.lifecycle import experiment_rerandomise, experiment_start

    api.post("/api/v1/rollouts", BODY, format="json")
    rollout = Rollout.objects.get(key="avocado-16")
    with pytest.raises(ValidationError, match="start the rollout instead"):
        experiment_start(experiment=rollout.experiment, actor="pm")
    rollout.experiment.refresh_from_db()
    assert (rollout.experiment.status, rollout.experiment.phase) == ("draft", 0)
    assert api.post("/api/v1/rollouts/avocado-16/start").json()["state"] == "running"
    rollout.experiment.refresh_from_db()
    seed = rollout.experiment.seed
    with pytest.raises(ValidationError, match="roll the rollout back instead"):
        experiment_rerandomise(experiment=rollout.experiment, actor="pm")
    rollout.experiment.refresh_from_db()
    assert (rollout.experiment.seed, rollout.experiment.phase) == (seed, 1)


def test_a_live_rollouts_experiment_is_paused_stopped_or_archived_only_through_the_rollout(api, admin_client):
    """The admin's Pause/Stop buttons on a running (or paused) rollout's experiment would leave the
    rollout reporting a ramp that serves no one: refused with the rollout named, nothing changed.
    Once the rollout is rolled back, the experiment can be stopped and archived by hand."""
    from django.urls import reverse

    api.post("/api/v1/rollouts", BODY, format="json")
    api.post("/api/v1/rollouts/avocado-16/start")
    experiment = Rollout.objects.get(key="avocado-16").experiment
    for rollout_state in ("running", "paused"):
        if rollout_state == "paused":
            api.post("/api/v1/rollouts/avocado-16/pause")
        for action in ("pause", "stop"):
            url = reverse("admin:muse_experiments_experiment_lifecycle", args=[experiment.pk, action])
            page = admin_client.post(url, follow=True)
            text = page.content.decode()
            assert "avocado-16" in text and "ramp, which is still live" in text
            experiment.refresh_from_db()
            assert experiment.status == "running"
    assert AuditEntry.objects.filter(action__in=["pause", "stop"], object_id=str(experiment.pk)).count() == 0

    api.post("/api/v1/rollouts/avocado-16/rollback")
    for action, status in (("stop", "stopped"), ("archive", "archived")):
        url = reverse("admin:muse_experiments_experiment_lifecycle", args=[experiment.pk, action])
        admin_client.post(url)
        experiment.refresh_from_db()
        assert experiment.status == status
