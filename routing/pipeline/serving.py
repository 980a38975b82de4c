"""Routing step 3, serve: try the candidate chain with retries and fallback.

Per candidate, up to ``1 + ROUTING_MAX_RETRIES`` guarded attempts (:mod:`routing.pipeline.attempts`) with
exponential backoff and full jitter (or the upstream's ``retry-after``, capped;
:mod:`routing.pipeline.retry`) for retryable failures; then the next candidate. :func:`serve` is the
non-streamed call; :func:`serve_stream` the streamed one, which never restarts a stream that has
already sent content. Fallback reasons are listed in :mod:`routing.pipeline.router`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings

from routing.guards.cooling import cool
from routing.guards.credentials import CredentialUnavailable
from routing.models import RoutingReason
from routing.pipeline.attempts import (
    AttemptCancelled,
    AttemptKilled,
    EndpointRefused,
    attempt,
    attempt_stream,
    kill_for,
    usage_cost_usd,
)
from routing.pipeline.planning import Candidate
from routing.pipeline.retry import RetryPolicy
from routing.providers.errors import AuthFailed, ClientRequestError, ProviderError
from routing.providers.types import CompletionRequest, CompletionResult, Usage, add_usage
from routing.reasoning_store import OwnedSession
from routing.selectors import EndpointInfo


@dataclass
class AttemptLog:
    """One attempt as recorded in an :class:`~routing.models.Attempt` row.

    ``outcome``: ``ok``, an error class name (``RateLimited``, ``UpstreamTimeout`` …), or a refusal
    that made no upstream call (``killed``, ``disabled``, ``circuit_open``,
    ``concurrency_limited``, ``missing_credential``, ``credential_not_allowed``), or
    ``client_disconnected`` (the caller went away and the attempt was closed). ``latency_ms``: wall time of the attempt; ``backoff_ms``: the
    wait before it; ``retry_after_s``: what the upstream asked for. ``usage`` / ``cost_usd``: what
    the provider billed for this attempt (tokens; USD) — a failed, incomplete or abandoned attempt
    costs what it had consumed; the call's cost is the sum over its attempts. ``cost_unknown``:
    the attempt died with its worker (outcome ``lost``, :mod:`routing.worker.reaper`): it may have been
    billed, for what no one knows; its ``cost_usd`` is 0.
    """

    endpoint: str
    outcome: str
    latency_ms: float
    status_code: int | None = None
    upstream_request_id: str = ""
    backoff_ms: float = 0.0
    retry_after_s: float | None = None
    usage: Usage | None = None
    cost_usd: Decimal = Decimal(0)
    cost_unknown: bool = False


def failed_attempt(
    info: EndpointInfo, exc: ProviderError, started: float, backoff_ms: float, *, outcome: str = ""
) -> AttemptLog:
    """The log of an attempt that called upstream and failed, with the tokens it was billed for."""
    return AttemptLog(
        info.public_id,
        outcome or type(exc).__name__,
        elapsed_ms(started),
        exc.status_code,
        exc.upstream_request_id or "",
        backoff_ms=backoff_ms,
        retry_after_s=exc.retry_after_s,
        usage=exc.usage,
        cost_usd=usage_cost_usd(info, exc.usage),
    )


@dataclass
class ServeOutcome:
    result: CompletionResult | None
    served: EndpointInfo | None
    reason: str
    attempts: list[AttemptLog] = field(default_factory=list)
    error_kind: str = ""
    error_message: str = ""
    #: The caller went away before the call finished (the job ends ``cancelled``).
    cancelled: bool = False

    def billed_usage(self) -> Usage:
        """Tokens of every attempt (failed, incomplete, abandoned, before a fallback), summed."""
        total = Usage()
        for a in self.attempts:
            if a.usage is not None:
                total = add_usage(total, a.usage)
        return total

    def billed_cost_usd(self) -> Decimal:
        """What the whole call cost: the sum of its attempts' costs (USD)."""
        return sum((a.cost_usd for a in self.attempts), Decimal(0))


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
    session: OwnedSession | None = None,
    job_id: str = "",
) -> ServeOutcome:
    """Try the chain in order, each candidate up to ``policy.max_attempts`` times.

    ``request`` is the base request (no variant overrides). ``policy`` defaults to
    :func:`retry_policy`; ``sleep`` (seconds) is the backoff wait. Returns the first success, or the
    failure (``error_kind``/``error_message`` of the last error; messages never hold credentials).
    See the module docstring for fallback triggers and reasons. ``session`` (its owner's session,
    :func:`routing.pipeline.planning.state_session`) is where each attempt reads and keeps reasoning.

    With ``job_id`` each attempt is one non-streamed upstream call that the job's cancel flag cuts
    off (:func:`routing.pipeline.attempts.attempt`): the attempt is logged ``client_disconnected`` (with the
    request's estimated input tokens once it had been sent), ``outcome.cancelled`` is set and no
    further attempt is made.
    """
    policy = policy or retry_policy()
    outcome = ServeOutcome(result=None, served=None, reason=assigned_reason)
    chain_state = _ChainState(outcome, policy)
    for candidate in chain:
        info = candidate.endpoint
        call_request = candidate.request_for(request)
        backoff_ms = 0.0
        for number in range(policy.max_attempts):
            started = time.perf_counter()
            try:
                result = attempt(candidate, call_request, session=session, job_id=job_id)
            except (EndpointRefused, CredentialUnavailable, ProviderError, AttemptCancelled) as exc:
                step, delay_s = chain_state.failed(exc, info, started, backoff_ms, number)
                if step == END:
                    return outcome
                if step == NEXT:
                    break
                sleep(delay_s)
                backoff_ms = delay_s * 1000.0
                continue
            outcome.attempts.append(succeeded_attempt(info, result, started, backoff_ms))
            outcome.result, outcome.served = result, info
            chain_state.served_by(candidate)
            return outcome
    return _unserved(outcome, chain_state.refused)


