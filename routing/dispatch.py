"""Hand a completion job to a Celery worker and wait (bounded) for it to finish.

The task id is the job id, so the web process waits on the task's result channel (Redis pub/sub
with Redis; the result directory on the embedded default) instead of polling the database.

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
from .models import CompletionJob, JobStatus
from .services import completion_job_create, completion_job_fail
from .tasks import run_completion

log = logging.getLogger(__name__)


def enqueue_completion(job: CompletionJob) -> None:
    """Enqueue the worker task once the job row is committed (a worker never sees a rolled-back job)."""
    job_id = str(job.id)
    transaction.on_commit(lambda: publish_completion(job_id))


#: Error of a job whose task could not be handed to the broker (it never ran).
BROKER_UNAVAILABLE = "broker_unavailable: the job could not be queued and was not run"


def publish_completion(job_id: str) -> None:
    """Publish the job's task; if the broker refuses it, fail the job (never left queued) and re-raise."""
    try:
        run_completion.apply_async(args=[job_id], task_id=job_id, queue=Queue.COMPLETIONS)
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
    """Block up to ``timeout_s`` seconds for the job's task, then return the job as stored."""
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
