"""Hand a completion job to a Celery worker and wait (bounded) for it to finish.

The web process waits on the job's hand-off list (:mod:`routing.state.handoff`: one ``BLPOP``) and
answers from the final state the worker published, without reloading the job from the database;
it re-reads the job row once a second as a safety net (a job failed by another path).

A caller that waits on this request, without an idempotency key and without streaming, costs no
database round trip before the publish: the message carries the job's row
(:func:`routing.messages.job_row`) and the worker writes it as it claims the job. The
waiting request writes it itself (``queued``) before handing the id out unanswered, and when no
worker has claimed it after ``COMPLETION_REQUEUE_AFTER_S`` (then it also publishes the task again).

Every job is findable from its publish on: :func:`_send` writes its record with the message
(:func:`routing.state.claims.queue_published`, ``queued``, the row included), which
``GET /api/v1/completions/{id}`` reads until the row is written, whether or not anyone still
waits for the job.

Outages (``bench/chaos.py`` injects them): a job whose task cannot be published (broker down
beyond ``CELERY_TASK_PUBLISH_RETRY_POLICY``) is failed ``broker_unavailable`` at once, never left
queued, and the caller gets a 503; a result channel lost while waiting (Redis restarted) falls
back to reading the job row. A task message lost in the broker (Redis hands a message to a
worker with BRPOP and records it as unacknowledged a moment later; a worker SIGKILLed in
between takes it along) is published again by :mod:`routing.worker.reaper` within seconds of that
worker's heartbeat expiring, and in any case once its job has waited
``COMPLETION_REQUEUE_AFTER_S`` unclaimed; the job's claim makes any second delivery a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from rest_framework.exceptions import AuthenticationFailed

from muse_experiments.infra.broker import publish_task
from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import redis_client
from routing.jobs import (
    completion_job_create,
    completion_job_fail,
    completion_job_hand_out,
    completion_job_new,
)
from routing.messages import RUN_COMPLETION, job_row
from routing.models import FINISHED_STATUSES, JOB_LOST, CompletionJob, JobStatus
from routing.state import claims
from routing.state.handoff import apply_final, wait_final
from routing.web.relay import job_cancel_request

log = logging.getLogger(__name__)

#: How often (s) a waiting request re-reads the job row.
RECHECK_S = 1.0


def enqueue_completion(job: CompletionJob) -> None:
    """Enqueue the worker task once the job row is committed (a worker never sees a rolled-back job).

    The message says whether the job streams, so the worker claims it without reading it first.
    """
    job_id, stream = str(job.id), bool(job.stream)
    transaction.on_commit(lambda: publish_completion(job_id, stream=stream))


#: Error of a job whose task could not be handed to the broker (it never ran).
BROKER_UNAVAILABLE = "broker_unavailable: the job could not be queued and was not run"


def publish_completion(
    job_id: str, *, stream: bool | None = None, row: Mapping[str, Any] | None = None
) -> None:
    """Publish the job's task; if the broker refuses it, fail the job (never left queued) and re-raise.

    ``row``: a deferred job's row (:func:`routing.messages.job_row`), which the worker writes as
    it claims the job. No Celery result is stored: the final state travels through
    :mod:`routing.state.handoff`.
    """
    kwargs: dict[str, Any] = {"stream": stream} if stream is not None else {}
    if row is not None:
        kwargs["row"] = row
    try:
        _send(job_id, kwargs)
    except Exception:
        completion_job_fail(job_id=job_id, reason=BROKER_UNAVAILABLE, row=row)
        raise


def _send(job_id: str, kwargs: dict[str, Any]) -> None:
    """``run_completion`` for ``job_id`` on the completions queue (task id = job id), with the
    job's record (:func:`routing.state.claims.queue_published`: from now on the job is findable, and
    published again if the worker that takes the message dies before claiming it), pushed with
    the message by one script where the broker is this Redis
    (:func:`routing.state.claims.push_published`), else just after it.

    No Celery result is stored (the answer travels through :mod:`routing.state.handoff`): the message
    is built by ``app.amqp.as_task_v2``, the call ``Task.apply_async`` makes itself (same
    headers and signals), and published by :func:`muse_experiments.infra.broker.publish_task`
    with Celery's publish retry policy. Left out is what ``apply_async`` adds for a task whose
    caller may want a result: task routing and an ``AsyncResult`` registered with the result
    backend and dropped at once. Eager mode (tests) takes ``apply_async``.
    """
    # the message's printable copy of its arguments (Celery's saferepr of them, shown by monitoring
    # tools) never holds the conversation, and costs nothing to build
    argsrepr = repr([job_id])
    kwargsrepr = repr({k: "…" if k == "row" else v for k, v in kwargs.items()})
    app = current_app._get_current_object()  # the project's app (muse_experiments.celery)
    name = RUN_COMPLETION.name  # by name: the web side never imports the worker's tasks

    def record(pipe) -> None:
        claims.queue_published(pipe, job_id, row=kwargs.get("row"), stream=bool(kwargs.get("stream")))

    if app.conf.task_always_eager:
        _record_published(record)
        _registered(app, name).apply_async(
            args=[job_id], kwargs=kwargs, task_id=job_id, queue=Queue.COMPLETIONS,
            argsrepr=argsrepr, kwargsrepr=kwargsrepr,
        )  # fmt: skip
        return
    message = app.amqp.as_task_v2(
        job_id, name, args=[job_id], kwargs=kwargs, ignore_result=True,
        time_limit=RUN_COMPLETION.time_limit, soft_time_limit=RUN_COMPLETION.soft_time_limit,
        argsrepr=argsrepr, kwargsrepr=kwargsrepr,
    )  # fmt: skip
    row, stream = kwargs.get("row"), bool(kwargs.get("stream"))

    def send(queue: str, entry: str) -> None:
        claims.push_published(queue, entry, job_id=job_id, row=row, stream=stream)

    if not publish_task(app, message, name=name, queue=Queue.COMPLETIONS, send=send):
        _record_published(record)


def _registered(app, name: str):
    """The task registered as ``name``, for eager mode (tests), where the web process runs it
    itself. Its module is loaded the way a worker loads it (the app's autodiscovered task modules,
    :mod:`muse_experiments.celery`), not imported here."""
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]


def _record_published(record: Callable[[Any], None]) -> None:
    """Write a published job's record (:func:`routing.state.claims.queue_published`) on its own, where
    the broker is not this Redis. Best effort: without it the job is still known to the request
    waiting for it, and a claim that took it already is left as it is."""
    try:
        pipe = redis_client().pipeline(transaction=False)
        record(pipe)
        pipe.execute()
    except Exception as exc:  # noqa: BLE001 - Redis down: see muse_experiments.infra.redis_client
        log.warning("could not record a published job (%s)", type(exc).__name__)


def submit_completion(
    *,
    api_key: Any,
    session_id: str,
    user_id: str,
    subagent: str,
    attributes: Mapping[str, Any],
    request: Mapping[str, Any],
    idempotency_key: str = "",
    stream: bool = False,
    durable: bool = True,
) -> tuple[CompletionJob, bool]:
    """Create the job (or find it by idempotency key) and hand it to a worker. Returns ``(job, created)``.

    ``durable=False`` for callers that wait for the answer on this request
    (:func:`routing.jobs.completion_job_create`).
    """
    try:
        job, created = _create_and_enqueue(
            api_key=api_key, session_id=session_id, user_id=user_id, subagent=subagent,
            attributes=attributes, request=request, idempotency_key=idempotency_key, stream=stream,
            durable=durable,
        )  # fmt: skip
    except IntegrityError:
        # the key was deleted after this process cached it (the cache follows within
        # CONFIG_REFRESH_INTERVAL_S): its job cannot reference it
        if api_key is not None and not type(api_key).objects.filter(pk=api_key.pk).exists():
            raise AuthenticationFailed("This API key no longer exists.") from None
        raise
    return job, created


def _create_and_enqueue(
    *, api_key, session_id, user_id, subagent, attributes, request, idempotency_key, stream, durable
) -> tuple[CompletionJob, bool]:
    if not (durable or idempotency_key or stream):
        # the caller waits here and has no job id yet: the worker claims it (in Redis) from its message
        job = completion_job_new(
            api_key=api_key, session_id=session_id, user_id=user_id, subagent=subagent,
            attributes=attributes, request=request,
        )  # fmt: skip
        publish_completion(str(job.id), stream=False, row=job_row(job))
        return job, True
    with transaction.atomic():
        job, created = completion_job_create(
            api_key=api_key,
            session_id=session_id,
            user_id=user_id,
            subagent=subagent,
            attributes=attributes,
            request=request,
            idempotency_key=idempotency_key,
            stream=stream,
            durable=durable,
        )
        if created:
            enqueue_completion(job)
    return job, created


def wait_for_job(
    job: CompletionJob, *, timeout_s: float, caller_gone: Callable[[], bool] | None = None
) -> CompletionJob:
    """Block up to ``timeout_s`` seconds for the job to finish; return it with its latest state.

    Waits on the job's hand-off list, re-reading the row every :data:`RECHECK_S` (and only the
    row if the hand-off channel broke, e.g. Redis restarted). With ``caller_gone`` (see
    :func:`caller_gone_check`), the caller's connection is checked every :data:`CALLER_CHECK_S`
    seconds of the wait, without a database read: once it has gone (its HTTP client gave up) the
    job's cancel flag is set (:func:`routing.web.relay.job_cancel_request`: the worker closes the
    upstream call and records the job ``cancelled``) and the wait ends.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    next_recheck = started + RECHECK_S
    unwritten = job._state.adding  # a deferred job: its row comes with its records (routing.state.claims)
    channel = True
    while True:
        remaining = max(deadline - time.monotonic(), 0.0)
        if channel:
            try:
                step = min(RECHECK_S, remaining, CALLER_CHECK_S if caller_gone else RECHECK_S)
                state = wait_final(str(job.id), timeout_s=step)
            except Exception as exc:  # noqa: BLE001 - the hand-off channel broke: read the row
                log.warning("result channel lost (%s); waiting on the job row", type(exc).__name__)
                channel, state = False, None
            if state is not None:
                return apply_final(job, state)
        else:
            time.sleep(min(0.1, remaining))
        if caller_gone is not None and caller_gone():
            log.info("the caller of completion %s went away; cancelling it", job.id)
            job_cancel_request(job_id=str(job.id))
            with contextlib.suppress(CompletionJob.DoesNotExist):  # a deferred job not claimed yet
                job.refresh_from_db()
            return job
        now = time.monotonic()
        if unwritten and (now >= deadline or now - started >= settings.COMPLETION_REQUEUE_AFTER_S):
            # about to hand the job id out unanswered, or its task looks lost: write the row (and,
            # if no worker has claimed it, publish the task again: the claim lets one delivery run it)
            if completion_job_hand_out(job) and now < deadline:
                _publish_again(str(job.id))
            unwritten = False
        if not channel or now >= next_recheck or now >= deadline:
            next_recheck = now + RECHECK_S
            try:
                job.refresh_from_db()
            except CompletionJob.DoesNotExist:
                if not unwritten:  # a database crash forgot it (routing.pipeline.streaming.job_lost)
                    return apply_final(
                        job, {"status": JobStatus.FAILED, "error": JOB_LOST, "finished_at": None}
                    )
            if job.status in FINISHED_STATUSES:
                return job
        if time.monotonic() >= deadline:
            log.info("completion %s still running after %.1fs; answering 202", job.id, timeout_s)
            return job


