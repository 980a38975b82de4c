"""Streamed completions: the worker publishes deltas to a Redis stream, the web process relays them.

Flow with Redis (``REDIS_URL`` set; production):

1. the web process creates the job (``stream=True``) and enqueues the task as for any job;
2. the worker runs :func:`stream_job_events` and appends every event to the job's Redis Stream
   ``muse:job:<id>:events`` (``XADD``; the key expires ``COMPLETION_STREAM_TTL_S`` after the
   first event) through :class:`RedisEventLog`;
3. the web process reads the stream from the beginning (``XREAD BLOCK`` from id ``0``), so a
   subscriber that arrives late misses nothing, and relays each event as it arrives
   (:func:`relay_events`). Nothing holds the whole answer: each event is written to the socket
   as soon as the worker has it.

Without Redis (the embedded laptop default there is no cross-process channel for deltas), the
web process runs :func:`stream_job_events` itself, in the request's thread (documented in the
README): same routing, recording and events; the worker is not involved.

Events (dicts; the SSE ``event`` name is ``type``):

* ``{"type": "job", "id", "status"}`` — first, once the job exists (added by the API view);
* ``{"type": "text_delta", "text"}``;
* ``{"type": "tool_call_delta", "index", "id", "name", "arguments_delta"}`` — parallel tool calls
  arrive as separate ``index`` values; ``id``/``name`` come on a call's first fragment;
* ``{"type": "done", "id", "status": "succeeded", "result"}`` — last; ``result`` is the job's
  public result (text, tool calls, served model, experiment, variant, usage, cost, reason);
* ``{"type": "error", "id", "status": "failed", "error"}`` — last, when the call failed.

Each upstream call is one guarded attempt of the router (``router.attempt_stream``: kill switch,
circuit breaker, concurrency limit, credential, session reasoning kept server-side), with the
router's retry policy and fallback chain — but only before the first delta; once content has been
sent, a failure ends the stream with ``error`` (a half-sent answer is never restarted elsewhere).

Encrypted reasoning never appears in an event: provider stream events carry none, and ``done``
carries the stored public result.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse

from muse_experiments.assignment.engine import Decision

from . import router
from .credentials import MissingCredential
from .models import CompletionJob, JobStatus, RoutingReason
from .providers.errors import AuthFailed, ClientRequestError, ProviderError
from .selectors import catalogue
from .services import completion_job_claim, completion_job_fail

log = logging.getLogger(__name__)

TERMINAL = frozenset({"done", "error"})
#: Aliases a drop-in client may send as ``model``: the experiments decide the endpoint.
ROUTING_ALIASES = frozenset({"muse-default"})


def stream_key(job_id: str) -> str:
    return f"muse:job:{job_id}:events"


# --------------------------------------------------------------------------------------------
# Producing events (worker, or the web process without Redis)
# --------------------------------------------------------------------------------------------


def _pinned_plan(job: CompletionJob) -> tuple[Decision, list[router.Candidate]] | None:
    """The decision and one-candidate chain for a job whose caller pinned an endpoint."""
    public_id = job.request.get("model")
    if not public_id:
        return None
    info = catalogue().get(public_id)
    decision = Decision(
        experiment_key=None,
        experiment_id=None,
        phase=None,
        variant_key=None,
        variant_index=None,
        endpoint_id=public_id,
        overrides={},
        in_experiment=False,
        reason=RoutingReason.FORCED,
        trace=("pinned_by_caller",),
    )
    return decision, ([router.Candidate(info, "assigned")] if info else [])


def job_plan(job: CompletionJob) -> tuple[Decision, list[router.Candidate], str]:
    """``(decision, candidate chain, reason when the first candidate serves)`` for a job.

    A pinned job (``request["model"]`` is an endpoint id) is served by that endpoint only, with
    reason ``forced`` and no experiment; otherwise the experiments decide (``router.decide``).
    """
    pinned = _pinned_plan(job)
    if pinned is not None:
        return pinned[0], pinned[1], RoutingReason.FORCED
    decision = router.decide(job)
    return decision, router.candidate_chain(decision, catalogue()), router._reason_for(decision)


def _serve_stream(
    job: CompletionJob, decision: Decision, chain: list[router.Candidate], reason: str
) -> Iterator[dict[str, Any]]:
    """Stream from the chain with the router's rules; yields public delta events and returns
    (``StopIteration.value``) a :class:`router.ServeOutcome` for :func:`router._record`.

    Each candidate gets up to ``retry_policy().max_attempts`` guarded attempts
    (:func:`router.attempt_stream`: kill switch, circuit breaker, concurrency, credential) while
    no content has been sent: retryable failures back off and retry, then fall back to the next
    candidate; a request the upstream rejected (4xx other than auth) ends the call. Once a delta
    has been yielded, a failure ends the call (``error`` event): a half-sent answer is never
    restarted elsewhere.
    """
    policy = router.retry_policy()
    base = router.build_request(job, {})
    outcome = router.ServeOutcome(result=None, served=None, reason=reason)
    fell_back_because = ""
    sent = False
    for candidate in chain:
        info = candidate.endpoint
        request = candidate.request_for(base)
        backoff_ms = 0.0
        for number in range(policy.max_attempts):
            started = time.perf_counter()
            try:
                for event in router.attempt_stream(candidate, request, session_id=job.session_id):
                    if event.kind in ("text_delta", "tool_call_delta"):
                        sent = True
                        yield event.to_public_dict()
                    elif event.kind == "done":
                        outcome.result = event.result
                    elif event.kind == "error":  # after content: end here
                        exc = event.error
                        outcome.attempts.append(
                            router.AttemptLog(
                                info.public_id,
                                type(exc).__name__,
                                router._ms(started),
                                getattr(exc, "status_code", None),
                                backoff_ms=backoff_ms,
                            )
                        )
                        outcome.error_kind = type(exc).__name__
                        outcome.error_message = f"stream failed after content: {exc}"
                        return outcome
            except router.EndpointRefused as exc:
                outcome.attempts.append(
                    router.AttemptLog(info.public_id, exc.outcome, 0.0, backoff_ms=backoff_ms)
                )
                fell_back_because = fell_back_because or exc.reason
                break
            except MissingCredential as exc:
                outcome.attempts.append(
                    router.AttemptLog(
                        info.public_id, "missing_credential", router._ms(started), backoff_ms=backoff_ms
                    )
                )
                outcome.error_kind, outcome.error_message = "missing_credential", str(exc)
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            except ProviderError as exc:
                outcome.attempts.append(
                    router.AttemptLog(
                        info.public_id,
                        type(exc).__name__,
                        router._ms(started),
                        exc.status_code,
                        exc.upstream_request_id or "",
                        backoff_ms=backoff_ms,
                        retry_after_s=exc.retry_after_s,
                    )
                )
                outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
                if sent or (isinstance(exc, ClientRequestError) and not isinstance(exc, AuthFailed)):
                    return outcome
                if exc.retryable and number + 1 < policy.max_attempts:
                    delay_s = policy.delay_s(number, exc.retry_after_s)
                    time.sleep(delay_s)
                    backoff_ms = delay_s * 1000.0
                    continue
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            if outcome.result is None:  # the provider stream ended without a result
                outcome.attempts.append(router.AttemptLog(info.public_id, "BadResponse", router._ms(started)))
                outcome.error_kind, outcome.error_message = "BadResponse", "stream ended without a result"
                return outcome
            outcome.attempts.append(
                router.AttemptLog(
                    info.public_id,
                    "ok",
                    router._ms(started),
                    200,
                    outcome.result.upstream_request_id or "",
                    backoff_ms=backoff_ms,
                )
            )
            outcome.served = info
            if candidate.role != "assigned" and fell_back_because:
                outcome.reason = fell_back_because
            return outcome
    if not chain:
        outcome.error_kind, outcome.error_message = (
            "no_endpoint",
            "the requested model is not in the catalogue",
        )
    return outcome


def terminal_event(job: CompletionJob) -> dict[str, Any]:
    """The last event for a finished job: ``done`` with its public result, or ``error``."""
    if job.status == JobStatus.SUCCEEDED:
        return {"type": "done", "id": str(job.id), "status": job.status, "result": job.result}
    return {"type": "error", "id": str(job.id), "status": job.status, "error": job.error or "failed"}


def stream_job_events(*, job_id: str) -> Iterator[dict[str, Any]]:
    """Claim and run one job, yielding its events (deltas, then ``done``/``error``).

    Safe to call twice: a job another worker holds yields nothing; a finished job yields only its
    terminal event. If the consumer stops early (client gone in the web fallback), the job is
    failed ``client_disconnected`` and the upstream stream is closed.
    """
    job = completion_job_claim(job_id=job_id)
    if job is None:
        existing = CompletionJob.objects.filter(pk=job_id).first()
        if existing is not None and existing.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            yield terminal_event(existing)
        return
    try:
        decision, chain, reason = job_plan(job)
        outcome = yield from _serve_stream(job, decision, chain, reason)
        router._record(job, decision, chain, outcome)
    except GeneratorExit:
        completion_job_fail(job_id=job_id, reason="client_disconnected: the stream was closed early")
        raise
    except Exception as exc:
        log.exception("streamed job %s failed", job_id)
        completion_job_fail(job_id=job_id, reason=f"worker error: {type(exc).__name__}")
        job.refresh_from_db()
    yield terminal_event(job)


def run_pinned_job(*, job_id: str) -> str:
    """Run a non-streamed job whose caller pinned the endpoint (drop-in ``model``). Returns its status."""
    for _ in stream_job_events(job_id=job_id):
        pass
    return CompletionJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"


# --------------------------------------------------------------------------------------------
# Redis transport
# --------------------------------------------------------------------------------------------

_redis_lock = threading.Lock()
_redis_clients: dict[str, Any] = {}


def redis_client():
    """A process-wide Redis client for ``settings.REDIS_URL`` (connection pool shared by threads)."""
    import redis

    url = settings.REDIS_URL
    with _redis_lock:
        if url not in _redis_clients:
            _redis_clients[url] = redis.Redis.from_url(url, health_check_interval=30)
        return _redis_clients[url]


def uses_redis() -> bool:
    """True when deltas travel worker → Redis → web; False for the in-process fallback."""
    return bool(settings.REDIS_URL)


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


def publish_job_events(*, job_id: str) -> str:
    """Worker side: run a streamed job and publish every event. Returns the job's final status."""
    events = RedisEventLog(job_id)
    for event in stream_job_events(job_id=job_id):
        events.publish(event)
    return CompletionJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"


