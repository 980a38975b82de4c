"""Routing step 3, serve: try the candidate chain with retries and fallback.

Per candidate, up to ``1 + ROUTING_MAX_RETRIES`` guarded attempts (:mod:`routing.attempts`) with
exponential backoff and full jitter (or the upstream's ``retry-after``, capped;
:mod:`routing.retry`) for retryable failures; then the next candidate. :func:`serve` is the
non-streamed call; :func:`serve_stream` the streamed one, which never restarts a stream that has
already sent content. Fallback reasons are listed in :mod:`routing.router`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from .attempts import EndpointRefused, attempt, attempt_stream
from .cooling import cool
from .credentials import MissingCredential
from .models import RoutingReason
from .planning import Candidate
from .providers.errors import AuthFailed, ClientRequestError, ProviderError
from .providers.types import CompletionRequest, CompletionResult
from .retry import RetryPolicy
from .selectors import EndpointInfo


@dataclass
class AttemptLog:
    """One attempt as recorded in an :class:`~routing.models.Attempt` row.

    ``outcome``: ``ok``, an error class name (``RateLimited``, ``UpstreamTimeout`` …), or a refusal
    that made no upstream call (``killed``, ``disabled``, ``circuit_open``,
    ``concurrency_limited``, ``missing_credential``). ``latency_ms``: wall time of the attempt;
    ``backoff_ms``: the wait before it; ``retry_after_s``: what the upstream asked for.
    """

    endpoint: str
    outcome: str
    latency_ms: float
    status_code: int | None = None
    upstream_request_id: str = ""
    backoff_ms: float = 0.0
    retry_after_s: float | None = None


@dataclass
class ServeOutcome:
    result: CompletionResult | None
    served: EndpointInfo | None
    reason: str
    attempts: list[AttemptLog] = field(default_factory=list)
    error_kind: str = ""
    error_message: str = ""


def retry_policy() -> RetryPolicy:
    """The retry policy from settings (``ROUTING_MAX_RETRIES``, ``ROUTING_BACKOFF_BASE_MS``,
    ``ROUTING_BACKOFF_CAP_MS``, ``ROUTING_RETRY_AFTER_CAP_S``)."""
    return RetryPolicy(
        max_retries=settings.ROUTING_MAX_RETRIES,
        base_ms=settings.ROUTING_BACKOFF_BASE_MS,
        cap_ms=settings.ROUTING_BACKOFF_CAP_MS,
        retry_after_cap_s=settings.ROUTING_RETRY_AFTER_CAP_S,
    )


def serve(
    request: CompletionRequest,
    chain: list[Candidate],
    assigned_reason: str,
    *,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    session_id: str = "",
) -> ServeOutcome:
    """Try the chain in order, each candidate up to ``policy.max_attempts`` times.

    ``request`` is the base request (no variant overrides). ``policy`` defaults to
    :func:`retry_policy`; ``sleep`` (seconds) is the backoff wait. Returns the first success, or the
    failure (``error_kind``/``error_message`` of the last error; messages never hold credentials).
    See the module docstring for fallback triggers and reasons.
    """
    policy = policy or retry_policy()
    outcome = ServeOutcome(result=None, served=None, reason=assigned_reason)
    fell_back_because = ""
    refused: EndpointRefused | None = None
    for candidate in chain:
        info = candidate.endpoint
        call_request = candidate.request_for(request)
        backoff_ms = 0.0
        for number in range(policy.max_attempts):
            started = time.perf_counter()
            try:
                result = attempt(candidate, call_request, session_id=session_id)
            except EndpointRefused as exc:
                outcome.attempts.append(AttemptLog(info.public_id, exc.outcome, 0.0, backoff_ms=backoff_ms))
                fell_back_because = fell_back_because or exc.reason
                refused = exc
                break
            except MissingCredential as exc:
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id, "missing_credential", elapsed_ms(started), backoff_ms=backoff_ms
                    )
                )
                outcome.error_kind, outcome.error_message = "missing_credential", str(exc)
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            except ProviderError as exc:
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id,
                        type(exc).__name__,
                        elapsed_ms(started),
                        exc.status_code,
                        exc.upstream_request_id or "",
                        backoff_ms=backoff_ms,
                        retry_after_s=exc.retry_after_s,
                    )
                )
                outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
                if isinstance(exc, ClientRequestError) and not isinstance(exc, AuthFailed):
                    return outcome  # the request itself is wrong: it would fail the same way elsewhere
                if exc.retryable and policy.outlasts(exc.retry_after_s):
                    cool(info.public_id, exc.retry_after_s)
                    fell_back_because = fell_back_because or RoutingReason.COOLING
                    break
                if exc.retryable and number + 1 < policy.max_attempts:
                    delay_s = policy.delay_s(number, exc.retry_after_s)
                    sleep(delay_s)
                    backoff_ms = delay_s * 1000.0
                    continue
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            outcome.attempts.append(
                AttemptLog(
                    info.public_id,
                    "ok",
                    elapsed_ms(started),
                    200,
                    result.upstream_request_id or "",
                    backoff_ms=backoff_ms,
                )
            )
            outcome.result, outcome.served = result, info
            if candidate.role != "assigned" and fell_back_because:
                outcome.reason = fell_back_because
            return outcome
    return _unserved(outcome, refused)


def _unserved(outcome: ServeOutcome, refused: EndpointRefused | None) -> ServeOutcome:
    """No candidate served. When the last candidate was refused by a kill switch (or disabled)
    and no upstream error is left to report, the call failed ``model_unavailable`` with a message
    naming the kill, and its reason is the kill's (a pinned model under a kill lands here)."""
    if refused is not None and refused.outcome in ("killed", "disabled") and not outcome.error_kind:
        outcome.error_kind, outcome.error_message = "model_unavailable", refused.unavailable_message()
        outcome.reason = refused.reason
    return outcome


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - started) * 1000.0


