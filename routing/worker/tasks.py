"""Completion tasks: take a job id, call one service, safe to run twice.

Delivery guarantees (``acks_late`` + ``reject_on_worker_lost``): a task message is
acknowledged only after the task returns, so a worker that dies mid-task leaves it unacknowledged
and Redis redelivers it after the visibility timeout (``CELERY_VISIBILITY_TIMEOUT_S``). The job's
lease (``routing.jobs.completion_job_claim``, kept alive by ``routing.worker.leases``) decides what a
redelivery does: a queued job runs; a job whose live worker still holds it is left alone; a job
whose worker died mid-call is failed ``worker_lost`` — never re-run, so the provider is never
called twice for the same attempt; the attempt is recorded ``lost``, its cost unknown. Jobs whose
task is never redelivered are failed by :func:`reap_lost` (every worker's lease keeper, within
seconds of the dead worker's heartbeat expiring; and beat's :func:`reap_expired_completion_jobs`),
which also publishes again the jobs the dead worker may have taken before claiming them
(:mod:`routing.worker.reaper`).

Time limits apply with the prefork pool; with ``--pool threads`` Celery cannot enforce them, and
each upstream call is bounded by its endpoint's ``timeout_s`` instead. No task uses a countdown.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Task, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from muse_experiments.infra.queues import Queue
from muse_experiments.infra.runtime import tune_gc
from routing.jobs import completion_job_fail
from routing.messages import RUN_COMPLETION
from routing.models import CompletionJob, JobStatus
from routing.pipeline.router import execute_job
from routing.pipeline.streaming import publish_job_events
from routing.worker.drainer import drain, drainer
from routing.worker.leases import keeper
from routing.worker.reaper import reap_lost_work

log = logging.getLogger(__name__)


class CompletionTask(Task):
    """Marks the job failed with a reason when the task fails for good (e.g. time limit)."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        job_id = args[0] if args else kwargs.get("job_id")
        if job_id:
            reason = f"worker error: {type(exc).__name__}"
            completion_job_fail(job_id=job_id, reason=reason, row=(kwargs or {}).get("row"))


@shared_task(
    base=CompletionTask,
    name=RUN_COMPLETION.name,  # published by name (routing.web.dispatch): never renamed
    queue=Queue.COMPLETIONS,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=RUN_COMPLETION.soft_time_limit,
    time_limit=RUN_COMPLETION.time_limit,
)
def run_completion(
    job_id: str, stream: bool | None = None, pinned: bool | None = None, row: dict | None = None
) -> str:
    """Route and run one completion job (streamed jobs publish their deltas). Returns its final status.

    ``stream`` comes with the message (:func:`routing.web.dispatch.enqueue_completion`); a message
    without it (:func:`requeue_lost_jobs`) reads it from the job row. ``pinned`` (sent by earlier
    versions) is ignored. ``row``: a job not written yet (:func:`routing.jobs.completion_job_new`;
    non-streamed), written as it is claimed.
    """
    with keeper.hold(job_id):
        if row is not None:
            return execute_job(job_id=job_id, row=row)
        if stream is None:
            stream = CompletionJob.objects.filter(pk=job_id).values_list("stream", flat=True).first()
            if stream is None:
                return "missing"
        if stream:
            return publish_job_events(job_id=job_id)
        # one non-streamed upstream call per attempt; a cancel cuts it off (routing.state.events)
        return execute_job(job_id=job_id)


def requeue_lost_jobs(*, older_than_s: float | None = None) -> int:
    """Publish again the tasks of jobs still ``queued`` (never claimed) after ``older_than_s``
    (default ``COMPLETION_REQUEUE_AFTER_S``); each job at most once per that period. Returns how
    many were published. Safe: the claim lets exactly one delivery run a job."""
    older_than_s = settings.COMPLETION_REQUEUE_AFTER_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    ids = CompletionJob.objects.filter(status=JobStatus.QUEUED, deliveries=0, created_at__lt=cutoff)
    published = 0
    for job_id in ids.values_list("id", flat=True)[:500]:
        if cache.add(f"muse:requeued:{job_id}", 1, timeout=max(1, int(older_than_s))):
            run_completion.apply_async(args=[str(job_id)], task_id=str(job_id), queue=Queue.COMPLETIONS)
            published += 1
    if published:
        log.warning(
            "published %d completion task(s) again: their jobs waited %.0fs unclaimed",
            published,
            older_than_s,
        )
    return published


@shared_task(
    name="maintenance.reap_expired_completion_jobs",
    queue=Queue.MAINTENANCE,
    soft_time_limit=50,
    time_limit=60,
)
def reap_expired_completion_jobs() -> int:
    """Fail running jobs whose worker died (lease or heartbeat expired) and record their lost
    attempts, and publish again the tasks of jobs lost in the broker (:func:`requeue_lost_jobs`,
    :func:`routing.worker.reaper.republish_unclaimed`). Returns how many were failed."""
    requeue_lost_jobs()
    return reap_lost(False)


def reap_lost(death: bool) -> int:
    """:func:`routing.worker.reaper.reap_lost_work` publishing with :func:`republish`: what beat's task
    and every worker's lease keeper run (``death``: a worker's heartbeat was just found expired)."""
    return reap_lost_work(death=death, publish=republish, heartbeats=keeper.steady())


def republish(job_id: str, row: dict | None, stream: bool) -> None:
    """Publish ``run_completion`` for a job again (its record says it was never claimed)."""
    kwargs: dict = {"stream": stream} if row is None else {"stream": False, "row": row}
    run_completion.apply_async(
        args=[job_id], kwargs=kwargs, task_id=job_id, queue=Queue.COMPLETIONS,
        kwargsrepr=repr({k: "…" if k == "row" else v for k, v in kwargs.items()}),
    )  # fmt: skip


@shared_task(
    name="maintenance.drain_call_records",
    queue=Queue.MAINTENANCE,
    soft_time_limit=50,
    time_limit=60,
)
def drain_call_records() -> int:
    """Write buffered call records to the database until the buffer is empty (or 50 batches).

    The ``drainer`` process (``manage.py drain_records``) drains continuously; beat runs this
    task every 15 s as a safety net, and it serves on demand. Returns how many records it wrote.
    """
    total = 0
    for _ in range(50):
        n = drain()
        total += n
        if not n:
            break
    return total


@worker_ready.connect
def _start_background_threads(**_kwargs) -> None:
    """Every worker renews its leases and reaps expired jobs, with or without ``celery beat``,
    and (with ``RECORDS_DRAINER``) drains the write-behind buffer of call records. Start-up's
    objects are then frozen out of garbage collection (:func:`muse_experiments.infra.runtime.tune_gc`)."""
    keeper.start(reap=reap_lost)
    if settings.RECORDS_DRAINER:
        drainer.start()
    tune_gc()
