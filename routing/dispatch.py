"""Hand a completion job to a Celery worker and wait (bounded) for it to finish.

The task id is the job id, so the web process waits on the task's result channel (Redis pub/sub
with Redis; the result directory on the embedded default) instead of polling the database.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import transaction

from muse_experiments.queues import Queue

from .events import uses_redis
from .models import CompletionJob
from .services import completion_job_create
from .tasks import run_completion

log = logging.getLogger(__name__)


def enqueue_completion(job: CompletionJob) -> None:
    """Enqueue the worker task once the job row is committed (a worker never sees a rolled-back job)."""
    job_id = str(job.id)
    transaction.on_commit(
        lambda: run_completion.apply_async(args=[job_id], task_id=job_id, queue=Queue.COMPLETIONS)
    )


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
    try:
        run_completion.AsyncResult(str(job.id)).get(timeout=timeout_s, interval=0.02, propagate=False)
    except CeleryTimeout:
        log.info("completion %s still running after %.1fs; answering 202", job.id, timeout_s)
    job.refresh_from_db()
    return job