def serve_stream(
    request: CompletionRequest, chain: list[Candidate], assigned_reason: str, *, session_id: str = ""
) -> Iterator[dict[str, Any]]:
    """Stream from the chain with :func:`serve`'s rules; yields public delta events and returns
    (``StopIteration.value``) a :class:`ServeOutcome` for :func:`routing.recording.record_call`.

    ``request`` is the base request (no variant overrides).

    Each candidate gets up to ``retry_policy().max_attempts`` guarded attempts
    (:func:`routing.attempts.attempt_stream`: kill switch, circuit breaker, concurrency, credential) while
    no content has been sent: retryable failures back off and retry, then fall back to the next
    candidate; a request the upstream rejected (4xx other than auth) ends the call. Once a delta
    has been yielded, a failure ends the call (``error`` event): a half-sent answer is never
    restarted elsewhere.
    """
    policy = retry_policy()
    outcome = ServeOutcome(result=None, served=None, reason=assigned_reason)
    fell_back_because = ""
    refused: EndpointRefused | None = None
    sent = False
    for candidate in chain:
        info = candidate.endpoint
        call_request = candidate.request_for(request)
        backoff_ms = 0.0
        for number in range(policy.max_attempts):
            started = time.perf_counter()
            try:
                for event in attempt_stream(candidate, call_request, session_id=session_id):
                    if event.kind in ("text_delta", "tool_call_delta"):
                        if not sent:  # the answer's first delta: name the model that serves it
                            yield {"type": "served", "model": info.public_id}
                        sent = True
                        yield event.to_public_dict()
                    elif event.kind == "done":
                        outcome.result = event.result
                    elif event.kind == "error":  # after content: end here
                        exc = event.error
                        outcome.attempts.append(
                            AttemptLog(
                                info.public_id,
                                type(exc).__name__,
                                elapsed_ms(started),
                                getattr(exc, "status_code", None),
                                backoff_ms=backoff_ms,
                            )
                        )
                        outcome.error_kind = type(exc).__name__
                        outcome.error_message = f"stream failed after content: {exc}"
                        return outcome
            except EndpointRefused as exc:
                outcome.attempts.append(AttemptLog(info.public_id, exc.outcome, 0.0, backoff_ms=backoff_ms))
                fell_back_because = fell_back_because or exc.reason
                refused = exc
                break
            except MissingCredential as exc:
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id, "missing_credential", elapsed_ms(started), backoff_ms=backoff_ms
                    )
                )
                outcome.error_kind, outcome.error_message = "missing_credential", str(exc)
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            except ProviderError as exc:
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id,
                        type(exc).__name__,
                        elapsed_ms(started),
                        exc.status_code,
                        exc.upstream_request_id or "",
                        backoff_ms=backoff_ms,
                        retry_after_s=exc.retry_after_s,
                    )
                )
                outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
                if sent or (isinstance(exc, ClientRequestError) and not isinstance(exc, AuthFailed)):
                    return outcome
                if exc.retryable and policy.outlasts(exc.retry_after_s):
                    cool(info.public_id, exc.retry_after_s)
                    fell_back_because = fell_back_because or RoutingReason.COOLING
                    break
                if exc.retryable and number + 1 < policy.max_attempts:
                    delay_s = policy.delay_s(number, exc.retry_after_s)
                    time.sleep(delay_s)
                    backoff_ms = delay_s * 1000.0
                    continue
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            if outcome.result is None:  # the provider stream ended without a result
                outcome.attempts.append(AttemptLog(info.public_id, "BadResponse", elapsed_ms(started)))
                outcome.error_kind, outcome.error_message = "BadResponse", "stream ended without a result"
                return outcome
            outcome.attempts.append(
                AttemptLog(
                    info.public_id,
                    "ok",
                    elapsed_ms(started),
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
    return _unserved(outcome, refused)
