"""The inference proxy's core: decide which model serves a job, call it, record what happened.

``execute_job`` is what the Celery task runs. Steps:

1. claim the job (row lock; a redelivered task for a finished or claimed job does nothing);
2. decide: the pure assignment engine on the cached configuration snapshot, with the unit's
   durable sticky assignments (one indexed query);
3. serve: try the candidate chain — assigned variant, the experiment's control, the platform
   default — each candidate with its own variant's overrides. Per candidate, up to
   ``1 + ROUTING_MAX_RETRIES`` guarded attempts (:func:`attempt`) with exponential backoff and
   full jitter (or the upstream's ``retry-after``, capped; :mod:`routing.retry`) for retryable
   failures; then the next candidate;
4. record, in one transaction: the exposure (intent-to-treat: recorded even when a fallback
   served), the call record with every attempt, and the job's public result.

Fallback triggers and the ``reason`` a CallRecord gets when a later candidate serves (the cause
that made routing leave the *first* candidate):

* ``killed`` — a kill switch (endpoint / provider / all external / experiment / variant, or the
  fail-closed state) or a disabled endpoint;
* ``circuit_open`` — the endpoint's circuit breaker is open (or half-open with its probe in
  flight), or the endpoint is at ``max_concurrency`` (Attempt outcome ``concurrency_limited``):
  in both cases the endpoint is protected and was not called;
* ``error_fallback`` — retries exhausted on retryable errors (429, 5xx, 529, timeout, reset,
  malformed body, in-stream error before content), an authentication failure or a missing
  credential (both endpoint problems, not retried on the same endpoint).

A 4xx caused by the request itself (``ClientRequestError`` other than 401/403) is not retried
and ends the call: it would fail the same way elsewhere. When the first candidate serves, the
reason is the decision's (``assigned``, ``forced``, ``sticky``, ``holdout``, ``default``).

Streaming (``routing/streaming.py``) reuses :func:`candidate_chain`, :func:`attempt_stream` and
:func:`retry_policy`. A stream that has already sent content to the client is never restarted:
:func:`attempt_stream` yields a final ``error`` event whose ``StreamFailed.after_content`` is
True, and the caller must end the response there instead of trying the next candidate.

Encrypted reasoning returned by external providers never reaches the job result or the database:
only ``CompletionResult.to_public_dict()`` is stored.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from muse_experiments.assignment.engine import Decision, route
from muse_experiments.selectors import assignment_snapshot, sticky_variants
from muse_experiments.services import exposure_record

from .circuit import OPEN, PROBE, breaker
from .concurrency import Slot, limiter
from .credentials import MissingCredential, resolve_credential
from .killswitch import KillState, kill_state
from .models import Attempt, CallRecord, CompletionJob, JobStatus, RoutingReason
from .providers.errors import AuthFailed, ClientRequestError, ProviderError, StreamFailed
from .providers.registry import client_for
from .providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Message,
    Secret,
    StreamEvent,
    ToolCall,
    ToolSpec,
)
from .reasoning_store import reasoning_load, reasoning_save
from .retry import RetryPolicy
from .selectors import Catalogue, EndpointInfo, catalogue
from .services import completion_job_claim
from .transcripts.services import transcript_record_turn

log = logging.getLogger(__name__)

OVERRIDE_FIELDS = (
    "reasoning_effort",
    "temperature",
    "max_output_tokens",
    "allowed_tools",
    "system_prompt_version",
)


@dataclass(frozen=True)
class Candidate:
    """An endpoint to try, why it is in the chain, and the variant it stands for.

    ``role``: ``assigned`` | ``control`` | ``default``. ``experiment_key`` / ``variant_key`` /
    ``is_control`` name the experiment variant this candidate serves (``None`` for the platform
    default), so the kill switch can be checked per variant at attempt time. ``overrides`` are that
    variant's request overrides (see :data:`OVERRIDE_FIELDS`).
    """

    endpoint: EndpointInfo
    role: str
    experiment_key: str | None = None
    variant_key: str | None = None
    is_control: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def request_for(self, base: CompletionRequest) -> CompletionRequest:
        """``base`` (built without variant overrides) with this candidate's overrides applied."""
        changes = {k: self.overrides[k] for k in OVERRIDE_FIELDS if k in self.overrides}
        return dataclasses.replace(base, **changes) if changes else base


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