def _publish_again(job_id: str) -> None:
    """Publish a deferred job's task again (its row now written, unclaimed). A safety net: if the
    broker refuses it, the job stays queued for :func:`routing.worker.tasks.requeue_lost_jobs` (its first
    message may only be waiting behind others) rather than being failed."""
    try:
        _send(job_id, {})
    except Exception as exc:  # noqa: BLE001
        log.warning("could not publish completion %s again (%s)", job_id, type(exc).__name__)


#: How often a waiting request checks whether its caller is still connected (seconds).
CALLER_CHECK_S = 0.25


def caller_gone_check(environ: Mapping[str, Any]) -> Callable[[], bool] | None:
    """A check that says whether the HTTP client of this (WSGI) request has closed its connection.

    Finds the client socket (gunicorn's ``gunicorn.socket``; Django's development and test server:
    under ``wsgi.input``) and reports True once it is readable with nothing to read (EOF: the
    client closed or reset it). ``None`` when the server does not expose the socket.
    """
    sock = environ.get("gunicorn.socket")
    stream = environ.get("wsgi.input")
    for _ in range(6):
        if sock is not None or stream is None:
            break
        if isinstance(stream, socket.socket):
            sock = stream
        elif hasattr(stream, "_sock"):
            sock = stream._sock
        elif hasattr(stream, "_read"):  # django.core.handlers.wsgi.LimitedStream
            stream = getattr(stream._read, "__self__", None)
        else:
            stream = getattr(stream, "raw", None)
    if not isinstance(sock, socket.socket):
        return None

    def gone() -> bool:
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    return gone
