"""The shadow queue's task: takes a primary call's summary, calls one service, safe to run twice."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_shutdown

from muse_experiments.infra.queues import Queue

from ..messages import RUN_SHADOW
from .budget import backlog_release
from .pairs import flush_pairs
from .run import shadow_run


@shared_task(
    name=RUN_SHADOW.name,  # published by name (routing.shadow.sampling): never renamed
    queue=Queue.SHADOW,
    acks_late=False,  # a shadow call lost with its worker is lost, never made twice
    ignore_result=True,
    soft_time_limit=RUN_SHADOW.soft_time_limit,
    time_limit=RUN_SHADOW.time_limit,
)
def run_shadow(
    *,
    test_key: str,
    job_id: str,
    session_id: str,
    user_id: str,
    request: dict[str, Any],
    primary: dict[str, Any],
    counted: bool = False,
) -> str:
    """Make one shadow call (:func:`routing.shadow.run.shadow_run`). ``counted``: published with a
    place in the backlog counter (a broker other than this Redis), given back first."""
    if counted:
        backlog_release()
    return shadow_run(
        test_key=test_key,
        job_id=job_id,
        session_id=session_id,
        user_id=user_id,
        request=request,
        primary=primary,
    )


@worker_shutdown.connect
def _write_waiting_pairs(**_kwargs) -> None:
    """A worker shutting down writes the shadow pairs still waiting for their batch (:mod:`.pairs`)."""
    flush_pairs()