class EndpointRefused(Exception):
    """A guarded attempt refused to call the endpoint; nothing was sent upstream.

    ``outcome``: ``killed`` | ``disabled`` | ``circuit_open`` | ``concurrency_limited``.
    ``reason``: the :class:`~routing.models.RoutingReason` a fallback gets (``killed`` or
    ``circuit_open``). The message names the endpoint only.
    """

    REASONS = {
        "killed": RoutingReason.KILLED,
        "disabled": RoutingReason.KILLED,
        "circuit_open": RoutingReason.CIRCUIT_OPEN,
        "concurrency_limited": RoutingReason.CIRCUIT_OPEN,
    }

    def __init__(self, endpoint_id: str, outcome: str) -> None:
        super().__init__(f"endpoint {endpoint_id} not called: {outcome}")
        self.endpoint_id = endpoint_id
        self.outcome = outcome
        self.reason = self.REASONS[outcome]


def decide(job: CompletionJob) -> Decision:
    """Assignment for a job's unit (pure engine + sticky lookup). No provider is called."""
    snapshot = assignment_snapshot()
    attributes = {
        **job.attributes,
        "subagent": job.subagent,
        "session_id": job.session_id,
        "user_id": job.user_id,
    }
    sticky = None
    if snapshot.experiments:
        sticky = (
            sticky_variants(
                experiment_ids=[e.id for e in snapshot.experiments],
                session_id=job.session_id,
                user_id=job.user_id,
            )
            or None
        )
    return route(
        snapshot, session_id=job.session_id, user_id=job.user_id, attributes=attributes, sticky=sticky
    )


def candidate_chain(decision: Decision, cat: Catalogue, kills: KillState | None = None) -> list[Candidate]:
    """Assigned variant, then the experiment's control, then the platform default.

    Candidates are deduplicated by endpoint, except that a candidate whose experiment variant is
    killed (``kills``, default :func:`kill_state`) stays in the chain — so the call record shows it
    was skipped — without hiding a later candidate on the same endpoint (a killed treatment that
    shares its endpoint with control must still reach control, with control's overrides).
    Unknown endpoint ids are dropped. The experiment-kill rule: every variant but the control is
    killed, so the experiment's traffic is served by its control.
    """
    kills = kills if kills is not None else kill_state()
    snapshot = assignment_snapshot()
    exp = None
    if decision.experiment_id is not None:
        exp = next((e for e in snapshot.experiments if e.id == decision.experiment_id), None)
    assigned_spec = (
        next((v for v in exp.variants if v.key == decision.variant_key), None) if exp is not None else None
    )
    control = next((v for v in exp.variants if v.is_control), None) if exp is not None else None
    exp_key = decision.experiment_key if exp is not None else None
    entries: list[tuple[str | None, str, str | None, bool, Mapping[str, Any]]] = [
        (
            decision.endpoint_id,
            "assigned",
            decision.variant_key if exp is not None else None,
            bool(assigned_spec and assigned_spec.is_control),
            dict(decision.overrides or {}),
        )
    ]
    if control is not None:
        entries.append((control.endpoint_id, "control", control.key, True, dict(control.overrides or {})))
    entries.append((cat.default_id, "default", None, False, {}))
    seen: set[str] = set()
    chain = []
    for public_id, role, variant_key, is_control, overrides in entries:
        info = cat.get(public_id)
        if info is None or info.public_id in seen:
            continue
        candidate = Candidate(
            info,
            role,
            experiment_key=exp_key if variant_key is not None else None,
            variant_key=variant_key,
            is_control=is_control,
            overrides=overrides,
        )
        if not _variant_killed(candidate, kills):
            seen.add(info.public_id)
        chain.append(candidate)
    return chain


def _variant_killed(candidate: Candidate, kills: KillState) -> bool:
    if candidate.experiment_key is None:
        return False
    if candidate.experiment_key in kills.experiments and not candidate.is_control:
        return True
    return (candidate.experiment_key, candidate.variant_key or "") in kills.variants


def endpoint_config(info: EndpointInfo, credential: str) -> EndpointConfig:
    """The provider client's view of a catalogue entry, with the resolved credential."""
    capabilities = {
        name
        for name, on in (
            ("tools", info.supports_tools),
            ("reasoning", info.supports_reasoning),
            ("streaming", info.supports_streaming),
        )
        if on
    }
    return EndpointConfig(
        public_id=info.public_id,
        provider_kind=info.provider_kind,
        base_url=info.base_url,
        upstream_model=info.upstream_model,
        api_style=info.api_style,
        api_version=info.api_version or None,
        credential=Secret(credential),
        price_input_per_mtok=info.price_input,
        price_cached_input_per_mtok=info.price_cached_input,
        price_cache_write_per_mtok=info.price_cache_write,
        price_output_per_mtok=info.price_output,
        timeout_s=info.timeout_s,
        capabilities=frozenset(capabilities),
    )