def publish_failure(*, job_id: str, message: str) -> None:
    """Tell a streamed job's listeners it failed (failure hook, reaper). No-op without Redis."""
    if not uses_redis():
        return
    try:
        RedisEventLog(job_id).publish({"type": "error", "id": job_id, "status": "failed", "error": message})
    except Exception:  # the job row already says failed; listeners also re-check it while idle
        log.exception("could not publish the failure of job %s", job_id)


def relay_events(
    *,
    job_id: str,
    keepalive_s: float = 15.0,
    recheck_s: float = 5.0,
    block_ms: int = 1000,
    start_timeout_s: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Web side: yield a job's events from its Redis Stream, from the first, until the terminal one.

    While the stream is idle it yields ``{"type": "keepalive"}`` every ``keepalive_s`` seconds
    (formatters turn it into an SSE comment) and re-reads the job row every ``recheck_s`` seconds as
    a safety net, ending with the job's terminal event if it finished without one reaching the
    stream. If no worker has started the job after ``start_timeout_s`` (default
    ``COMPLETION_SYNC_WAIT_S``) the relay ends with an ``error`` event of status ``queued`` naming
    the job URL (the job still runs later; its result is at ``GET /api/v1/completions/{id}``).
    Events arrive by blocking ``XREAD``; nothing is polled while they flow.
    """
    client = redis_client()
    key = stream_key(job_id)
    last_id = "0"
    start_timeout_s = settings.COMPLETION_SYNC_WAIT_S if start_timeout_s is None else start_timeout_s
    recheck_s = min(recheck_s, max(start_timeout_s, 0.5))
    started = idle_since = last_check = last_keepalive = time.monotonic()
    seen_any = False
    while True:
        response = client.xread({key: last_id}, block=block_ms, count=256)
        now = time.monotonic()
        if response:
            idle_since = now
            seen_any = True
            for entry_id, fields in response[0][1]:
                last_id = entry_id
                event = json.loads(fields[b"e"])
                yield event
                if event.get("type") in TERMINAL:
                    return
            continue
        if now - last_keepalive >= keepalive_s:
            last_keepalive = now
            yield {"type": "keepalive"}
        if now - last_check >= recheck_s and now - idle_since >= recheck_s:
            last_check = now
            job = CompletionJob.objects.filter(pk=job_id).first()
            if job is not None and job.status == JobStatus.QUEUED and not seen_any:
                if now - started >= start_timeout_s:
                    yield {
                        "type": "error",
                        "id": job_id,
                        "status": job.status,
                        "error": f"no worker started the job within {start_timeout_s:g}s; "
                        f"its result will be at /api/v1/completions/{job_id}",
                    }
                    return
                continue
            if job is None or job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                # the terminal event may have landed between our read and this check: read once more
                tail = client.xread({key: last_id}, count=256)
                for entry_id, fields in tail[0][1] if tail else ():
                    last_id = entry_id
                    event = json.loads(fields[b"e"])
                    yield event
                    if event.get("type") in TERMINAL:
                        return
                yield (
                    terminal_event(job)
                    if job
                    else {"type": "error", "id": job_id, "status": "failed", "error": "job vanished"}
                )
                return


def job_events(
    *, job_id: str, created: bool, start_timeout_s: float | None = None
) -> Iterator[dict[str, Any]]:
    """The events a web request streams for a job, whichever transport is in use.

    With Redis: relayed from the job's stream (the worker produces them). Without Redis: produced
    here by :func:`stream_job_events` (``created`` jobs only; a job another request already runs
    yields its terminal event once it has one, else an error).
    """
    if uses_redis():
        yield from relay_events(job_id=job_id, start_timeout_s=start_timeout_s)
        return
    if created:
        yield from stream_job_events(job_id=job_id)
        return
    job = CompletionJob.objects.filter(pk=job_id).first()
    if job is not None and job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
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
