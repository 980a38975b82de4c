"""Write-behind of call records: buffered in Redis with the answer, drained into the same rows.

Real Redis and PostgreSQL, the simulated upstreams over real HTTP. The drain is called here
directly (in production every worker runs it continuously); a worker SIGKILLed after answering
is covered with real processes in ``tests/test_worker_kill.py``.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from muse_experiments.api.auth import api_key_create
from muse_experiments.experiments.models import ApiKey, Exposure
from muse_experiments.infra.redis_client import redis_client
from routing.catalogue import avocado_id
from routing.jobs import completion_job_claim, completion_job_new, worker_identity
from routing.messages import job_row
from routing.models import Attempt, CallRecord, CompletionJob, JobStatus
from routing.pipeline.records import records_write
from routing.pipeline.router import execute_job
from routing.selectors import completion_job_current
from routing.state import claims
from routing.state.handoff import final_state
from routing.transcripts.models import TranscriptTurn
from routing.worker import drainer
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def write_behind(redis_url, settings, upstreams):
    settings.RECORDS_WRITE_BEHIND = True
    client = redis_client()
    client.delete(drainer.STREAM, drainer.DEAD_LETTERS)
    seed_catalogue(upstreams.url)
    make_experiment()  # control avocado v14, treatment avocado v15, 50/50
    yield
    client.delete(drainer.STREAM, drainer.DEAD_LETTERS)


def drain_all() -> int:
    total = 0
    while n := drainer.drain():
        total += n
    return total


def buffered_entries() -> list[dict]:
    return [json.loads(f[b"p"]) for _, f in redis_client().xrange(drainer.STREAM)]


def test_the_answer_is_handed_back_before_the_records_are_written_and_the_drain_writes_them_all():
    j = job(session_id="s-1", user_id="u-1")
    assert execute_job(job_id=str(j.id)) == JobStatus.SUCCEEDED

    # answered: the final state is in Redis, the records are buffered, nothing is in the database yet
    state = final_state(str(j.id))
    assert state["status"] == "succeeded"
    assert state["result"]["experiment"] == "exp"
    assert CallRecord.objects.count() == 0 and TranscriptTurn.objects.count() == 0
    stored = CompletionJob.objects.get(pk=j.id)
    assert stored.status == JobStatus.RUNNING
    assert completion_job_current(stored).result == state["result"]  # what GET /completions shows

    assert drain_all() == 1
    stored = CompletionJob.objects.get(pk=j.id)
    assert (stored.status, stored.result) == (JobStatus.SUCCEEDED, state["result"])
    call = CallRecord.objects.get(job=j)
    assert (call.experiment_key, call.variant_key, call.unit_id) == ("exp", state["result"]["variant"], "s-1")
    assert call.served_endpoint == state["result"]["served_model"]
    assert call.created_at == stored.finished_at  # when the call finished, not when it was drained
    assert [(a.number, a.outcome, a.status_code) for a in Attempt.objects.filter(call=call)] == [
        (1, "ok", 200)
    ]
    exposure = Exposure.objects.get()
    assert (exposure.unit_id, exposure.variant_key) == ("s-1", call.variant_key)
    turn = TranscriptTurn.objects.get(job_id=j.id)
    assert (turn.number, turn.output_text) == (1, state["result"]["text"])
    assert not buffered_entries()


def test_a_batch_of_calls_is_written_in_one_drain_with_turns_numbered_in_order():
    jobs = [job(session_id="s-1", user_id="u-1") for _ in range(3)] + [job(session_id="s-2", user_id="u-2")]
    for j in jobs:
        execute_job(job_id=str(j.id))
    assert len(buffered_entries()) == 4
    assert drainer.drain() == 4
    turns = {
        t.job_id: (t.transcript.session_id, t.number)
        for t in TranscriptTurn.objects.select_related("transcript")
    }
    assert [turns[j.id] for j in jobs] == [("s-1", 1), ("s-1", 2), ("s-1", 3), ("s-2", 1)]
    assert CallRecord.objects.count() == 4
    assert Exposure.objects.count() == 2  # one per unit, first variant kept
    assert CompletionJob.objects.filter(status=JobStatus.SUCCEEDED).count() == 4


def test_entries_of_a_drainer_that_died_mid_batch_are_claimed_and_written_once(monkeypatch):
    j = job(session_id="s-1", user_id="u-1")
    execute_job(job_id=str(j.id))
    client = redis_client()
    drainer._ensure_group(client)
    # a drainer reads the entry, then dies before writing and acknowledging it
    taken = client.xreadgroup(drainer.GROUP, "dead-drainer", {drainer.STREAM: ">"}, count=10)
    assert len(taken[0][1]) == 1
    assert drainer.drain() == 0  # not stale yet: left to its owner
    monkeypatch.setattr(drainer, "STALE_MS", 0)
    assert drainer.drain() == 1
    assert CallRecord.objects.filter(job=j).count() == 1
    # replaying the same payload (e.g. the dead drainer had committed before dying) changes nothing
    payload = json.loads(taken[0][1][0][1][b"p"])
    assert records_write([payload]) == 0
    assert (CallRecord.objects.count(), Attempt.objects.count(), Exposure.objects.count()) == (1, 1, 1)
    assert TranscriptTurn.objects.count() == 1
    assert client.xlen(drainer.STREAM) == 0


def test_an_entry_that_cannot_be_written_goes_to_dead_letters_without_blocking_the_others():
    good, other = job(session_id="s-1", user_id="u-1"), job(session_id="s-2", user_id="u-2")
    execute_job(job_id=str(good.id))
    client = redis_client()
    client.xadd(drainer.STREAM, {"p": json.dumps({"job": {"id": str(other.id)}}), "t": "0"})  # malformed
    assert drainer.drain() == 2
    assert CallRecord.objects.filter(job=good).count() == 1
    assert client.xlen(drainer.DEAD_LETTERS) == 1
    assert client.xlen(drainer.STREAM) == 0


def test_records_of_a_job_that_no_longer_exists_are_dropped():
    j = job(session_id="s-1", user_id="u-1")
    execute_job(job_id=str(j.id))
    CompletionJob.objects.filter(pk=j.id).delete()
    assert drainer.drain() == 1
    assert CallRecord.objects.count() == 0 and TranscriptTurn.objects.count() == 0


def test_a_failed_call_is_buffered_too_and_records_its_attempts(upstreams):
    upstreams.set_scenario("avocado-v14", failure="bad_request")
    upstreams.set_scenario("avocado-v15", failure="bad_request")
    j = job(session_id="s-1", user_id="u-1")
    assert execute_job(job_id=str(j.id)) == JobStatus.FAILED
    assert final_state(str(j.id))["status"] == "failed"
    drain_all()
    stored = CompletionJob.objects.get(pk=j.id)
    assert stored.status == JobStatus.FAILED and stored.error.startswith("ClientRequestError")
    call = CallRecord.objects.get(job=j)
    assert call.status == JobStatus.FAILED and call.error_kind == "ClientRequestError"
    assert Exposure.objects.count() == 1  # intent-to-treat: exposed even though nothing served
    assert TranscriptTurn.objects.count() == 0
    assert call.assigned_endpoint in (avocado_id(14), avocado_id(15)) and call.served_endpoint == ""


def test_the_drainer_process_writes_buffered_records_and_stops_on_sigterm(redis_url):
    """``manage.py drain_records`` (the Procfile's drainer) in a real process: it writes what a
    worker buffered and exits 0 on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from django.conf import settings as django_settings

    from tests.conftest import database_url_for_subprocess

    j = job(session_id="s-drainer", user_id="u-drainer")
    assert execute_job(job_id=str(j.id)) == JobStatus.SUCCEEDED
    assert CallRecord.objects.count() == 0
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocess(),
        "REDIS_URL": django_settings.REDIS_URL,
        "DJANGO_DEBUG": "true",
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "drain_records"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        # A generous bound: the process starts Django first (seconds on a loaded 2-core machine).
        deadline = time.monotonic() + 120
        while not CallRecord.objects.filter(job=j).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert CallRecord.objects.get(job=j).unit_id == "s-drainer"
        assert CompletionJob.objects.get(pk=j.id).status == JobStatus.SUCCEEDED
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def deferred_job(api_key=None) -> tuple[CompletionJob, dict]:
    """A drop-in caller's job as its task message carries it (no row written)."""
    j = completion_job_new(
        api_key=api_key, session_id="s-9", user_id="u-9", subagent="coder", attributes={"plan": "pro"},
        request={"messages": [{"role": "user", "content": "deferred"}], "tools": [], "cancellable": True},
    )  # fmt: skip
    return j, job_row(j)


def test_a_deferred_job_is_planned_once_after_its_claim_and_a_redelivery_is_not_planned(
    upstreams, monkeypatch
):
    from routing.pipeline import router

    plans: list[str] = []
    real_plan = router.job_plan
    monkeypatch.setattr(router, "job_plan", lambda j: plans.append(str(j.pk)) or real_plan(j))
    j, row = deferred_job()
    assert execute_job(job_id=str(j.id), row=row) == JobStatus.SUCCEEDED
    assert plans == [str(j.id)] and upstreams.call_count() == 1
    assert execute_job(job_id=str(j.id), row=row) == "missing"  # a redelivery: its claim is lost
    assert plans == [str(j.id)] and upstreams.call_count() == 1


def test_a_job_claimed_in_redis_reaches_the_database_with_its_records_and_is_never_run_twice(upstreams):
    key, _ = api_key_create(name="gone", scopes=["completions"])
    j, row = deferred_job(api_key=key)
    assert execute_job(job_id=str(j.id), row=row) == JobStatus.SUCCEEDED
    assert upstreams.call_count() == 1
    assert not CompletionJob.objects.filter(pk=j.pk).exists()  # answered before any database write
    state = final_state(str(j.id))
    assert state["status"] == "succeeded"
    [entry] = buffered_entries()
    assert entry["row"]["request"] is None  # the conversation travels once, in the turn
    ApiKey.objects.filter(pk=key.pk).delete()  # deleted meanwhile: the row is written without it

    assert execute_job(job_id=str(j.id), row=row) == "missing"  # a redelivery before the drain
    assert drain_all() == 1
    assert execute_job(job_id=str(j.id), row=row) == JobStatus.SUCCEEDED  # and after it
    assert execute_job(job_id=str(j.id)) == JobStatus.SUCCEEDED
    assert upstreams.call_count() == 1

    stored = CompletionJob.objects.get(pk=j.pk)
    assert (stored.status, stored.result, stored.api_key_id) == (JobStatus.SUCCEEDED, state["result"], None)
    assert (stored.session_id, stored.user_id, stored.subagent, stored.attributes) == (
        "s-9",
        "u-9",
        "coder",
        {"plan": "pro"},
    )
    assert stored.request == j.request and stored.created_at == j.created_at
    assert (stored.deliveries, stored.worker) == (1, worker_identity())
    assert stored.created_at < stored.started_at < stored.finished_at
    assert CallRecord.objects.get(job=stored).status == "succeeded"
    assert TranscriptTurn.objects.get(job_id=j.id).number == 1
    assert claims.running(str(j.id)) is None


def test_a_job_claimed_in_redis_is_visible_to_its_key_before_its_row_is_written(upstreams):
    key, raw = api_key_create(name="mine", scopes=["completions"])
    _, other = api_key_create(name="other", scopes=["completions"])
    j, row = deferred_job(api_key=key)
    mine, theirs = APIClient(), APIClient()
    mine.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    theirs.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    url = f"/api/v1/completions/{j.id}"
    assert mine.get(url).status_code == 404  # not claimed yet: nobody has its id

    completion_job_claim(job_id=str(j.id), row=row)  # running (as if its upstream call were under way)
    running = mine.get(url)
    assert (running.status_code, running.json()["status"], running.json()["session_id"]) == (
        200,
        "running",
        "s-9",
    )
    assert theirs.get(url).status_code == 404  # a key sees only its own jobs

    redis_client().delete(claims.claim_key(str(j.id)))  # forgotten, so that execute_job can take it
    assert execute_job(job_id=str(j.id), row=row) == JobStatus.SUCCEEDED
    assert not CompletionJob.objects.filter(pk=j.pk).exists()
    answered = mine.get(url).json()
    assert (answered["status"], answered["result"]["text"]) == (
        "succeeded",
        final_state(str(j.id))["result"]["text"],
    )
    assert theirs.get(url).status_code == 404

    assert drain_all() == 1
    assert claims.unwritten(str(j.id)) is None  # the drainer dropped the row its claim kept
    assert mine.get(url).json() == answered


def _task_success_by_unit(experiment) -> dict[str, float]:
    """Σ task_success per variant of the phase's analysis (the real aggregation statement)."""
    from analytics.queries import Component, aggregate

    sums = aggregate(
        experiment_id=experiment.id,
        phase=experiment.phase,
        unit_type="session",
        variant_endpoints={"control": avocado_id(14), "treatment": avocado_id(15)},
        components=[Component(key="ts", source="event", aggregation="any", event_name="task_success")],
    ).population(include_multiple=False, served_only=False)
    return {k: v.components["ts"].sum for k, v in sums.items()}


def test_an_outcome_posted_before_the_drain_counts_and_the_exposure_is_stamped_at_the_call_start():
    from muse_experiments.experiments.models import Experiment
    from tests.factories import api_key

    j = job(session_id="s-1", user_id="u-1")
    assert execute_job(job_id=str(j.id)) == JobStatus.SUCCEEDED
    # the agent posts its outcome as soon as it has the answer: before the drainer wrote anything
    events = APIClient()
    events.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['events'])}")
    body = {"event_id": "ok-1", "name": "task_success", "session_id": "s-1", "value": 1}
    assert events.post("/api/v1/events", body, format="json").status_code == 201
    assert not Exposure.objects.exists()
    assert drain_all() == 1

    stored = CompletionJob.objects.get(pk=j.id)
    exposure = Exposure.objects.get()
    assert exposure.first_exposed_at == stored.started_at  # the call's start, not the drain's time
    assert exposure.first_exposed_at < CallRecord.objects.get(job=j).created_at
    experiment = Experiment.objects.get(key="exp")
    assert _task_success_by_unit(experiment) == {exposure.variant_key: 1.0}  # counted, not a failure


