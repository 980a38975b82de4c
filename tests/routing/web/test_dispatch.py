"""A waiting caller's job is written by the worker as it claims it (no database round trip before
the task is published); the waiting request writes it itself when it must hand the id out
unanswered, when its task looks lost, or when the broker refuses the task."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError

from muse_experiments.infra.redis_client import redis_client
from routing.jobs import (
    WORKER_LOST,
    completion_job_claim,
    completion_jobs_reap_expired,
    completion_jobs_renew_leases,
)
from routing.models import CompletionJob, JobStatus
from routing.state import claims
from routing.state.handoff import final_state
from routing.web import dispatch

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "deferred"}]


@pytest.fixture
def published(redis_url, monkeypatch) -> list[dict]:
    """The task messages the web process publishes (``args`` and ``kwargs``), kept instead of sent."""
    sent: list[dict] = []
    monkeypatch.setattr(dispatch, "_send", lambda job_id, kwargs: sent.append({"args": [job_id], **kwargs}))
    return sent


def submit(api_key=None, **kw) -> CompletionJob:
    job, created = dispatch.submit_completion(
        api_key=api_key, session_id="s-1", user_id="u-1", subagent="coder", attributes={"plan": "pro"},
        request={"messages": MESSAGES, "cancellable": True}, durable=False, **kw,
    )  # fmt: skip
    assert created
    return job


def expire_claim(job_id) -> None:
    """As if the claim's holder stopped renewing it a lease ago (its worker died)."""
    redis_client().hset(claims.claim_key(str(job_id)), "lease", 0)
    redis_client().zadd(claims.LEASES, {str(job_id): 0})


def test_the_worker_claims_in_redis_without_writing_and_a_redelivery_follows_the_lease(published, settings):
    job = submit()
    assert not CompletionJob.objects.filter(pk=job.pk).exists()  # nothing written before the publish
    [message] = published
    assert message["args"] == [str(job.id)] and message["stream"] is False
    row = message["row"]
    claimed = completion_job_claim(job_id=str(job.id), row=row, worker="w1:1")
    assert claimed._state.adding  # its row comes with its records (tests/routing/worker/test_drainer.py)
    assert not CompletionJob.objects.filter(pk=job.pk).exists()
    assert (claimed.pk, claimed.status, claimed.deliveries, claimed.worker) == (
        job.pk,
        JobStatus.RUNNING,
        1,
        "w1:1",
    )
    assert (claimed.session_id, claimed.user_id, claimed.subagent) == ("s-1", "u-1", "coder")
    assert claimed.attributes == {"plan": "pro"} and claimed.request["messages"] == MESSAGES
    assert claimed.created_at == job.created_at < claimed.started_at  # the request's own time
    assert claimed.lease_expires_at == claimed.started_at + timedelta(seconds=settings.COMPLETION_LEASE_S)
    assert (
        0 < redis_client().ttl(claims.claim_key(str(job.id))) <= claims.ttl_s() == 2 * 3600
    )  # 2 × visibility
    worker, started, lease = claims.running(str(job.id))
    assert worker == "w1:1" and lease - started == timedelta(seconds=settings.COMPLETION_LEASE_S)

    assert completion_job_claim(job_id=str(job.id), row=row, worker="w2:2") is None  # live lease
    assert completion_job_claim(job_id=str(job.id), worker="w2:2") is None  # a republished task too
    assert not CompletionJob.objects.filter(pk=job.pk).exists()
    expire_claim(job.id)
    assert completion_job_claim(job_id=str(job.id), row=row, worker="w2:2") is None
    stored = CompletionJob.objects.get(pk=job.pk)  # written from the claim, failed: never re-run
    assert (stored.status, stored.error, stored.request["messages"]) == (
        JobStatus.FAILED,
        WORKER_LOST,
        MESSAGES,
    )
    assert final_state(str(job.id))["error"] == WORKER_LOST  # the waiting request hears it
    assert completion_job_claim(job_id=str(job.id), row=row, worker="w3:3") is None
    assert CompletionJob.objects.get(pk=job.pk).status == JobStatus.FAILED


