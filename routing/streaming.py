"""Streamed completions: the worker publishes deltas to a Redis stream, the web process relays them.

Flow with Redis (``REDIS_URL`` set; production):

1. the web process creates the job (``stream=True``) and enqueues the task as for any job;
2. the worker runs :func:`stream_job_events` and appends every event to the job's Redis Stream
   ``muse:job:<id>:events`` (``XADD``; the key expires ``COMPLETION_STREAM_TTL_S`` after the
   first event) through :class:`routing.events.RedisEventLog`;
3. the web process reads the stream from the beginning (``XREAD BLOCK`` from id ``0``), so a
   subscriber that arrives late misses nothing, and relays each event as it arrives
   (:func:`routing.events.relay_events`). Nothing holds the whole answer: each event is written to the socket
   as soon as the worker has it.

Without Redis (the embedded laptop default there is no cross-process channel for deltas), the
web process runs :func:`stream_job_events` itself, in the request's thread (documented in the
README): same routing, recording and events; the worker is not involved.

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

Each upstream call is one guarded attempt (:func:`routing.attempts.attempt_stream`: kill switch,
circuit breaker, concurrency limit, credential, session reasoning kept server-side), with the
router's retry policy and fallback chain (:func:`routing.serving.serve_stream`) — but only before the first delta; once content has been
sent, a failure ends the stream with ``error`` (a half-sent answer is never restarted elsewhere).

Encrypted reasoning never appears in an event: provider stream events carry none, and ``done``
carries the stored public result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone

from .events import CancelWatch, RedisEventLog, job_cancel_request, relay_events, terminal_event, uses_redis
from .handoff import publish_final
from .models import FINISHED_STATUSES, JOB_LOST, CompletionJob, JobStatus
from .planning import build_request, job_plan, state_session
from .recording import record_call
from .services import completion_job_claim, completion_job_fail
from .serving import ServeOutcome, serve_stream

log = logging.getLogger(__name__)


def stream_job_events(*, job_id: str) -> Iterator[dict[str, Any]]:
    """Claim and run one job, yielding its events (deltas, then ``done``/``error``).

    Safe to call twice: a job another worker holds yields nothing; a finished job yields only its
    terminal event. If the caller goes away — the consumer closes this generator (web process
    without Redis) or the relay sets the job's cancel flag (:func:`routing.events.job_cancel_request`,
    checked between upstream chunks) — the upstream stream is closed at once, freeing its
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
    waiting request at once (:func:`routing.handoff.publish_final`), so the caller gets a failure
    now rather than a timeout. It happens only when a PostgreSQL crash forgot the row of a job
    created without the WAL flush (:func:`routing.services.relax_commit_durability`)."""
    log.error("completion job %s does not exist; its task is dropped", job_id)
    state = {"status": JobStatus.FAILED, "result": None, "error": JOB_LOST, "finished_at": timezone.now()}
    if uses_redis():
        publish_final(job_id=job_id, state=state)
    return {"type": "error", "id": job_id, "status": JobStatus.FAILED, "error": JOB_LOST}


def run_pinned_job(*, job_id: str) -> str:
    """Run a non-streamed job through the streamed path, events discarded. Returns its status.

    Used for drop-in jobs (a pinned ``model``, or ``request["cancellable"]``) without Redis: the
    upstream call is streamed, so a caller that gives up (:func:`routing.dispatch.wait_for_job`,
    which then flags the job's row) closes it between chunks and the tokens it had cost are
    recorded. With Redis these jobs call upstream non-streamed (:func:`routing.router.execute_job`)
    and a cancel cuts the call off (:data:`routing.events.cancel_watcher`). The status is the
    terminal event's (with write-behind records the job row is not final yet: reading it back cost
    a query for nothing).
    """
    status = "missing"
    for event in stream_job_events(job_id=job_id):
        status = event.get("status", status)
    return status


def publish_job_events(*, job_id: str) -> str:
    """Worker side: run a streamed job and publish every event. Returns the job's final status."""
    events = RedisEventLog(job_id)
    status = "missing"
    for event in stream_job_events(job_id=job_id):
        events.publish(event)
        status = event.get("status", status)
    return status


#: What a second streamed request for a job still streaming to another request is told (409).
STREAM_IN_PROGRESS = (
    "A request with this idempotency key is still streaming its answer; retry once it has "
    "finished to read the same answer."
)


def stream_taken(job: CompletionJob, *, created: bool) -> bool:
    """Whether a streamed request for ``job`` cannot be served because another request is
    streaming it: without Redis the events exist only in the first request (no stream to relay),
    so a concurrent retry with the same idempotency key is answered 409 before its stream starts
    (as Stripe answers concurrent idempotent requests), not 200 and then an error event. With
    Redis every request relays the job's stream; a finished job is replayed."""
    return not created and not uses_redis() and job.status not in FINISHED_STATUSES


def job_events(
    *, job_id: str, created: bool, start_timeout_s: float | None = None
) -> Iterator[dict[str, Any]]:
    """The events a web request streams for a job, whichever transport is in use.

    With Redis: relayed from the job's stream (the worker produces them). Without Redis: produced
    here by :func:`stream_job_events` (``created`` jobs only; a job another request already runs
    yields its terminal event once it has one, else an error).
    """
    if uses_redis():
        try:
            yield from relay_events(job_id=job_id, start_timeout_s=start_timeout_s)
        except GeneratorExit:  # the caller went away: tell the worker to close the upstream call
            job_cancel_request(job_id=job_id)
            raise
        return
    if created:
        yield from stream_job_events(job_id=job_id)
        return
    job = CompletionJob.objects.filter(pk=job_id).first()
    if job is not None and job.status in FINISHED_STATUSES:
        yield terminal_event(job)
    else:
        yield {
            "type": "error",
            "id": job_id,
            "status": job.status if job else "failed",
            "error": "this job is being streamed to another request",
        }


def sse(event: str | None, data: Any) -> bytes:
    """One Server-Sent Events frame: optional ``event:`` line, one ``data:`` line of JSON."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), default=str)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


KEEPALIVE_FRAME = b": keep-alive\n\n"


def sse_response(frames: Iterator[bytes]) -> StreamingHttpResponse:
    """A ``text/event-stream`` response that proxies must not buffer."""
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
