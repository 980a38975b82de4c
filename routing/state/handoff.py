"""Hand a finished job's final state to the web request waiting for it, over Redis
(:mod:`muse_experiments.infra.handoff` under the name ``muse:job:<id>``).

The worker publishes ``{status, result, error, finished_at}`` (the job's public final state) in
the same Redis transaction that buffers the call's records (:mod:`routing.worker.drainer`):

* ``SET muse:job:<id>:final`` — readable by anyone until it expires (``COMPLETION_STREAM_TTL_S``);
* ``RPUSH muse:job:<id>:done`` — wakes the one request blocked on it (``BLPOP``).

So the waiting request answers from Redis without reloading the job from the database, and a
``GET /api/v1/completions/{id}`` sees the result before the drainer has written it.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from django.conf import settings

from muse_experiments.infra.handoff import handoff_final, handoff_queue, handoff_wait
from muse_experiments.infra.redis_client import redis_client

log = logging.getLogger(__name__)


def handoff_name(job_id: str) -> str:
    return f"muse:job:{job_id}"


def queue_final(pipe, job_id: str, final_json: str) -> None:
    """Add the commands that publish a job's final state (JSON) to a Redis pipeline."""
    handoff_queue(pipe, handoff_name(job_id), final_json, ttl_s=settings.COMPLETION_STREAM_TTL_S)


def publish_final(*, job_id: str, state: dict[str, Any]) -> None:
    """Publish a job's final state on its own (failure paths: worker lost, task failed)."""
    try:
        pipe = redis_client().pipeline(transaction=True)
        queue_final(pipe, job_id, json.dumps(state, separators=(",", ":"), default=str))
        pipe.execute()
    except Exception:  # waiters re-read the job row every second
        log.exception("could not publish the final state of job %s", job_id)


def final_state(job_id: str) -> dict[str, Any] | None:
    """The job's final state if a worker published one, else ``None``."""
    raw = handoff_final(handoff_name(job_id))
    return json.loads(raw) if raw else None


def wait_final(job_id: str, *, timeout_s: float) -> dict[str, Any] | None:
    """Block up to ``timeout_s`` for the job's final state (``BLPOP``); ``None`` on timeout.

    A second request waiting for the same job (an idempotent retry) finds the state under
    ``final`` once the first took the wake-up.
    """
    raw = handoff_wait(handoff_name(job_id), timeout_s=timeout_s)
    return json.loads(raw) if raw else None


def apply_final(job: Any, state: dict[str, Any]) -> Any:
    """Set ``status``, ``result``, ``error`` and ``finished_at`` of a job object from ``state``."""
    job.status, job.result, job.error = state["status"], state.get("result"), state.get("error") or ""
    finished = state.get("finished_at")
    job.finished_at = datetime.fromisoformat(finished) if isinstance(finished, str) else finished
    return job