def build_request(job: CompletionJob, overrides: Mapping[str, Any]) -> CompletionRequest:
    """The normalised request from a job's stored messages and tools plus ``overrides``.

    The router builds the base request with ``overrides={}`` and lets each :class:`Candidate`
    apply its own variant's overrides (:meth:`Candidate.request_for`)."""
    messages = tuple(
        Message(
            role=m["role"],
            content=m.get("content", ""),
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                for c in m.get("tool_calls", ())
            ),
            tool_call_id=m.get("tool_call_id"),
        )
        for m in job.request["messages"]
    )
    tools = tuple(
        ToolSpec(
            name=t["name"],
            description=t.get("description", ""),
            parameters=t.get("parameters") or {"type": "object", "properties": {}},
        )
        for t in job.request.get("tools", ())
    )
    return CompletionRequest(
        messages=messages, tools=tools, **{k: overrides[k] for k in OVERRIDE_FIELDS if k in overrides}
    )


def retry_policy() -> RetryPolicy:
    """The retry policy from settings (``ROUTING_MAX_RETRIES``, ``ROUTING_BACKOFF_BASE_MS``,
    ``ROUTING_BACKOFF_CAP_MS``, ``ROUTING_RETRY_AFTER_CAP_S``)."""
    return RetryPolicy(
        max_retries=settings.ROUTING_MAX_RETRIES,
        base_ms=settings.ROUTING_BACKOFF_BASE_MS,
        cap_ms=settings.ROUTING_BACKOFF_CAP_MS,
        retry_after_cap_s=settings.ROUTING_RETRY_AFTER_CAP_S,
    )


def counts_against_endpoint(exc: ProviderError) -> bool:
    """Whether a failure says the endpoint is unhealthy (circuit breaker failure).

    Retryable upstream errors, authentication failures and broken streams count; a request the
    upstream rejected (other 4xx) does not.
    """
    return exc.retryable or isinstance(exc, (AuthFailed, StreamFailed))


@dataclass
class _Permit:
    config: EndpointConfig
    slot: Slot
    probe: bool

    def finish(self, exc: BaseException | None) -> None:
        """Report the attempt's outcome to the circuit breaker and free the concurrency slot."""
        try:
            if exc is None or (isinstance(exc, ProviderError) and not counts_against_endpoint(exc)):
                breaker().record_success(self.config.public_id, probe=self.probe)
            elif isinstance(exc, ProviderError) or self.probe:
                breaker().record_failure(self.config.public_id, probe=self.probe)
        finally:
            self.slot.release()


def _guard(candidate: Candidate) -> _Permit:
    """Every check that must pass immediately before an upstream call: enabled, kill switch,
    concurrency slot, circuit breaker, credential.

    Raises EndpointRefused (nothing was called) or MissingCredential.
    """
    info = candidate.endpoint
    if not info.enabled:
        raise EndpointRefused(info.public_id, "disabled")
    kills = kill_state()
    if _variant_killed(candidate, kills) or kills.endpoint_killed(
        public_id=info.public_id, provider_key=info.provider_key, is_external=info.is_external
    ):
        raise EndpointRefused(info.public_id, "killed")
    slot = limiter.acquire(info.public_id, info.max_concurrency)
    if slot is None:
        raise EndpointRefused(info.public_id, "concurrency_limited")
    permission = breaker().allow(info.public_id, probe_lease_s=info.timeout_s + 5.0)
    if permission == OPEN:
        slot.release()
        raise EndpointRefused(info.public_id, "circuit_open")
    try:
        config = endpoint_config(info, resolve_credential(info.credential_env))
    except MissingCredential:
        slot.release()
        if permission == PROBE:  # a probe that cannot even call: the endpoint stays open
            breaker().record_failure(info.public_id, probe=True)
        raise
    return _Permit(config, slot, permission == PROBE)


