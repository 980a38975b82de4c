"""The offer of a written call to the shadow tests: it runs once the call's records are written
(after its caller has its answer), through the pipeline's recorded-call listeners (the pipeline does
not import the shadow package), and publishes with one bounded push (backlog check + message, one
Lua script). The drainer's side (write-behind: the production path) is in
tests/routing/worker/test_drainer.py."""

from __future__ import annotations

import base64
import json

import pytest
from django.conf import settings

from muse_experiments.celery import app
from muse_experiments.infra.broker import direct_publisher
from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import client_url, redis_client
from routing.models import CallRecord
from routing.pipeline import recorded
from routing.shadow.budget import BACKLOG_KEY, dropped_counts
from routing.shadow.sampling import shadow_offer
from routing.state.handoff import final_state
from tests.routing.pipeline.test_router import job, run
from tests.routing.shadow.conftest import celery_eager
from tests.routing.shadow.test_run import SOURCE, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def listener():
    """Register a listener recording what it saw when called; unregistered afterwards."""
    seen: list[dict] = []
    hooks: dict = {}

    def record(payloads):
        for p in payloads:
            seen.append(
                {
                    "job_id": p["job"]["id"],
                    "served": p["call"]["served_endpoint"],
                    **hooks.get("probe", dict)(),
                }
            )

    remove = recorded.on_recorded(record)
    yield seen, hooks
    remove()


@pytest.fixture
def shadow_queue(redis_store):
    """The shadow queue's list and its backlog counter, emptied before and after (no worker here)."""
    client = redis_client(client_url(settings.CELERY_BROKER_URL))
    client.delete(Queue.SHADOW)
    redis_store.delete(BACKLOG_KEY)
    yield client
    client.delete(Queue.SHADOW)
    redis_store.delete(BACKLOG_KEY)


def test_the_shadow_offer_is_registered_as_a_listener_by_the_app():
    assert shadow_offer in recorded._listeners


def test_a_sync_call_is_offered_after_its_records_were_written_and_its_final_state_handed_back(
    catalogue, listener
):
    seen, hooks = listener
    j = job(session_id="s-sync")
    hooks["probe"] = lambda: {
        "final": final_state(str(j.id)),
        "records": CallRecord.objects.filter(job_id=j.id).count(),
    }
    run(j)
    [call] = seen
    assert call["job_id"] == str(j.id) and call["served"] == SOURCE
    assert call["final"] is not None and call["final"]["status"] == "succeeded"  # the caller could read it
    assert call["records"] == 1


def test_a_streamed_call_is_offered_once_its_records_are_written(catalogue, listener):
    from routing.jobs import completion_job_create
    from routing.pipeline.streaming import stream_job_events

    seen, hooks = listener
    streamed, _ = completion_job_create(
        api_key=None, session_id="s-stream", user_id="u-1", subagent="coder", attributes={},
        request={"messages": [{"role": "user", "content": "stream it"}], "tools": []}, stream=True,
    )  # fmt: skip
    hooks["probe"] = lambda: {"records": CallRecord.objects.filter(job_id=streamed.id).count()}
    events = list(stream_job_events(job_id=str(streamed.id)))
    assert events[-1]["type"] == "done"
    [call] = seen
    assert call["job_id"] == str(streamed.id) and call["records"] == 1


def test_a_failed_listener_does_not_fail_the_call_nor_the_next_listener(catalogue, listener):
    seen, _ = listener

    def broken(_payloads):
        raise RuntimeError("boom")

    recorded._listeners.insert(0, broken)
    try:
        j = run(job(session_id="s-broken"))
    finally:
        recorded._listeners.remove(broken)
    assert j.status == "succeeded"
    assert [c["job_id"] for c in seen] == [str(j.id)]


