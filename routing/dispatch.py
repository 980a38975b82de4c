"""Hand a completion job to a Celery worker and wait (bounded) for it to finish.

With Redis the web process waits on the job's hand-off list (:mod:`routing.handoff`: one
``BLPOP``) and answers from the final state the worker published, without reloading the job from
the database; it re-reads the job row once a second as a safety net (a job failed by another
path). On the embedded default the task id is the job id, so the web process waits on Celery's
result store (a file) and then reads the job row.

Outages (``bench/chaos.py`` injects them): a job whose task cannot be published (broker down
beyond ``CELERY_TASK_PUBLISH_RETRY_POLICY``) is failed ``broker_unavailable`` at once, never left
queued, and the caller gets a 503; a result channel lost while waiting (Redis restarted) falls
back to reading the job row. A task message lost in the broker (Redis hands a message to a
worker with BRPOP and records it as unacknowledged a moment later; a worker SIGKILLed in
between takes it along) is published again by :func:`routing.tasks.requeue_lost_jobs` once its job has waited
``COMPLETION_REQUEUE_AFTER_S`` unclaimed; the job's claim makes any second delivery a no-op.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import transaction

from muse_experiments.queues import Queue

from .events import uses_redis
from .handoff import apply_final, wait_final
from .models import CompletionJob, JobStatus
from .services import completion_job_create, completion_job_fail
from .tasks import run_completion

log = logging.getLogger(__name__)

#: How often (s) a request waiting on Redis re-reads the job row.
RECHECK_S = 1.0


def enqueue_completion(job: CompletionJob) -> None:
    """Enqueue the worker task once the job row is committed (a worker never sees a rolled-back job).

    The message says whether the job streams and whether its caller pinned a model, so the worker
    claims it without reading it first.
    """
    job_id = str(job.id)
    stream, pinned = bool(job.stream), bool(job.request.get("model"))
    transaction.on_commit(lambda: publish_completion(job_id, stream=stream, pinned=pinned))


#: Error of a job whose task could not be handed to the broker (it never ran).
BROKER_UNAVAILABLE = "broker_unavailable: the job could not be queued and was not run"


def publish_completion(job_id: str, *, stream: bool | None = None, pinned: bool | None = None) -> None:
    """Publish the job's task; if the broker refuses it, fail the job (never left queued) and re-raise.

    With Redis no Celery result is stored: the final state travels through :mod:`routing.handoff`.
    """
    kwargs = {"stream": stream, "pinned": pinned} if stream is not None and pinned is not None else {}
    options = {"ignore_result": True} if uses_redis() else {}
    try:
        run_completion.apply_async(
            args=[job_id], kwargs=kwargs, task_id=job_id, queue=Queue.COMPLETIONS, **options
        )
    except Exception:
        completion_job_fail(job_id=job_id, reason=BROKER_UNAVAILABLE)
        raise


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
) -> tuple[CompletionJob, bool]:
    """Create the job (or find it by idempotency key) and hand it to a worker. Returns ``(job, created)``.

    A streamed job goes to a worker only when deltas can travel through Redis; without Redis the
    web request runs it itself (:func:`routing.streaming.job_events`).
    """
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
        )
        if created and (not stream or uses_redis()):
            enqueue_completion(job)
    return job, created


def wait_for_job(job: CompletionJob, *, timeout_s: float) -> CompletionJob:
    """Block up to ``timeout_s`` seconds for the job to finish; return it with its latest state."""
    if uses_redis():
        return _wait_redis(job, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        run_completion.AsyncResult(str(job.id)).get(timeout=timeout_s, interval=0.02, propagate=False)
    except CeleryTimeout:
        log.info("completion %s still running after %.1fs; answering 202", job.id, timeout_s)
    except Exception as exc:  # noqa: BLE001 - the result channel broke (Redis restarted): read the row
        log.warning("result channel lost (%s); waiting on the job row", type(exc).__name__)
        while time.monotonic() < deadline:
            job.refresh_from_db(fields=["status"])
            if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                break
            time.sleep(0.1)
    job.refresh_from_db()
    return job


def _wait_redis(job: CompletionJob, *, timeout_s: float) -> CompletionJob:
    """Wait on the job's hand-off list, re-reading the row every :data:`RECHECK_S` (and only the
    row if the hand-off channel broke, e.g. Redis restarted)."""
    deadline = time.monotonic() + timeout_s
    channel = True
    while True:
        remaining = max(deadline - time.monotonic(), 0.0)
        if channel:
            try:
                state = wait_final(str(job.id), timeout_s=min(RECHECK_S, remaining))
            except Exception as exc:  # noqa: BLE001 - the hand-off channel broke: read the row
                log.warning("result channel lost (%s); waiting on the job row", type(exc).__name__)
                channel, state = False, None
            if state is not None:
                return apply_final(job, state)
        else:
            time.sleep(min(0.1, remaining))
        job.refresh_from_db()
        if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            return job
        if time.monotonic() >= deadline:
            log.info("completion %s still running after %.1fs; answering 202", job.id, timeout_s)
            return job
