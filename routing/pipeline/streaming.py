"""Streamed completions: the worker publishes deltas to a Redis stream, the web process relays them.

Flow:

1. the web process creates the job (``stream=True``) and enqueues the task as for any job;
2. the worker runs :func:`stream_job_events` and appends every event to the job's Redis Stream
   ``muse:job:<id>:events`` (``XADD``; the key expires ``COMPLETION_STREAM_TTL_S`` after the
   first event) through :class:`routing.state.events.RedisEventLog`;
3. the web process reads the stream from the beginning (``XREAD BLOCK`` from id ``0``), so a
   subscriber that arrives late misses nothing, and relays each event as it arrives
   (:func:`routing.web.relay.relay_events`). Nothing holds the whole answer: each event is written to the socket
   as soon as the worker has it.

Events (dicts; the SSE ``event`` name is ``type``):

* ``{"type": "job", "id", "status"}`` — first, once the job exists (added by the API view);
* ``{"type": "served", "model"}`` — the endpoint that serves the answer, right before its first
  delta (drop-ins report it as ``model`` in every chunk, as their non-streamed replies do);
* ``{"type": "text_delta", "text"}``;
* ``{"type": "tool_call_delta", "index", "id", "name", "arguments_delta"}`` — parallel tool calls
  arrive as separate ``index`` values; ``id``/``name`` come on a call's first fragment;
* ``{"type": "done", "id", "status": "succeeded", "result"}`` — last; ``result`` is the job's
  public result (text, tool calls, served model, experiment, variant, usage, cost, reason);
* ``{"type": "error", "id", "status": "failed", "error"}`` — last, when the call failed.

Each upstream call is one guarded attempt (:func:`routing.pipeline.attempts.attempt_stream`: kill switch,
circuit breaker, concurrency limit, credential, session reasoning kept server-side), with the
router's retry policy and fallback chain (:func:`routing.pipeline.serving.serve_stream`) — but only before the first delta; once content has been
sent, a failure ends the stream with ``error`` (a half-sent answer is never restarted elsewhere).

Encrypted reasoning never appears in an event: provider stream events carry none, and ``done``
carries the stored public result.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.utils import timezone

from routing.jobs import completion_job_claim, completion_job_fail
from routing.models import FINISHED_STATUSES, JOB_LOST, CompletionJob, JobStatus
from routing.pipeline.cancel import CancelWatch
from routing.pipeline.planning import build_request, job_plan, state_session
from routing.pipeline.recording import record_call
from routing.pipeline.serving import ServeOutcome, serve_stream
from routing.state.events import RedisEventLog, terminal_event
from routing.state.handoff import publish_final

log = logging.getLogger(__name__)


def stream_job_events(*, job_id: str) -> Iterator[dict[str, Any]]:
    """Claim and run one job, yielding its events (deltas, then ``done``/``error``).

    Safe to call twice: a job another worker holds yields nothing; a finished job yields only its
    terminal event. If the caller goes away — the relay sets the job's cancel flag
    (:func:`routing.web.relay.job_cancel_request`, checked between upstream chunks), or the consumer
    closes this generator — the upstream stream is closed at once, freeing its
    concurrency slot, and the call is recorded ``cancelled`` / ``client_disconnected`` with the
    tokens received so far, costed.
    """
    job = completion_job_claim(job_id=job_id)
    if job is None:
        existing = CompletionJob.objects.filter(pk=job_id).first()
        if existing is None:  # the row is gone (a database crash forgot a relaxed commit): say so
            yield job_lost(job_id)
        elif existing.status in FINISHED_STATUSES:
            yield terminal_event(existing)
        return
    decision = chain = outcome = None
    try:
        decision, chain, reason = job_plan(job)
        outcome = ServeOutcome(result=None, served=None, reason=reason)
        yield from serve_stream(
            build_request(job, {}),
            chain,
            reason,
            session=state_session(job),
            outcome=outcome,
            cancelled=CancelWatch(job_id),
            job_id=job_id,
        )
        record_call(job, decision, chain, outcome)
    except GeneratorExit:
        if outcome is not None:  # serve_stream closed the upstream and logged the attempt
            outcome.cancelled, outcome.error_kind = True, "client_disconnected"
            record_call(job, decision, chain, outcome)
        else:
            completion_job_fail(job_id=job_id, reason="client_disconnected: the stream was closed early")
        raise
    except Exception as exc:
        log.exception("streamed job %s failed", job_id)
        completion_job_fail(job_id=job_id, reason=f"worker error: {type(exc).__name__}")
        job.refresh_from_db()
    yield terminal_event(job)


def job_lost(job_id: str) -> dict[str, Any]:
    """The ``error`` event of a task whose job row does not exist, its final state handed to any
    waiting request at once (:func:`routing.state.handoff.publish_final`), so the caller gets a failure
    now rather than a timeout. It happens only when a PostgreSQL crash forgot the row of a job
    created without the WAL flush (:func:`muse_experiments.infra.commit.relax_commit_durability`)."""
    log.error("completion job %s does not exist; its task is dropped", job_id)
    state = {"status": JobStatus.FAILED, "result": None, "error": JOB_LOST, "finished_at": timezone.now()}
    publish_final(job_id=job_id, state=state)
    return {"type": "error", "id": job_id, "status": JobStatus.FAILED, "error": JOB_LOST}


def publish_job_events(*, job_id: str) -> str:
    """Worker side: run a streamed job and publish every event. Returns the job's final status."""
    events = RedisEventLog(job_id)
    status = "missing"
    for event in stream_job_events(job_id=job_id):
        events.publish(event)
        status = event.get("status", status)
    return status