def test_the_reaper_fails_a_job_whose_claim_lapsed_and_leaves_a_renewed_one_running(published, settings):
    dead, alive = submit(), submit()
    for job, message in zip((dead, alive), published, strict=True):
        completion_job_claim(job_id=str(job.id), row=message["row"], worker="w1:1")
    expire_claim(dead.id)
    expire_claim(alive.id)
    assert completion_jobs_renew_leases(job_ids=[alive.id], worker="w1:1") == 0  # no row to renew yet
    assert completion_jobs_renew_leases(job_ids=[dead.id], worker="other:9") == 0
    assert completion_jobs_reap_expired() == 1
    stored = CompletionJob.objects.get(pk=dead.pk)
    assert (stored.status, stored.error, stored.session_id) == (JobStatus.FAILED, WORKER_LOST, "s-1")
    assert not CompletionJob.objects.filter(pk=alive.pk).exists()
    assert claims.running(str(alive.id))[0] == "w1:1"
    assert completion_jobs_reap_expired() == 0  # each lost job once


def test_a_claim_without_redis_falls_back_to_writing_the_row(published, monkeypatch):
    job = submit()

    def down(*args, **kwargs):
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(claims, "claim_send", down)
    claimed = completion_job_claim(job_id=str(job.id), row=published[0]["row"], worker="w1:1")
    stored = CompletionJob.objects.get(pk=job.pk)
    assert (claimed.status, stored.status, stored.worker) == (JobStatus.RUNNING, JobStatus.RUNNING, "w1:1")


def test_a_waiter_answering_before_any_claim_writes_the_row_queued_for_the_worker(published):
    job = submit()
    waited = dispatch.wait_for_job(job, timeout_s=0.3)
    assert waited.status == JobStatus.QUEUED
    stored = CompletionJob.objects.get(pk=job.pk)  # the id it hands out can be looked up
    assert (stored.status, stored.deliveries, stored.request["messages"]) == (JobStatus.QUEUED, 0, MESSAGES)
    claimed = completion_job_claim(job_id=str(job.id), row=published[0]["row"], worker="w1:1")
    assert (claimed.status, claimed.deliveries, claimed.worker) == (JobStatus.RUNNING, 1, "w1:1")
    assert len(published) == 1  # answered, not republished


def test_a_waiter_whose_task_looks_lost_writes_the_row_and_publishes_it_again(published, settings):
    settings.COMPLETION_REQUEUE_AFTER_S = 0.2
    job = submit()
    waited = dispatch.wait_for_job(job, timeout_s=1.5)
    assert waited.status == JobStatus.QUEUED
    assert CompletionJob.objects.get(pk=job.pk).status == JobStatus.QUEUED
    assert [m["args"] for m in published] == [[str(job.id)], [str(job.id)]]
    assert "row" not in published[1]  # the second message reads the row


def test_a_deferred_job_the_broker_refuses_is_written_failed(redis_url, monkeypatch):
    def refuse(*args, **kwargs):
        raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(dispatch, "_send", refuse)
    with pytest.raises(BrokerError):
        submit()
    [stored] = CompletionJob.objects.all()
    assert (stored.status, stored.error, stored.session_id) == (
        JobStatus.FAILED,
        dispatch.BROKER_UNAVAILABLE,
        "s-1",
    )


def test_an_idempotency_key_or_a_job_id_handed_out_for_later_is_written_before_the_publish(published):
    keyed = submit(idempotency_key="k-1")
    later, _ = dispatch.submit_completion(
        api_key=None, session_id="s-2", user_id="u", subagent="", attributes={},
        request={"messages": MESSAGES}, durable=True,
    )  # fmt: skip
    assert set(CompletionJob.objects.values_list("pk", flat=True)) == {keyed.pk, later.pk}
    assert all("row" not in m for m in published)


# --- review findings -------------------------------------------------------------------------


def test_a_waiter_does_not_publish_again_a_job_a_worker_already_claimed(published, settings):
    """A drop-in call that runs longer than COMPLETION_REQUEUE_AFTER_S (a long generation) was
    claimed long ago: its task is not lost, so the waiter must not publish it again."""
    settings.COMPLETION_REQUEUE_AFTER_S = 0.2
    job = submit()
    completion_job_claim(job_id=str(job.id), row=published[0]["row"], worker="w1:1")
    dispatch.wait_for_job(job, timeout_s=1.5)
    assert len(published) == 1


