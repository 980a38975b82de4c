"""The wait of ``POST /api/v1/experiments/{key}/results/compute`` with ``wait_s``: the task hands
the snapshot's id to the waiting request over Redis, as completions do
(:mod:`muse_experiments.infra.handoff`, name ``muse:results:<request id>``).

The web never reads the Celery result backend (``compute_results`` ignores its result): an
``AsyncResult.get`` subscribed to the task's result channel and registered a pending result,
took about 1 s for a 0.05 s wait, and left both behind when it timed out.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

from django.conf import settings

from muse_experiments.infra.handoff import handoff_publish, handoff_wait

from .models import ResultSnapshot

log = logging.getLogger(__name__)

#: How often (s) the wait reads the snapshot's row instead when Redis cannot be reached.
ROW_POLL_S = 0.1


def handoff_name(request_id: str | uuid.UUID) -> str:
    return f"muse:results:{request_id}"


def results_publish(*, request_id: str | uuid.UUID, snapshot_id: int | None) -> None:
    """Wake the request waiting for ``request_id`` (the task calls it once the snapshot is stored,
    or with ``None`` when there is nothing to compute). A Redis error is logged: the waiter reads
    the snapshot's row when its wait ends."""
    try:
        handoff_publish(
            handoff_name(request_id),
            json.dumps({"snapshot_id": snapshot_id}),
            ttl_s=settings.COMPLETION_STREAM_TTL_S,
        )
    except Exception:  # noqa: BLE001 - the waiter falls back to the row
        log.exception("could not hand results request %s over", request_id)


def results_wait(*, request_id: str | uuid.UUID, timeout_s: float) -> ResultSnapshot | None:
    """Block up to ``timeout_s`` seconds for the snapshot computed for ``request_id``; ``None``
    when it is not stored by then. Waits on the hand-off (one ``BLPOP`` at a time); without Redis
    it polls the row every :data:`ROW_POLL_S` seconds. Leaves nothing registered behind."""
    deadline = time.monotonic() + timeout_s
    try:
        handoff_wait(handoff_name(request_id), timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - the hand-off channel broke: read the row
        log.warning("results hand-off lost (%s); waiting on the snapshot row", type(exc).__name__)
        while time.monotonic() < deadline:
            if ResultSnapshot.objects.filter(request_id=request_id).exists():
                break
            time.sleep(min(ROW_POLL_S, max(deadline - time.monotonic(), 0.0)))
    return ResultSnapshot.objects.filter(request_id=request_id).first()