def test_a_unit_keeps_its_earliest_routing_time_when_its_calls_are_written_out_of_order():
    first, second = job(session_id="s-1", user_id="u-1"), job(session_id="s-1", user_id="u-1")
    for j in (first, second):
        execute_job(job_id=str(j.id))
    payloads = buffered_entries()
    assert [p["job"]["id"] for p in payloads] == [str(first.id), str(second.id)]
    assert records_write([payloads[1]]) == 1  # the later call is written first ...
    started = {str(j.pk): j.started_at for j in CompletionJob.objects.filter(pk__in=[first.id, second.id])}
    assert Exposure.objects.get().first_exposed_at == started[str(second.id)]
    assert records_write([payloads[0]]) == 1  # ... then the earlier one lowers the time
    assert Exposure.objects.get().first_exposed_at == started[str(first.id)] < started[str(second.id)]
    assert records_write(payloads) == 0  # a replay changes nothing
    assert Exposure.objects.get().first_exposed_at == started[str(first.id)]


def test_a_payload_buffered_before_calls_carried_the_exposure_time_is_stamped_when_written():
    j = job(session_id="s-1", user_id="u-1")
    execute_job(job_id=str(j.id))
    (payload,) = buffered_entries()
    del payload["exposure"]["first_exposed_at"]
    assert records_write([payload]) == 1
    assert Exposure.objects.get().first_exposed_at >= CompletionJob.objects.get(pk=j.id).started_at


