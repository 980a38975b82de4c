"""The web process's publish of a completion task (``routing.web.dispatch._send``) on a Redis broker:
the message it pushes is the one ``Task.apply_async`` would push, so every Celery worker reads
it the same way."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from django.conf import settings

from muse_experiments.celery import app
from muse_experiments.infra.logs import request_id_var
from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import client_url, redis_client
from routing.web import dispatch
from routing.worker.tasks import run_completion

#: What differs between two messages by construction (ids, clocks, the publishing host/thread).
PER_MESSAGE = {"id", "root_id", "muse_published_at", "muse_request_id", "argsrepr", "origin"}


@pytest.fixture
def queue(redis_url):
    """The completions queue's Redis list, emptied before and after (no worker runs here)."""
    client = redis_client(client_url(settings.CELERY_BROKER_URL))
    client.delete(Queue.COMPLETIONS)
    yield client
    client.delete(Queue.COMPLETIONS)


def pushed(client) -> dict:
    [raw] = client.lrange(Queue.COMPLETIONS, 0, -1)
    client.delete(Queue.COMPLETIONS)
    return json.loads(raw)


def test_the_lean_publish_pushes_what_apply_async_would(queue):
    kwargs = {"stream": False, "pinned": True, "row": {"session_id": "s-1", "request": '{"messages": []}'}}
    lean_id, reference_id = str(uuid.uuid4()), str(uuid.uuid4())
    token = request_id_var.set("req-1")
    try:
        dispatch._send(lean_id, kwargs)
    finally:
        request_id_var.reset(token)
    lean = pushed(queue)
    run_completion.apply_async(
        args=[reference_id], kwargs=kwargs, task_id=reference_id, queue=Queue.COMPLETIONS,
        ignore_result=True, argsrepr=repr([reference_id]), kwargsrepr=repr({**kwargs, "row": "…"}),
    )  # fmt: skip
    reference = pushed(queue)

    body = json.loads(base64.b64decode(lean["body"]))
    assert body[0] == [lean_id] and body[1] == kwargs
    assert json.loads(base64.b64decode(reference["body"]))[1] == kwargs
    assert lean["headers"]["id"] == lean_id and lean["headers"]["task"] == "routing.run_completion"
    assert lean["headers"]["timelimit"] == [330, 300]  # the task's own limits, as apply_async sets them
    assert lean["headers"]["ignore_result"] is True
    assert lean["headers"]["kwargsrepr"] == "{'stream': False, 'pinned': True, 'row': '…'}"
    assert lean["headers"]["muse_request_id"] == "req-1"  # the before_task_publish signal ran
    assert isinstance(lean["headers"]["muse_published_at"], float)

    def same(message: dict) -> dict:
        headers = {k: v for k, v in message["headers"].items() if k not in PER_MESSAGE}
        properties = {
            k: v for k, v in message["properties"].items()
            if k not in ("correlation_id", "delivery_tag", "reply_to", "argsrepr", "kwargsrepr")
        }  # fmt: skip
        return {**{k: v for k, v in message.items() if k not in ("body", "headers", "properties")},
                "headers": headers, "properties": properties}  # fmt: skip

    assert same(lean) == same(reference)
    assert lean["properties"]["correlation_id"] == lean_id
    assert lean["properties"]["delivery_info"] == {"exchange": "", "routing_key": Queue.COMPLETIONS}


def test_the_direct_publish_records_the_job_with_its_message_and_a_claimed_job_keeps_its_claim(queue):
    from routing.state import claims

    row = {"session_id": "s-1", "request": '{"messages": []}'}
    job_id = str(uuid.uuid4())
    dispatch._send(job_id, {"stream": False, "row": row})
    assert json.loads(base64.b64decode(pushed(queue)["body"]))[0] == [job_id]
    assert claims.unwritten(job_id) == (row, None, "")  # findable from the publish on
    assert queue.zscore(claims.QUEUED_JOBS, job_id) is not None
    assert claims.claim(job_id, worker="w1:1", row=row) == (claims.CLAIMED, None)
    dispatch._send(job_id, {})  # published again: a second message, the claim left as it is
    assert json.loads(base64.b64decode(pushed(queue)["body"]))[0] == [job_id]
    assert claims.running(job_id)[0] == "w1:1" and queue.zscore(claims.QUEUED_JOBS, job_id) is None


def test_without_redis_or_in_eager_mode_the_publish_is_apply_async(monkeypatch):
    calls = []
    monkeypatch.setattr(run_completion, "apply_async", lambda **kw: calls.append(kw))
    app.conf.task_always_eager = True
    try:
        dispatch._send("job-1", {"stream": False})
    finally:
        app.conf.task_always_eager = False
    assert [c["task_id"] for c in calls] == ["job-1"]