def test_a_broker_refusing_the_waiters_republish_does_not_fail_a_running_job(
    published, settings, monkeypatch
):
    """The republish is a safety net: when the broker refuses it, the job a worker is running (and
    whose upstream call is under way) must not be failed ``broker_unavailable``, nor the waiting
    request blow up."""
    settings.COMPLETION_REQUEUE_AFTER_S = 0.2
    job = submit()
    completion_job_claim(job_id=str(job.id), row=published[0]["row"], worker="w1:1")

    def refuse(*args, **kwargs):
        raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(dispatch, "_send", refuse)
    waited = dispatch.wait_for_job(job, timeout_s=1.5)
    assert waited.status == JobStatus.RUNNING
    assert CompletionJob.objects.get(pk=job.pk).status == JobStatus.RUNNING


@pytest.mark.parametrize(
    "envelope",
    [
        {"__type__": "datetime", "__value__": "2024-01-01T00:00:00"},
        {"__type__": "decimal", "__value__": "1.5"},
        {"__type__": "point", "__value__": [1, 2]},
    ],
    ids=["datetime", "decimal", "unknown"],
)
def test_the_row_survives_the_task_messages_json_whatever_the_client_sent(published, envelope):
    """The row travels through kombu's JSON, which turns ``{"__type__": …, "__value__": …}``
    objects into Python values (or refuses to decode them). Client JSON (tool-call arguments,
    tool parameter schemas, attributes) may hold exactly such an object: the worker must still
    write the request as the client sent it."""
    from kombu.serialization import dumps, loads

    messages = [
        {"role": "user", "content": "book it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "book", "arguments": envelope}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    job, _ = dispatch.submit_completion(
        api_key=None, session_id="s-1", user_id="u-1", subagent="", attributes={"when": envelope},
        request={"messages": messages, "cancellable": True}, durable=False,
    )  # fmt: skip
    [message] = published
    content_type, encoding, body = dumps({"kwargs": {"row": message["row"]}}, serializer="json")
    row = loads(body, content_type, encoding)["kwargs"]["row"]  # what the worker receives
    claimed = completion_job_claim(job_id=str(job.id), row=row, worker="w1:1")
    assert claimed.request["messages"] == messages and claimed.attributes == {"when": envelope}
    expire_claim(job.id)  # the worker died: the job is written from the row its claim kept
    assert completion_jobs_reap_expired() == 1
    stored = CompletionJob.objects.get(pk=job.pk)
    assert stored.request["messages"] == messages and stored.attributes == {"when": envelope}


def test_the_task_message_carries_the_row_but_its_printable_arguments_never_hold_the_conversation(redis_url):
    """Celery puts a printable copy of a task's arguments in the message headers (monitoring tools
    show it); a deferred job's row (the whole conversation) stays out of it."""
    import base64
    import json

    from muse_experiments.celery import app

    job = submit()
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        [raw] = [m for m in client.lrange("completions", 0, -1) if str(job.id).encode() in m]
        assert client.lrem("completions", 0, raw) == 1  # no worker runs it later
    message = json.loads(raw)
    headers = message["headers"]
    assert headers["argsrepr"] == repr([str(job.id)])
    assert headers["kwargsrepr"] == repr({"stream": False, "row": "…"})
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert args == [str(job.id)] and json.loads(kwargs["row"]["request"])["messages"] == MESSAGES


def test_a_deferred_job_is_claimed_by_one_delivery_and_a_redelivery_gets_nothing(published):
    job = submit()
    row = published[0]["row"]
    claimed = completion_job_claim(job_id=str(job.id), row=row, worker="w1:1")
    assert (str(claimed.pk), claimed.status, claimed.worker) == (str(job.id), JobStatus.RUNNING, "w1:1")
    assert claimed._state.adding  # claimed in Redis: its row comes with its records
    assert claims.running(str(job.id))[0] == "w1:1"
    # a redelivery while the lease lives does nothing, and the claim stays the first worker's
    assert completion_job_claim(job_id=str(job.id), row=row, worker="w2:2") is None
    assert claims.running(str(job.id))[0] == "w1:1"