#: What the attempt loop does after a failed attempt (:meth:`_ChainState.failed`).
RETRY, NEXT, END = "retry", "next", "end"


@dataclass
class _ChainState:
    """The bookkeeping :func:`serve` and :func:`serve_stream` share while they walk the chain:
    the outcome being filled in, why routing left the first candidate, the last refusal."""

    outcome: ServeOutcome
    policy: RetryPolicy
    fell_back_because: str = ""
    refused: EndpointRefused | None = None

    def failed(
        self,
        exc: Exception,
        info: EndpointInfo,
        started: float,
        backoff_ms: float,
        number: int,
        *,
        sent: bool = False,
    ) -> tuple[str, float]:
        """Log the failed attempt ``number`` (0-based) on ``info`` and say what comes next:
        ``(RETRY, delay_s)`` — back off ``delay_s`` seconds and try the same candidate again;
        ``(NEXT, 0)`` — fall back to the next candidate; ``(END, 0)`` — the call ends here (the
        request itself was rejected, the caller went away, or content was already ``sent``).

        ``exc``: :class:`EndpointRefused` (nothing called), ``CredentialUnavailable``,
        :class:`AttemptCancelled`, or a ``ProviderError``; the rules are the module docstring's."""
        outcome = self.outcome
        if isinstance(exc, AttemptKilled):  # cut off in flight: log what it ran and may have cost
            outcome.attempts.append(
                AttemptLog(
                    info.public_id,
                    exc.outcome,
                    exc.latency_ms,
                    backoff_ms=backoff_ms,
                    usage=exc.usage,
                    cost_usd=usage_cost_usd(info, exc.usage),
                )
            )
            self.fell_back_because = self.fell_back_because or exc.reason
            self.refused = exc
            return NEXT, 0.0
        if isinstance(exc, EndpointRefused):
            outcome.attempts.append(AttemptLog(info.public_id, exc.outcome, 0.0, backoff_ms=backoff_ms))
            self.fell_back_because = self.fell_back_because or exc.reason
            self.refused = exc
            return NEXT, 0.0
        if isinstance(exc, AttemptCancelled):
            _log_cancelled(outcome, info, started, backoff_ms, exc.usage)
            return END, 0.0
        if isinstance(exc, CredentialUnavailable):  # permanent: nothing sent, not retried here
            outcome.attempts.append(
                AttemptLog(info.public_id, exc.kind, elapsed_ms(started), backoff_ms=backoff_ms)
            )
            outcome.error_kind, outcome.error_message = exc.kind, str(exc)
            self.fell_back_because = self.fell_back_because or RoutingReason.ERROR_FALLBACK
            return NEXT, 0.0
        assert isinstance(exc, ProviderError)
        outcome.attempts.append(failed_attempt(info, exc, started, backoff_ms))
        outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
        if sent or (isinstance(exc, ClientRequestError) and not isinstance(exc, AuthFailed)):
            return END, 0.0  # the request itself is wrong (it would fail the same way elsewhere)
        if exc.retryable and self.policy.outlasts(exc.retry_after_s):
            cool(info.public_id, exc.retry_after_s)
            self.fell_back_because = self.fell_back_because or RoutingReason.COOLING
            return NEXT, 0.0
        if exc.retryable and number + 1 < self.policy.max_attempts:
            return RETRY, self.policy.delay_s(number, exc.retry_after_s)
        self.fell_back_because = self.fell_back_because or RoutingReason.ERROR_FALLBACK
        return NEXT, 0.0

    def served_by(self, candidate: Candidate) -> None:
        """A fallback candidate served: the call's reason is why routing left the first one."""
        if candidate.role != "assigned" and self.fell_back_because:
            self.outcome.reason = self.fell_back_because


