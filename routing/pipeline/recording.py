"""Routing step 4, record: what a call decided and what served it.

The exposure (intent-to-treat: recorded even when a fallback served), the call record with every
attempt, the job's public final state, and the session's transcript turn
(:mod:`routing.pipeline.records`). They are written behind (:func:`buffer_call`, drained by
:mod:`routing.worker.drainer`): one Redis
transaction buffers them and hands the final state to the waiting request, and a drainer writes
them to the database in bulk, normally within tens of milliseconds and within 5 s under load.
Encrypted reasoning never reaches either: only ``CompletionResult.to_public_dict()`` is stored.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from muse_experiments.experiments.assignment.specs import Decision
from muse_experiments.infra.redis_client import redis_client
from routing.metrics import observe_outcome
from routing.models import CompletionJob
from routing.pipeline.planning import Candidate
from routing.pipeline.recorded import calls_recorded
from routing.pipeline.records import call_payload, job_final_state, records_write
from routing.pipeline.serving import ServeOutcome
from routing.state.claims import queue_done
from routing.state.handoff import apply_final, publish_final, queue_final

log = logging.getLogger(__name__)

#: The Redis Stream that buffers call records until a drainer writes them
#: (:mod:`routing.worker.drainer`).
STREAM = "muse:records"


def record_call(
    job: CompletionJob, decision: Decision, chain: list[Candidate], outcome: ServeOutcome
) -> None:
    """Record one finished call and publish the job's final state; ``job`` gets that state too.

    With ``RECORDS_WRITE_BEHIND`` (the default outside the test process) the records are buffered
    (written to the database by the drainer); if Redis refuses the buffer they are written here
    instead, so none is lost. Otherwise they are written here, in one transaction, the final
    state is handed to the waiting request afterwards, and then the listeners of recorded calls
    run (:mod:`routing.pipeline.recorded`; the drainer runs them for buffered records). Raises what the write raised (the database
    refused it).
    """
    observe_outcome(
        experiment=decision.experiment_key,
        variant=decision.variant_key,
        assigned=chain[0].endpoint.public_id if chain else "",
        outcome=outcome,
    )
    final = job_final_state(job, decision, chain, outcome)
    payload = call_payload(job, decision, chain, outcome, final)
    apply_final(job, final)
    if settings.RECORDS_WRITE_BEHIND:
        try:
            buffer_call(payload)
            return
        except Exception:
            log.exception("could not buffer the records of job %s in Redis; writing them now", job.id)
    records_write([payload])
    publish_final(job_id=str(job.id), state=final)
    calls_recorded([payload])


def buffer_call(payload: Mapping[str, Any]) -> None:
    """Buffer one call's records and publish its job's final state, atomically (``MULTI``)."""
    job = payload["job"]
    final = json.dumps(
        {k: job[k] for k in ("status", "result", "error", "finished_at")}, separators=(",", ":")
    )
    pipe = redis_client().pipeline(transaction=True)
    pipe.xadd(STREAM, {"p": json.dumps(payload, separators=(",", ":")), "t": repr(time.time())})
    queue_final(pipe, job["id"], final)
    queue_done(pipe, job["id"])
    pipe.execute()
