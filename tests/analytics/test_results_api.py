"""Results API (JSON per phase, ITT vs served), on-demand computation through a real Celery worker,
the beat schedule, and admin validation of metric definitions."""

from __future__ import annotations

import json
import time

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from analytics.models import MetricDefinition, ResultSnapshot
from analytics.services import metric_definition_save, results_compute, results_schedule_ensure
from analytics.tasks import compute_running_results
from muse_experiments.experiments.models import AuditEntry
from tests.factories import api_key


def _client(scopes=("analytics:read",)):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(list(scopes))}")
    return client


def _rows(raw):
    for i, variant in enumerate(["control", "fast", "cheap"] * 4):
        raw.expose(f"u{i}", variant)
        raw.call(f"u{i}", variant, latency_ms=100.0 + i)
    raw.call("u0", "control", reason="error_fallback", served="azure/muse-special", latency_ms=500.0)


@pytest.mark.django_db
def test_results_api_serves_the_latest_snapshot_per_phase_and_the_served_analysis(three_arms):
    _rows(three_arms)
    results_compute(experiment=three_arms.experiment)
    client = _client()
    itt = client.get("/api/v1/experiments/ana/results", {"phase": 1})
    served = client.get("/api/v1/experiments/ana/results", {"analysis": "served"})
    assert itt.status_code == 200 and served.status_code == 200
    assert itt.json()["analysis"] == "itt" and served.json()["analysis"] == "served"
    assert [v["units"] for v in itt.json()["variants"]] == [4, 4, 4]
    assert [v["units"] for v in served.json()["variants"]] == [3, 4, 4]
    assert "NaN" not in json.dumps(itt.json())
    assert client.get("/api/v1/experiments/ana/results", {"phase": 2}).status_code == 404
    bad = client.get("/api/v1/experiments/ana/results", {"analysis": "both", "phase": "x"})
    assert bad.status_code == 400 and {"analysis", "phase"} <= set(bad.json()["error"]["fields"])


@pytest.mark.django_db
def test_results_compute_rejects_an_experiment_that_never_started_and_needs_the_scope(three_arms):
    from tests.factories import make_experiment

    make_experiment(key="draft", start=False)
    assert _client().post("/api/v1/experiments/draft/results/compute", {}, format="json").status_code == 400
    assert (
        _client(["events"]).post("/api/v1/experiments/ana/results/compute", {}, format="json").status_code
        == 403
    )
    bad = _client().post("/api/v1/experiments/ana/results/compute", {"wait_s": 99}, format="json")
    assert bad.status_code == 400