def _unserved(outcome: ServeOutcome, refused: EndpointRefused | None) -> ServeOutcome:
    """No candidate served. When the last candidate was refused without being called (a kill
    switch, a disabled model, an open circuit, a cooling endpoint, no concurrency slot) and no
    upstream error is left to report, the call failed ``model_unavailable`` with a message naming
    why (the kill, or e.g. ``circuit_open``), and its reason is the refusal's (a pinned model
    lands here: drop-ins answer 503, not 502). A refusal because the endpoint cannot honour the
    request's output contract fails ``unsupported_contract`` instead (drop-ins answer 400)."""
    if refused is not None and not outcome.error_kind:
        kind = "unsupported_contract" if refused.outcome == "unsupported_contract" else "model_unavailable"
        outcome.error_kind, outcome.error_message = kind, refused.unavailable_message()
        outcome.reason = refused.reason
    return outcome


def succeeded_attempt(
    info: EndpointInfo, result: CompletionResult, started: float, backoff_ms: float
) -> AttemptLog:
    """The log of an attempt that answered, with its usage and cost."""
    return AttemptLog(
        info.public_id,
        "ok",
        elapsed_ms(started),
        200,
        result.upstream_request_id or "",
        backoff_ms=backoff_ms,
        usage=result.usage,
        cost_usd=result.cost_usd,
    )


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - started) * 1000.0


