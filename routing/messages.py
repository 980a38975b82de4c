"""The task messages the web side publishes and the worker runs: their names and time limits.

Shared so that neither side imports the other: the web side publishes ``routing.run_completion``
by name (:mod:`routing.web.dispatch`), the worker registers its task under that name
(:mod:`routing.worker.tasks`). A registered name never changes, so the messages queued before a
deploy are run by the workers after it.

A deferred job (:func:`routing.jobs.completion_job_new`) travels as its row in its message
(:func:`job_row`), read back by the worker and the readers of unwritten jobs (:func:`job_from_row`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from routing.models import CompletionJob


@dataclass(frozen=True)
class TaskSpec:
    """A Celery task's registered ``name`` and its time limits in seconds: past
    ``soft_time_limit`` the task gets ``SoftTimeLimitExceeded``, past ``time_limit`` its process is
    killed (prefork pool only; ``--pool threads`` cannot enforce either)."""

    name: str
    soft_time_limit: int
    time_limit: int


#: Route and run one completion job (:func:`routing.worker.tasks.run_completion`).
RUN_COMPLETION = TaskSpec(name="routing.run_completion", soft_time_limit=300, time_limit=330)

#: Make one shadow call (:func:`routing.shadow.tasks.run_shadow`), published by
#: :func:`routing.shadow.sampling.shadow_offer`.
RUN_SHADOW = TaskSpec(name="shadow.run_shadow", soft_time_limit=300, time_limit=330)


def job_row(job: CompletionJob, *, request: bool = True) -> dict[str, Any]:
    """A job's row as a task-message field (JSON-serialisable; read back by :func:`job_from_row`).

    ``attributes`` and ``request`` travel as JSON *text*: the message's own JSON (kombu) turns
    client objects shaped ``{"__type__": …, "__value__": …}`` into Python values, or refuses to
    decode the message at all. ``request=False`` leaves the request out (``None``) for a reader
    that has it from elsewhere.
    """
    return {
        "api_key_id": job.api_key_id,
        "session_id": job.session_id,
        "user_id": job.user_id,
        "subagent": job.subagent,
        "attributes": json.dumps(job.attributes, ensure_ascii=False),
        "request": json.dumps(job.request, ensure_ascii=False) if request else None,
        "created_at": job.created_at.isoformat(),
    }


#: Fields a deferred job's row carries in its task message (:func:`routing.jobs.completion_job_new`).
_ROW_FIELDS = frozenset(
    {"api_key_id", "session_id", "user_id", "subagent", "attributes", "request", "created_at"}
)


def job_from_row(job_id, row: Mapping[str, Any], **state: Any) -> CompletionJob:
    """The job a deferred message describes, with ``state`` (status, lease, …) set; unsaved."""
    fields = {k: v for k, v in row.items() if k in _ROW_FIELDS}
    for name in ("attributes", "request"):
        if isinstance(fields.get(name), str):
            fields[name] = json.loads(fields[name])
    created = fields.get("created_at")
    fields["created_at"] = datetime.fromisoformat(created) if isinstance(created, str) else timezone.now()
    return CompletionJob(id=uuid.UUID(str(job_id)), **fields, **state)