def test_the_offer_is_one_bounded_push_onto_the_shadow_queue(catalogue, shadow_queue, settings):
    """Not eager: the message goes to the shadow queue's list (no worker runs here), which is the
    backlog; at the limit nothing is pushed and the call is dropped ``backlog``; once the list is
    emptied (a worker took its calls, or the queue was purged) there is room again."""
    assert direct_publisher(app).client is redis_client()  # the one-round-trip path is the one tested
    start(judge=None)
    settings.SHADOW_MAX_BACKLOG = 1
    first = run(job(session_id="s-1"))
    assert shadow_queue.llen(Queue.SHADOW) == 1
    [raw] = shadow_queue.lrange(Queue.SHADOW, 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "shadow.run_shadow"
    assert message["headers"]["timelimit"] == [330, 300]
    assert message["properties"]["delivery_info"] == {"exchange": "", "routing_key": Queue.SHADOW}
    _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert (kwargs["test_key"], kwargs["job_id"], kwargs["session_id"]) == ("sh", str(first.id), "s-1")
    assert kwargs["primary"]["model"] == SOURCE and "model" not in kwargs["request"]
    assert message["headers"]["kwargsrepr"] == repr({"test_key": "sh", "job_id": str(first.id)})

    second = run(job(session_id="s-2"))  # the backlog is full
    assert second.status == "succeeded"
    assert shadow_queue.llen(Queue.SHADOW) == 1
    assert dropped_counts("sh") == {"backlog": 1}

    shadow_queue.delete(Queue.SHADOW)  # purged (celery purge -Q shadow): nothing left to drift
    third = run(job(session_id="s-3"))
    assert shadow_queue.llen(Queue.SHADOW) == 1 and dropped_counts("sh") == {"backlog": 1}
    assert json.loads(base64.b64decode(json.loads(shadow_queue.lindex(Queue.SHADOW, 0))["body"]))[1][
        "job_id"
    ] == str(third.id)


@pytest.fixture(autouse=True)
def not_eager():
    """These tests publish for real (test_run's tests run the task eagerly instead)."""
    with celery_eager(False):
        yield


def test_a_drained_batch_is_offered_in_one_push_and_what_does_not_fit_is_dropped(
    catalogue, shadow_queue, settings
):
    """The drainer hands a batch of written calls at once: their offers go out together, the
    first ones up to the backlog's room are pushed in order and the rest counted ``backlog``."""
    start(judge=None)
    payloads_seen: list = []
    remove = recorded.on_recorded(payloads_seen.extend)
    settings.SHADOW_MAX_BACKLOG = 10**6
    try:
        jobs = [run(job(session_id=f"s-{i}")) for i in range(3)]
    finally:
        remove()
    shadow_queue.delete(Queue.SHADOW)
    for key in redis_client().scan_iter("muse:shadow:sh:dropped*"):
        redis_client().delete(key)
    settings.SHADOW_MAX_BACKLOG = 2

    assert shadow_offer(payloads_seen) == 2
    entries = [json.loads(e) for e in reversed(shadow_queue.lrange(Queue.SHADOW, 0, -1))]
    offered = [json.loads(base64.b64decode(e["body"]))[1]["job_id"] for e in entries]
    assert offered == [str(j.id) for j in jobs[:2]]
    assert shadow_queue.llen(Queue.SHADOW) == 2 and dropped_counts("sh") == {"backlog": 1}


def test_with_another_broker_a_failed_publish_gives_its_backlog_place_back(catalogue, settings, monkeypatch):
    """The counter path (a broker other than this Redis): a publish that raises frees the place
    it took, and the call is counted ``error``, not ``backlog``."""
    from routing.shadow import sampling

    monkeypatch.setattr(sampling, "direct_publisher", lambda app: None)
    app.loader.import_default_modules()
    task = app.tasks["shadow.run_shadow"]

    def refused(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(task, "apply_async", refused)
    start(judge=None)
    settings.SHADOW_MAX_BACKLOG = 5
    j = run(job(session_id="s-err"))
    assert j.status == "succeeded"
    assert int(redis_client().get(BACKLOG_KEY) or 0) == 0
    assert dropped_counts("sh") == {"error": 1}