def test_the_drainer_offers_calls_to_their_listeners_only_once_their_records_are_written():
    """Write-behind (production): the call's worker hands the answer back and buffers the records;
    the recorded-call listeners (the shadow tests' offer) run in the drainer, after the batch it
    wrote, with each call's payload; nothing runs for them on the worker."""
    from routing.pipeline import recorded

    seen: list[tuple[str, str, int]] = []

    def listener(payloads):
        for p in payloads:
            written = CallRecord.objects.filter(job_id=p["job"]["id"]).count()
            seen.append((p["job"]["id"], p["call"]["status"], written))

    remove = recorded.on_recorded(listener)
    try:
        j = job(session_id="s-1", user_id="u-1")
        assert execute_job(job_id=str(j.id)) == JobStatus.SUCCEEDED
        assert final_state(str(j.id))["status"] == JobStatus.SUCCEEDED  # the caller has its answer
        assert seen == []  # the worker offered nothing
        assert drain_all() == 1
    finally:
        remove()
    assert seen == [(str(j.id), JobStatus.SUCCEEDED, 1)]


def test_a_call_moved_to_dead_letters_is_not_offered_to_the_listeners():
    from routing.pipeline import recorded

    seen: list[str] = []
    remove = recorded.on_recorded(lambda payloads: seen.extend(p["job"]["id"] for p in payloads))
    try:
        good, other = job(session_id="s-1", user_id="u-1"), job(session_id="s-2", user_id="u-2")
        execute_job(job_id=str(good.id))
        redis_client().xadd(drainer.STREAM, {"p": json.dumps({"job": {"id": str(other.id)}}), "t": "0"})
        assert drainer.drain() == 2
    finally:
        remove()
    assert seen == [str(good.id)]