def attempt(candidate: Candidate, request: CompletionRequest, *, session_id: str = "") -> CompletionResult:
    """ONE guarded non-streaming attempt against ``candidate.endpoint`` (no retries, no fallback).

    Immediately before calling upstream it checks, in order: the endpoint is enabled; the kill
    switch (endpoint, provider, all-external, ``MUSE_KILL_EXTERNAL``, fail-closed state, and the
    candidate's experiment/variant); the circuit breaker; a ``max_concurrency`` slot; the
    credential. ``request`` must already carry the candidate's overrides
    (:meth:`Candidate.request_for`).

    Returns the :class:`CompletionResult` (latency in ms, cost in USD). Raises
    :class:`EndpointRefused` (not called), :class:`~routing.credentials.MissingCredential`, or a
    :class:`~routing.providers.errors.ProviderError` (called and failed; ``retryable`` and
    ``retry_after_s`` drive the caller's retry). The outcome is reported to the circuit breaker and
    the slot released before returning.

    With ``session_id``, encrypted reasoning from the session's earlier turns on *this* endpoint and
    credential is passed back (:func:`routing.reasoning_store.reasoning_load`; state from any other
    endpoint is dropped, never forwarded) and the new state is kept server-side for the next turn.
    """
    permit = _guard(candidate)
    request = _with_session_reasoning(request, permit.config, session_id)
    try:
        result = client_for(permit.config).complete(permit.config, request)
    except BaseException as exc:
        permit.finish(exc)
        raise
    permit.finish(None)
    if session_id:
        reasoning_save(
            session_id=session_id, state=result.reasoning_state, endpoint_id=permit.config.public_id
        )
    return result


def _with_session_reasoning(
    request: CompletionRequest, config: EndpointConfig, session_id: str
) -> CompletionRequest:
    if not session_id or not config.has("reasoning"):
        return request
    return dataclasses.replace(
        request, reasoning_state=reasoning_load(session_id=session_id, endpoint=config)
    )


def attempt_stream(
    candidate: Candidate, request: CompletionRequest, *, session_id: str = ""
) -> Iterator[StreamEvent]:
    """ONE guarded streaming attempt. The guards of :func:`attempt` run *now* (before this returns),
    raising :class:`EndpointRefused` / ``MissingCredential`` eagerly.

    The returned iterator yields the provider's :class:`StreamEvent` s and holds the concurrency
    slot until it is exhausted or closed (``.close()`` on client disconnect frees the slot without
    counting a failure). Failures *before any content* are raised from ``next()`` as
    ``ProviderError`` (``StreamFailed.after_content`` False): the caller may retry or fall back.
    A failure *after content* arrives as a final ``error`` event whose ``event.error`` is a
    :class:`StreamFailed` with ``after_content=True``: the client has seen output, so the caller
    must end the response there and not restart the call. Both count against the circuit breaker;
    a ``done`` event counts as success.
    """
    permit = _guard(candidate)
    request = _with_session_reasoning(request, permit.config, session_id)
    try:
        events = client_for(permit.config).stream(permit.config, request)
    except BaseException as exc:
        permit.finish(exc)
        raise
    return _guarded_events(events, permit, session_id)


def _guarded_events(
    events: Iterator[StreamEvent], permit: _Permit, session_id: str = ""
) -> Iterator[StreamEvent]:
    finished = False
    try:
        for event in events:
            if event.kind == "error" and not finished:
                finished = True
                permit.finish(event.error or StreamFailed("stream error", after_content=True))
            elif event.kind == "done" and not finished:
                finished = True
                permit.finish(None)
                if session_id and event.result is not None:
                    reasoning_save(
                        session_id=session_id,
                        state=event.result.reasoning_state,
                        endpoint_id=permit.config.public_id,
                    )
            yield event
    except BaseException as exc:
        if not finished:
            finished = True
            if isinstance(exc, GeneratorExit):
                permit.slot.release()
            else:
                permit.finish(exc)
        raise
    finally:
        if not finished:
            permit.slot.release()


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
                break
            except MissingCredential as exc:
                outcome.attempts.append(
                    AttemptLog(info.public_id, "missing_credential", _ms(started), backoff_ms=backoff_ms)
                )
                outcome.error_kind, outcome.error_message = "missing_credential", str(exc)
                fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
                break
            except ProviderError as exc:
                outcome.attempts.append(
                    AttemptLog(
                        info.public_id,
                        type(exc).__name__,
                        _ms(started),
                        exc.status_code,
                        exc.upstream_request_id or "",
                        backoff_ms=backoff_ms,
                        retry_after_s=exc.retry_after_s,
                    )
                )
                outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
                if isinstance(exc, ClientRequestError) and not isinstance(exc, AuthFailed):
                    return outcome  # the request itself is wrong: it would fail the same way elsewhere
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
                    _ms(started),
                    200,
                    result.upstream_request_id or "",
                    backoff_ms=backoff_ms,
                )
            )
            outcome.result, outcome.served = result, info
            if candidate.role != "assigned" and fell_back_because:
                outcome.reason = fell_back_because
            return outcome
    return outcome


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _reason_for(decision: Decision) -> str:
    if decision.in_experiment:
        return (
            decision.reason
            if decision.reason in (RoutingReason.FORCED, RoutingReason.STICKY)
            else RoutingReason.ASSIGNED
        )
    return RoutingReason.HOLDOUT if decision.reason == "holdout" else RoutingReason.DEFAULT


