"""Nothing accepted is ever unknown: a job is findable from its publish, a dead worker's heartbeat
is seen within a beat, its running jobs are failed with their attempts recorded ``lost`` (cost
unknown, counted), and the jobs it may have taken before claiming are published again.

Real Redis and PostgreSQL, the simulated upstreams over real HTTP, the reaper called here
directly (every worker's lease keeper runs it); worker processes SIGKILLed mid-call are in
``tests/test_worker_kill.py``.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from analytics.models import CallRollup
from analytics.rollups import call_rollup_refresh
from muse_experiments.api.auth import api_key_create
from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import redis_client
from routing.jobs import WORKER_LOST, completion_job_claim, completion_job_create, completion_job_materialize
from routing.models import Attempt, CallRecord, CompletionJob, JobStatus
from routing.pipeline.planning import build_request, job_plan
from routing.pipeline.recording import record_call
from routing.pipeline.records import records_write
from routing.pipeline.router import execute_job
from routing.pipeline.serving import serve
from routing.state import claims
from routing.web import dispatch
from routing.worker import reaper, tasks
from tests.factories import make_experiment, seed_catalogue

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

MESSAGES = [{"role": "user", "content": "accepted"}]


@pytest.fixture(autouse=True)
def catalogue(redis_url, upstreams):
    seed_catalogue(upstreams.url)
    make_experiment()  # control avocado v14, treatment avocado v15, 50/50


def die(worker: str) -> None:
    """``worker`` beat once, then stopped: its heartbeat key is gone, as when its TTL runs out."""
    claims.beat(worker)
    redis_client().delete(f"{claims.HEARTBEAT_PREFIX}{worker}")


def age_claim(job_id) -> None:
    """As if the job was claimed a heartbeat ago (past the grace a worker's first beat gets)."""
    redis_client().hset(claims.claim_key(str(job_id)), "at", claims._now_ms() - claims.heartbeat_ttl_ms() - 1)
    CompletionJob.objects.filter(pk=job_id).update(started_at=timezone.now() - timedelta(seconds=60))


def note_attempt(job_id, endpoint: str) -> None:
    pipe = redis_client().pipeline(transaction=False)
    claims.queue_attempt_note(pipe, str(job_id), {"endpoint": endpoint, "at": claims._now_ms() - 1500})
    pipe.execute()


def deferred(api_key=None) -> tuple[CompletionJob, dict]:
    """A waiting caller's job, published with its record; its task message then taken off the
    broker's queue here, as a worker that pops it and dies before claiming it takes it along."""
    client = redis_client()
    client.delete(Queue.COMPLETIONS)
    job, _ = dispatch.submit_completion(
        api_key=api_key, session_id="s-1", user_id="u-1", subagent="coder", attributes={},
        request={"messages": MESSAGES, "tools": []}, durable=False,
    )  # fmt: skip
    args, kwargs = take_message()
    assert args == [str(job.id)]
    return job, kwargs["row"]


def take_message() -> tuple[list, dict]:
    """Pop the one task message on the completions queue, as a worker does: ``(args, kwargs)``."""
    client = redis_client()
    message = json.loads(client.rpop(Queue.COMPLETIONS))
    assert client.llen(Queue.COMPLETIONS) == 0
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    return args, kwargs


def lost_calls() -> list[tuple]:
    return sorted(
        (str(c.job_id), c.status, c.error_kind, c.cost_unknown, c.cost_usd, c.served_endpoint)
        for c in CallRecord.objects.all()
    )


def lost_attempts() -> list[tuple]:
    return sorted(
        (str(a.call.job_id), a.number, a.endpoint, a.outcome, a.cost_unknown, a.cost_usd)
        for a in Attempt.objects.select_related("call")
    )


def test_an_attempt_is_noted_before_its_upstream_call_and_a_refused_one_is_not(upstreams):
    job, _ = completion_job_create(
        api_key=None, session_id="s-1", user_id="u-1", subagent="", attributes={},
        request={"messages": MESSAGES, "tools": []},
    )  # fmt: skip
    before = claims._now_ms()
    assert execute_job(job_id=str(job.id)) == JobStatus.SUCCEEDED  # records written at once here
    job.refresh_from_db()
    [note] = claims.attempt_notes(str(job.id))
    assert note["endpoint"] == job.result["served_model"] and before <= note["at"] <= claims._now_ms()
    assert upstreams.call_count() == 1

    refused, _ = completion_job_create(
        api_key=None, session_id="s-2", user_id="u-2", subagent="", attributes={},
        request={"messages": MESSAGES, "tools": [], "model": "avocado/none-such"},
    )  # fmt: skip
    execute_job(job_id=str(refused.id))
    assert claims.attempt_notes(str(refused.id)) == []  # nothing was sent upstream


def test_a_dead_workers_running_jobs_fail_at_its_first_missed_beat_with_their_attempts_lost():
    """Leases still run for a minute: the heartbeat, not the lease, tells the worker is gone."""
    row_job, _ = completion_job_create(
        api_key=None, session_id="s-1", user_id="u-1", subagent="", attributes={},
        request={"messages": MESSAGES, "tools": []},
    )  # fmt: skip
    taken, row = deferred()
    claims.beat("dead:1")
    assert completion_job_claim(job_id=str(row_job.id), worker="dead:1") is not None
    assert completion_job_claim(job_id=str(taken.id), row=row, worker="dead:1") is not None
    for job_id in (row_job.id, taken.id):
        note_attempt(job_id, "avocado/v15")
        age_claim(job_id)
    published: list = []
    assert reaper.reap_lost_work(death=False, publish=lambda *a: published.append(a)) == 0  # alive
    assert CompletionJob.objects.get(pk=row_job.id).status == JobStatus.RUNNING

    redis_client().delete(f"{claims.HEARTBEAT_PREFIX}dead:1")
    assert claims.beat("reaper:2") == ["dead:1"]  # the next worker to beat learns it, once
    assert claims.beat("reaper:2") == []
    assert reaper.reap_lost_work(death=True, publish=lambda *a: published.append(a)) == 2
    assert published == []  # both were claimed: nothing to publish again

    for job_id in (row_job.id, taken.id):
        job = CompletionJob.objects.get(pk=job_id)
        assert (job.status, job.error) == (JobStatus.FAILED, WORKER_LOST)
    assert lost_calls() == sorted(
        (str(j), JobStatus.FAILED, "worker_lost", True, Decimal(0), "") for j in (row_job.id, taken.id)
    )
    assert lost_attempts() == sorted(
        (str(j), 1, "avocado/v15", "lost", True, Decimal(0)) for j in (row_job.id, taken.id)
    )
    assert CompletionJob.objects.get(pk=taken.id).session_id == "s-1"  # its row written from the claim

    call_rollup_refresh()
    hours = CallRollup.objects.filter(span="hour")
    assert sum(r.cost_unknown for r in hours) == 2 and sum(r.errors for r in hours) == 2

    # reaping again changes nothing
    calls, attempts = lost_calls(), lost_attempts()
    ids = sorted(CallRecord.objects.values_list("id", flat=True))
    assert reaper.reap_lost_work(death=True, publish=lambda *a: published.append(a)) == 0
    assert reaper.reap_lost_work(death=False, publish=lambda *a: published.append(a)) == 0
    assert (lost_calls(), lost_attempts(), published) == (calls, attempts, [])
    assert sorted(CallRecord.objects.values_list("id", flat=True)) == ids
    assert redis_client().scard(claims.LOST_JOBS) == 0


def test_a_job_taken_before_its_claim_is_findable_and_served_once_its_taker_is_found_dead(upstreams):
    """A waiting caller's job (no row before its claim) whose message a worker took and died with,
    and whose caller gave up: it is found through its record, then served once its taker's
    heartbeat is found expired, not after ``COMPLETION_REQUEUE_AFTER_S``."""
    key, raw = api_key_create(name="mine", scopes=["completions"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    job, _ = deferred(api_key=key)
    assert not CompletionJob.objects.filter(pk=job.id).exists()
    url = f"/api/v1/completions/{job.id}"
    queued = client.get(url).json()
    assert (queued["status"], queued["session_id"]) == ("queued", "s-1")  # findable from its publish

    assert reaper.republish_unclaimed(death=False, publish=lambda *a: pytest.fail("too soon")) == 0
    die("taker:1")
    assert claims.beat(None) == ["taker:1"]
    assert tasks.reap_lost(True) == 0  # nothing was running; the job is published again
    args, kwargs = take_message()
    assert tasks.run_completion(*args, **kwargs) == JobStatus.SUCCEEDED  # by a live worker
    done = client.get(url).json()
    assert (done["status"], done["result"]["text"].startswith("avocado")) == ("succeeded", True)
    assert CompletionJob.objects.get(pk=job.id).status == JobStatus.SUCCEEDED
    assert upstreams.call_count() == 1

    assert tasks.run_completion(*args, **kwargs) == JobStatus.SUCCEEDED  # a second delivery: no call
    die("another:2")
    assert tasks.reap_lost(True) == 0  # claimed: never published (or served) again
    assert redis_client().llen(Queue.COMPLETIONS) == 0
    assert upstreams.call_count() == 1


def test_the_answer_of_a_worker_wrongly_thought_dead_replaces_its_lost_call(upstreams):
    """A worker whose heartbeat lapsed while it still worked (a stall longer than the TTL): its
    job is failed and its call recorded lost, then its answer arrives and wins, once."""
    job, _ = completion_job_create(
        api_key=None, session_id="s-1", user_id="u-1", subagent="", attributes={},
        request={"messages": MESSAGES, "tools": []},
    )  # fmt: skip
    claims.beat("slow:1")
    running = completion_job_claim(job_id=str(job.id), worker="slow:1")
    decision, chain, reason = job_plan(running)
    outcome = serve(build_request(running, {}), chain, reason, job_id=str(job.id))  # noted, answered
    age_claim(job.id)
    redis_client().delete(f"{claims.HEARTBEAT_PREFIX}slow:1")
    assert reaper.reap_lost_work(death=True, publish=lambda *a: pytest.fail("claimed")) == 1
    assert lost_calls() == [(str(job.id), JobStatus.FAILED, "worker_lost", True, Decimal(0), "")]

    record_call(running, decision, chain, outcome)  # the stalled worker records its answer
    stored = CompletionJob.objects.get(pk=job.id)
    assert (stored.status, stored.error) == (JobStatus.SUCCEEDED, "")
    call = CallRecord.objects.get(job_id=job.id)
    assert (call.status, call.error_kind, call.cost_unknown) == ("succeeded", "", False)
    assert [(a.outcome, a.cost_unknown) for a in call.attempts.all()] == [("ok", False)]
    assert records_write([reaper.lost_call_payload(stored, [{"endpoint": "x", "at": 0}])]) == 0  # stays
    assert upstreams.call_count() == 1


def test_a_job_whose_row_is_written_is_published_again_without_its_row():
    """Its waiting request wrote it (or a claim did while Redis was down): claimed through the
    row, it can never run twice."""
    job, row = deferred()
    completion_job_materialize(job)
    published: list = []
    assert reaper.republish_unclaimed(death=True, publish=lambda *a: published.append(a)) == 1
    assert published == [(str(job.id), None, False)]
