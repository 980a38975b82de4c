"""Completion tasks: take a job id, call one service, safe to run twice."""

from __future__ import annotations

from celery import Task, shared_task

from muse_experiments.queues import Queue

from .router import execute_job
from .services import completion_job_fail


class CompletionTask(Task):
    """Marks the job failed with a reason when the task fails for good (e.g. time limit)."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        job_id = args[0] if args else kwargs.get("job_id")
        if job_id:
            completion_job_fail(job_id=job_id, reason=f"worker error: {type(exc).__name__}")


@shared_task(
    base=CompletionTask,
    name="routing.run_completion",
    queue=Queue.COMPLETIONS,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=300,
    time_limit=330,
)
def run_completion(job_id: str) -> str:
    """Route and run one completion job. Returns the job's final status."""
    return execute_job(job_id=job_id)