@pytest.mark.django_db
def test_results_compute_answers_bad_bodies_with_field_errors_as_lists(three_arms):
    """A body that is not a JSON object is a 400 (it was taken as ``{}`` and queued a computation);
    the phase errors are lists of messages like every field error of the API."""
    from tests.factories import make_experiment

    make_experiment(key="draft", start=False)
    client = _client()
    for body in ([1, 2], "hello"):
        refused = client.post("/api/v1/experiments/ana/results/compute", body, format="json")
        assert refused.status_code == 400, refused.content
        assert "non_field_errors" in refused.json()["error"]["fields"]
    for key, body, message in [
        ("draft", {}, "The experiment has not started: nothing to compute."),
        ("ana", {"phase": 7}, "Phase 7 does not exist (current: 1)."),
    ]:
        refused = client.post(f"/api/v1/experiments/{key}/results/compute", body, format="json")
        assert refused.json()["error"]["fields"] == {"phase": [message]}
    no_body = client.post("/api/v1/experiments/ana/results/compute")  # no body at all: the defaults
    assert no_body.status_code == 202, no_body.content


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_compute_endpoint_answers_202_and_a_real_worker_stores_the_snapshot(
    three_arms, celery_worker_process
):
    _rows(three_arms)
    client = _client()
    queued = client.post("/api/v1/experiments/ana/results/compute", {}, format="json")
    assert queued.status_code == 202, queued.content
    body = queued.json()
    assert body["status"] == "queued" and body["snapshot"] is None
    done = client.post("/api/v1/experiments/ana/results/compute", {"wait_s": 30}, format="json")
    assert done.status_code == 201, done.content
    assert done.json()["snapshot"]["variants"][0]["units"] == 4
    # the first request's own task runs beside the second's and may finish after it: wait for it
    deadline = time.monotonic() + 30
    while (first := client.get(body["results_url"])).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert first.status_code == 200 and first.json()["trigger"] == "api"
    assert ResultSnapshot.objects.filter(request_id=body["request_id"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_short_compute_wait_answers_202_and_leaves_no_subscription_or_pending_result(three_arms):
    """20 requests waiting 0.05 s each for a task no worker runs (yet): each answers 202 with
    nothing left in the web process (the Celery result backend's pending results and pubsub
    subscriptions, on our side and on the Redis server)."""
    from analytics.tasks import compute_results
    from muse_experiments.infra.redis_client import redis_client
    from tests.conftest import _purge_task_queues

    _rows(three_arms)
    backend = compute_results.backend
    client = _client()
    try:
        answers = [
            client.post("/api/v1/experiments/ana/results/compute", {"wait_s": 0.05}, format="json")
            for _ in range(20)
        ]
    finally:
        _purge_task_queues()
    assert [a.status_code for a in answers] == [202] * 20
    assert {a.json()["status"] for a in answers} == {"queued"}
    channels = [backend.get_key_for_task(a.json()["request_id"]) for a in answers]
    assert [n for _, n in redis_client().pubsub_numsub(*channels)] == [0] * 20
    assert [len(m) for m in backend._pending_results] == [0, 0]
    consumer = getattr(backend, "result_consumer", None)
    assert not getattr(consumer, "subscribed_to", set())


@pytest.mark.django_db(transaction=True)
def test_the_compute_task_hands_its_snapshot_to_the_waiting_request(three_arms):
    """The task run (here in this process) wakes the wait for its request id; a second wait for
    the same id still finds it; an unknown id waits out its timeout and gets nothing."""
    import uuid

    from analytics.handoff import results_wait
    from analytics.tasks import compute_results

    _rows(three_arms)
    request_id = str(uuid.uuid4())
    snapshot_id = compute_results(three_arms.experiment.id, 1, "api", request_id)
    assert results_wait(request_id=request_id, timeout_s=0.05).pk == snapshot_id
    assert results_wait(request_id=request_id, timeout_s=0.05).pk == snapshot_id
    assert results_wait(request_id=str(uuid.uuid4()), timeout_s=0.05) is None


@pytest.mark.django_db
def test_the_schedule_is_a_beat_periodic_task_fanning_out_over_running_experiments(three_arms, settings):
    from django_celery_beat.models import PeriodicTask

    seeded = PeriodicTask.objects.get(name="analytics: results of running experiments")
    assert seeded.task == "analytics.compute_running_results" and seeded.interval.every == 15
    task = results_schedule_ensure(every_minutes=5)
    assert task.pk == seeded.pk and task.interval.every == 5 and task.queue == "analytics"
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from muse_experiments.celery import app

    app.conf.task_always_eager = True
    try:
        _rows(three_arms)
        assert compute_running_results() == 1
    finally:
        app.conf.task_always_eager = False
    assert ResultSnapshot.objects.get().trigger == "schedule"


@pytest.mark.django_db
def test_builtin_metrics_are_seeded_and_bad_definitions_give_field_errors():
    names = set(MetricDefinition.objects.filter(is_builtin=True).values_list("name", flat=True))
    assert {
        "latency_ms",
        "cost_usd",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "error_rate",
        "fallback_rate",
        "tool_call_rate",
        "task_success",
        "rating",
    } <= names
    latency = MetricDefinition.objects.get(name="latency_ms")
    with pytest.raises(ValidationError) as err:
        metric_definition_save(
            metric=MetricDefinition(
                name="tokens_per_success",
                metric_type="ratio",
                numerator=latency,
                capping="percentile",
                cap_value=2.0,
            ),
            actor="ana",
        )
    assert {"numerator", "denominator", "capping", "cap_value"} <= set(err.value.message_dict)
    assert not MetricDefinition.objects.filter(name="tokens_per_success").exists()
    ok = metric_definition_save(
        metric=MetricDefinition(
            name="tokens_per_success",
            metric_type="ratio",
            numerator=MetricDefinition.objects.get(name="output_tokens"),
            denominator=MetricDefinition.objects.get(name="task_success"),
        ),
        actor="ana",
    )
    assert AuditEntry.objects.filter(action="metric_create", object_id=str(ok.pk), actor="ana").exists()
