"""A job's event log and cancel flag in Redis: the keys, and the writing half of the log.

One Redis Stream per job, ``muse:job:<id>:events`` (``XADD``; the key expires
``COMPLETION_STREAM_TTL_S`` after the first event): the worker appends events
(:class:`RedisEventLog`), the web process relays them (:func:`routing.web.relay.relay_events`).
``muse:job:<id>:cancel`` says the job's caller went away: the web side sets it
(:func:`routing.web.relay.job_cancel_request`), the worker reads it
(:mod:`routing.pipeline.cancel`).

Event shapes are listed in :mod:`routing.pipeline.streaming`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client
from routing.models import CompletionJob, JobStatus

log = logging.getLogger(__name__)

TERMINAL = frozenset({"done", "error"})


def stream_key(job_id: str) -> str:
    """The Redis key of a job's event stream."""
    return f"muse:job:{job_id}:events"


def cancel_key(job_id: str) -> str:
    """The Redis key that says a job's caller went away (set by the web process)."""
    return f"muse:job:{job_id}:cancel"


def terminal_event(job: CompletionJob) -> dict[str, Any]:
    """The last event for a finished job: ``done`` with its public result, or ``error``."""
    if job.status == JobStatus.SUCCEEDED:
        return {"type": "done", "id": str(job.id), "status": job.status, "result": job.result}
    return {"type": "error", "id": str(job.id), "status": job.status, "error": job.error or "failed"}


class RedisEventLog:
    """Appends one job's events to its Redis Stream (``XADD``), expiring the key after the TTL."""

    def __init__(self, job_id: str) -> None:
        self.key = stream_key(job_id)
        self.client = redis_client()
        self._expiry_set = False

    def publish(self, event: dict[str, Any]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(self.key, {"e": json.dumps(event, separators=(",", ":"))}, maxlen=100_000, approximate=True)
        if not self._expiry_set:
            pipe.expire(self.key, settings.COMPLETION_STREAM_TTL_S)
            self._expiry_set = True
        pipe.execute()


def publish_failure(*, job_id: str, message: str) -> None:
    """Tell a streamed job's listeners it failed (failure hook, reaper)."""
    try:
        RedisEventLog(job_id).publish({"type": "error", "id": job_id, "status": "failed", "error": message})
    except Exception:  # the job row already says failed; listeners also re-check it while idle
        log.exception("could not publish the failure of job %s", job_id)