def execute_job(*, job_id: str) -> str:
    """Run one completion job end to end. Returns the job's final status; safe to call twice."""
    job = completion_job_claim(job_id=job_id)
    if job is None:
        return CompletionJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"
    decision = decide(job)
    cat = catalogue()
    chain = candidate_chain(decision, cat)
    request = build_request(job, {})
    outcome = serve(request, chain, _reason_for(decision), session_id=job.session_id)
    _record(job, decision, chain, outcome)
    return job.status


def _unit_id(decision: Decision, job: CompletionJob) -> str:
    """The id that was hashed: the session or the user, per the experiment's unit type."""
    if decision.experiment_id is None:
        return ""
    exp = next((e for e in assignment_snapshot().experiments if e.id == decision.experiment_id), None)
    return job.user_id if exp is not None and exp.unit_type == "user" else job.session_id


def _record(job: CompletionJob, decision: Decision, chain: list[Candidate], outcome: ServeOutcome) -> None:
    result = outcome.result
    assigned = chain[0].endpoint.public_id if chain else ""
    public = result.to_public_dict() if result else None
    with transaction.atomic():
        if decision.in_experiment:
            exposure_record(
                experiment_id=decision.experiment_id,
                phase=decision.phase,
                unit_id=_unit_id(decision, job),
                variant_key=decision.variant_key,
                reason=decision.reason,
            )
        usage = result.usage if result else None
        call = CallRecord.objects.create(
            job=job,
            session_id=job.session_id,
            user_id=job.user_id,
            subagent=job.subagent,
            experiment_id=decision.experiment_id,
            experiment_key=decision.experiment_key or "",
            phase=decision.phase,
            variant_key=decision.variant_key or "",
            unit_id=_unit_id(decision, job),
            assigned_endpoint=assigned,
            served_endpoint=outcome.served.public_id if outcome.served else "",
            reason=outcome.reason,
            status=JobStatus.SUCCEEDED if result else JobStatus.FAILED,
            error_kind=outcome.error_kind if not result else "",
            latency_ms=result.latency_ms if result else None,
            input_tokens=usage.input_tokens if usage else 0,
            cached_input_tokens=usage.cached_input_tokens if usage else 0,
            cache_write_tokens=usage.cache_write_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            reasoning_tokens=usage.reasoning_tokens if usage else 0,
            cost_usd=Decimal(str(result.cost_usd)) if result else Decimal(0),
            tool_calls=len(result.tool_calls) if result else 0,
        )
        Attempt.objects.bulk_create(
            Attempt(
                call=call,
                number=i,
                endpoint=a.endpoint,
                outcome=a.outcome,
                status_code=a.status_code,
                latency_ms=a.latency_ms,
                upstream_request_id=a.upstream_request_id,
                backoff_ms=a.backoff_ms,
                retry_after_s=a.retry_after_s,
            )
            for i, a in enumerate(outcome.attempts, start=1)
        )
        job.status = JobStatus.SUCCEEDED if result else JobStatus.FAILED
        job.finished_at = timezone.now()
        if result:
            job.result = {
                **public,
                "served_model": outcome.served.public_id,
                "assigned_model": assigned,
                "experiment": decision.experiment_key,
                "variant": decision.variant_key,
                "reason": outcome.reason,
            }
        else:
            job.error = f"{outcome.error_kind or 'no_endpoint'}: {outcome.error_message or 'no endpoint could serve this call'}"[
                :2000
            ]
        job.save(update_fields=["status", "finished_at", "result", "error"])
        if result:
            transcript_record_turn(
                job=job,
                served_endpoint_public_id=outcome.served.public_id,
                provider_kind=outcome.served.provider_kind,
                result_public=public,
                experiment_key=decision.experiment_key,
                variant_key=decision.variant_key,
            )