def test_the_web_side_finds_the_worker_task_by_its_registered_name():
    # routing.web never imports routing.worker (.importlinter): eager mode looks the task up by name
    assert dispatch._registered(app, "routing.run_completion") is run_completion._get_current_object()
    assert (run_completion.time_limit, run_completion.soft_time_limit) == (330, 300)


def _app(broker: str, **conf):
    from celery import Celery

    app = Celery("muse-test-direct", broker=broker, set_as_current=False)
    app.conf.update(conf)
    return app


def test_the_direct_publish_is_for_plain_redis_brokers_only():
    from muse_experiments.infra.broker import DirectPublisher, direct_publisher

    assert isinstance(direct_publisher(_app("redis://127.0.0.1:6379/3")), DirectPublisher)
    assert isinstance(direct_publisher(_app("unix:///run/redis.sock")), DirectPublisher)
    declined = [
        _app("sentinel://127.0.0.1:26379"),
        _app("redis://a:6379/0;redis://b:6379/0"),  # a failover list
        _app("amqp://guest:guest@127.0.0.1:5672//"),
        _app("redis://127.0.0.1:6379/3", broker_transport_options={"global_keyprefix": "muse:"}),
        _app("redis://127.0.0.1:6379/3", task_send_sent_event=True),
        _app("rediss://127.0.0.1:6380/3", broker_use_ssl={"ssl_cert_reqs": "required"}),
    ]
    assert [direct_publisher(app) for app in declined] == [None] * 6


def test_the_direct_publish_retries_by_the_publish_policy_then_raises():
    import socket
    import time

    import redis

    from muse_experiments.infra.broker import direct_publisher

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = {"max_retries": 2, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.1}
    app = _app(f"redis://127.0.0.1:{port}/0", task_publish_retry_policy=policy)
    publisher = direct_publisher(app)
    message = app.amqp.as_task_v2("job-1", "routing.run_completion", args=["job-1"], kwargs={})
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        publisher.push(message, name="routing.run_completion", queue="completions")
    assert time.monotonic() - started >= 0.2  # two waits of 0.1 s between the three tries


def test_a_bounded_push_pushes_what_push_does_while_the_list_is_below_the_limit(queue):
    from muse_experiments.infra.broker import direct_publisher

    publisher = direct_publisher(app)
    job_id = str(uuid.uuid4())
    message = app.amqp.as_task_v2(job_id, "routing.run_completion", args=[job_id], kwargs={})
    publisher.push(message, name="routing.run_completion", queue=Queue.COMPLETIONS)
    plain = pushed(queue)
    bounded_push = publisher.push_bounded
    assert bounded_push([message], name="routing.run_completion", queue=Queue.COMPLETIONS, limit=2) == 1
    bounded = pushed(queue)
    del plain["properties"]["delivery_tag"], bounded["properties"]["delivery_tag"]
    assert bounded == plain  # the same entry, one Lua script instead of an LPUSH
    results = [
        bounded_push([message], name="routing.run_completion", queue=Queue.COMPLETIONS, limit=2)
        for _ in range(3)
    ]
    assert results == [1, 1, 0]  # the list holds the limit; the next one is refused
    assert queue.llen(Queue.COMPLETIONS) == 2
    queue.rpop(Queue.COMPLETIONS)  # a worker takes one: room for one again
    assert bounded_push([message], name="routing.run_completion", queue=Queue.COMPLETIONS, limit=2) == 1
    assert bounded_push([], name="x", queue=Queue.COMPLETIONS, limit=9) == 0


def test_a_bounded_push_of_many_pushes_the_first_that_fit_in_one_script(queue):
    """A batch: the first messages up to the list's room are pushed, in order; the rest are left
    out (the caller counts them dropped)."""
    from muse_experiments.infra.broker import direct_publisher

    publisher = direct_publisher(app)
    queue.lpush(Queue.COMPLETIONS, "waiting")
    ids = [str(uuid.uuid4()) for _ in range(5)]
    messages = [app.amqp.as_task_v2(i, "routing.run_completion", args=[i], kwargs={}) for i in ids]
    n = publisher.push_bounded(messages, name="routing.run_completion", queue=Queue.COMPLETIONS, limit=4)
    assert n == 3 and queue.llen(Queue.COMPLETIONS) == 4
    entries = [json.loads(e) for e in queue.lrange(Queue.COMPLETIONS, 0, 2)]
    assert [e["headers"]["id"] for e in reversed(entries)] == ids[:3]  # LPUSHed in order
    assert (
        publisher.push_bounded(messages, name="routing.run_completion", queue=Queue.COMPLETIONS, limit=4) == 0
    )