def serve_stream(
    request: CompletionRequest,
    chain: list[Candidate],
    assigned_reason: str,
    *,
    session: OwnedSession | None = None,
    outcome: ServeOutcome | None = None,
    cancelled: Callable[[], bool] | None = None,
    job_id: str = "",
) -> Iterator[dict[str, Any]]:
    """Stream from the chain with :func:`serve`'s rules; yields public delta events and returns
    (``StopIteration.value``) a :class:`ServeOutcome` for :func:`routing.pipeline.recording.record_call`.

    ``request`` is the base request (no variant overrides). ``outcome`` (optional) is the object
    filled in and returned, so a caller whose consumer went away (``GeneratorExit``) still holds
    what happened. ``job_id`` notes each attempt before it calls upstream
    (:func:`routing.pipeline.attempts.attempt_stream`). ``cancelled`` is checked between upstream events: once it says True (the
    caller went away; :class:`routing.pipeline.cancel.CancelWatch`), or when this generator is closed, the
    upstream stream is closed at once (which frees its concurrency slot), the attempt is logged
    ``client_disconnected`` with the tokens it had cost, and ``outcome.cancelled`` is set.

    Each candidate gets up to ``retry_policy().max_attempts`` guarded attempts
    (:func:`routing.pipeline.attempts.attempt_stream`: kill switch, circuit breaker, concurrency, credential) while
    no content has been sent: retryable failures back off and retry, then fall back to the next
    candidate; a request the upstream rejected (4xx other than auth) ends the call. Once a delta
    has been yielded, a failure ends the call (``error`` event): a half-sent answer is never
    restarted elsewhere.
    """
    policy = retry_policy()
    outcome = (
        outcome if outcome is not None else ServeOutcome(result=None, served=None, reason=assigned_reason)
    )
    chain_state = _ChainState(outcome, policy)
    sent = False
    next_kill_check = 0.0
    for candidate in chain:
        info = candidate.endpoint
        call_request = candidate.request_for(request)
        backoff_ms = 0.0
        for number in range(policy.max_attempts):
            started = time.perf_counter()
            stream = None
            try:
                stream = attempt_stream(candidate, call_request, session=session, job_id=job_id)
                for event in stream:
                    if event.kind in ("text_delta", "tool_call_delta"):
                        if not sent:  # the answer's first delta: name the model that serves it
                            yield {"type": "served", "model": info.public_id}
                        sent = True
                        yield event.to_public_dict()
                    elif event.kind == "done":
                        outcome.result = event.result
                    elif event.kind == "error":  # after content: end here
                        outcome.attempts.append(failed_attempt(info, event.error, started, backoff_ms))
                        outcome.error_kind = type(event.error).__name__
                        outcome.error_message = f"stream failed after content: {event.error}"
                        return outcome
                    if cancelled is not None and event.kind != "done" and cancelled():
                        _abandon(stream, outcome, info, started, backoff_ms)
                        return outcome
                    if event.kind != "done" and time.monotonic() >= next_kill_check:
                        next_kill_check = time.monotonic() + KILL_CHECK_S
                        if (kill := kill_for(candidate)) is not None:
                            stream.close()  # a kill switch flipped mid-stream: cut it off now
                            usage = stream.usage_so_far()
                            raise AttemptKilled(info.public_id, kill, usage, elapsed_ms(started))
            except GeneratorExit:
                if stream is not None:
                    _abandon(stream, outcome, info, started, backoff_ms)
                raise
            except (EndpointRefused, CredentialUnavailable, ProviderError) as exc:
                step, delay_s = chain_state.failed(exc, info, started, backoff_ms, number, sent=sent)
                if isinstance(exc, AttemptKilled) and sent:  # the answer had begun: it ends here
                    outcome.error_kind, outcome.error_message = "model_unavailable", exc.unavailable_message()
                    outcome.reason = exc.reason
                    return outcome
                if step == END:
                    return outcome
                if step == NEXT:
                    break
                time.sleep(delay_s)
                backoff_ms = delay_s * 1000.0
                continue
            if outcome.result is None:  # the provider stream ended without a result
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id,
                        "BadResponse",
                        elapsed_ms(started),
                        usage=stream.usage_so_far(),
                        cost_usd=usage_cost_usd(info, stream.usage_so_far()),
                    )
                )
                outcome.error_kind, outcome.error_message = "BadResponse", "stream ended without a result"
                return outcome
            outcome.attempts.append(succeeded_attempt(info, outcome.result, started, backoff_ms))
            outcome.served = info
            chain_state.served_by(candidate)
            return outcome
    if not chain:
        outcome.error_kind, outcome.error_message = (
            "no_endpoint",
            "the requested model is not in the catalogue",
        )
    return _unserved(outcome, chain_state.refused)


#: How often (s) a running stream asks whether a kill switch now covers it (the state itself
#: reaches the process within ``CONFIG_REFRESH_INTERVAL_S``; asking per chunk would be wasted).
KILL_CHECK_S = 0.1


def _abandon(stream, outcome: ServeOutcome, info: EndpointInfo, started: float, backoff_ms: float) -> None:
    """The caller went away mid-stream: close the upstream stream (freeing its slot) and log the
    attempt ``client_disconnected`` with the tokens it had cost."""
    stream.close()
    _log_cancelled(outcome, info, started, backoff_ms, stream.usage_so_far())


def _log_cancelled(
    outcome: ServeOutcome, info: EndpointInfo, started: float, backoff_ms: float, usage: Usage | None
) -> None:
    """Log the attempt the caller's going away closed (``client_disconnected``, with what it cost:
    ``usage`` tokens at the endpoint's prices) and mark the call ``cancelled``."""
    outcome.attempts.append(
        AttemptLog(
            info.public_id,
            "client_disconnected",
            elapsed_ms(started),
            backoff_ms=backoff_ms,
            usage=usage,
            cost_usd=usage_cost_usd(info, usage),
        )
    )
    outcome.result = None
    outcome.served = info
    outcome.cancelled = True
    outcome.error_kind = "client_disconnected"
    outcome.error_message = "the caller went away; the upstream call was closed"
