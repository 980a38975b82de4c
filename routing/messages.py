"""The task messages the web side publishes and the worker runs: their names and time limits.

Shared so that neither side imports the other: the web side publishes ``routing.run_completion``
by name (:mod:`routing.web.dispatch`), the worker registers its task under that name
(:mod:`routing.worker.tasks`). A registered name never changes, so the messages queued before a
deploy are run by the workers after it.
"""

from __future__ import annotations

from dataclasses import dataclass


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
