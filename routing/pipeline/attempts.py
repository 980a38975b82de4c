"""Routing step 2, attempt: ONE guarded call to one endpoint, no retries, no fallback.

:func:`attempt` (non-streaming) and :func:`attempt_stream` check, immediately before calling
upstream: the endpoint is enabled, the kill switch, a ``max_concurrency`` slot, the circuit
breaker, the credential. They report the outcome to the circuit breaker and free the slot, and
keep the session's encrypted reasoning server-side (:mod:`routing.reasoning_store`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from muse_experiments.infra.deferral import defer
from muse_experiments.infra.redis_client import redis_client
from routing.guards import roundtrip
from routing.guards.circuit import OPEN, PROBE, breaker
from routing.guards.concurrency import Slot, limiter
from routing.guards.cooling import cooling_check
from routing.guards.credentials import CredentialUnavailable, credential_for
from routing.guards.killswitch import KillInForce, kill_state
from routing.models import RoutingReason
from routing.pipeline.cancel import cancel_watcher
from routing.pipeline.planning import Candidate, candidate_kill_reason
from routing.providers.base import ProviderStream, estimate_input_tokens
from routing.providers.errors import AuthFailed, ProviderError, StreamFailed
from routing.providers.pricing import compute_cost_usd
from routing.providers.registry import client_for
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Secret,
    StreamEvent,
    Usage,
)
from routing.reasoning_store import OwnedSession, reasoning_load, reasoning_save
from routing.selectors import EndpointInfo
from routing.state import claims

log = logging.getLogger(__name__)


class EndpointRefused(Exception):
    """A guarded attempt refused to call the endpoint; nothing was sent upstream.

    ``outcome``: ``unsupported_contract`` | ``killed`` | ``disabled`` | ``cooling`` |
    ``circuit_open`` | ``concurrency_limited``. ``reason``: the
    :class:`~routing.models.RoutingReason` a fallback gets: for ``killed`` the switch's own
    (``experiment_killed``, ``variant_killed``, ``endpoint_killed``, ``provider_killed``,
    ``external_killed``); ``disabled`` → ``endpoint_killed``; ``cooling`` → ``cooling``;
    ``unsupported_contract`` → the same; else ``circuit_open``. The message names the endpoint
    only; ``contract`` (``unsupported_contract`` only) names the output contract it cannot honour.
    """

    REASONS = {
        "disabled": RoutingReason.ENDPOINT_KILLED,
        "cooling": RoutingReason.COOLING,
        "circuit_open": RoutingReason.CIRCUIT_OPEN,
        "concurrency_limited": RoutingReason.CIRCUIT_OPEN,
        "unsupported_contract": RoutingReason.UNSUPPORTED_CONTRACT,
    }

    def __init__(
        self,
        endpoint_id: str,
        outcome: str,
        reason: str | None = None,
        kill: KillInForce | None = None,
        *,
        contract: str = "",
    ) -> None:
        super().__init__(f"endpoint {endpoint_id} not called: {outcome}")
        self.endpoint_id = endpoint_id
        self.outcome = outcome
        self.reason = reason or self.REASONS[outcome]
        self.kill = kill
        self.contract = contract

    def unavailable_message(self) -> str:
        """Why the endpoint cannot serve, naming the kill (scope, target, since) when one did."""
        if self.kill is not None:
            since = f" since {self.kill.since.isoformat()}" if self.kill.since else ""
            target = f" {self.kill.target}" if self.kill.target else ""
            return (
                f"The model {self.endpoint_id} is unavailable: kill switch {self.kill.scope}{target} "
                f"is on{since} ({self.kill.reason})."
            )
        if self.outcome == "disabled":
            return f"The model {self.endpoint_id} is unavailable: the endpoint is disabled (endpoint_killed)."
        if self.outcome == "unsupported_contract":
            return f"The model {self.endpoint_id} cannot honour the request's {self.contract}."
        return f"The model {self.endpoint_id} is unavailable ({self.reason})."


class AttemptKilled(EndpointRefused):
    """A kill switch flipped while this attempt's upstream call was in flight: the call was cut off
    (its connection shut down, or the stream closed) and the call falls back as for a refusal.
    ``usage``: what the attempt may have cost (estimated input, or the stream's tokens so far);
    ``latency_ms``: how long it ran before the cut."""

    def __init__(self, endpoint_id: str, kill: KillInForce, usage: Usage | None, latency_ms: float) -> None:
        super().__init__(endpoint_id, "killed", kill.reason, kill)
        self.usage = usage
        self.latency_ms = latency_ms


class AttemptCancelled(Exception):
    """The job's caller went away during a non-streamed attempt and its upstream connection was
    shut down (:data:`routing.pipeline.cancel.cancel_watcher`). ``usage``: what the attempt may have cost,
    in tokens: the request's input, estimated (``vendor["estimated"] = 1``), once it had been sent;
    None if nothing reached the upstream."""

    def __init__(self, endpoint_id: str, usage: Usage | None) -> None:
        super().__init__(f"endpoint {endpoint_id}: the caller went away; the upstream call was closed")
        self.usage = usage


def endpoint_config(info: EndpointInfo, credential: str) -> EndpointConfig:
    """The provider client's view of a catalogue entry, with the resolved credential."""
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
        price_cache_write_1h_per_mtok=info.price_cache_write_1h,
        price_output_per_mtok=info.price_output,
        timeout_s=info.timeout_s,
        capabilities=info.capabilities,
    )


def usage_cost_usd(info: EndpointInfo, usage: Usage | None) -> Decimal:
    """What ``usage`` cost at the endpoint's prices (USD; 0 without usage)."""
    if usage is None:
        return Decimal(0)
    return compute_cost_usd(usage, endpoint_config(info, ""))


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


def kill_for(candidate: Candidate) -> KillInForce | None:
    """The kill switch that keeps ``candidate`` from being called now (its experiment or variant,
    else its endpoint, provider or all external providers), or None. In-process, no I/O: cheap
    enough to ask between stream chunks and on every watcher poll."""
    kills = kill_state()
    if candidate_kill_reason(candidate, kills):
        return kills.enrolment_kill(candidate.experiment_key, candidate.variant_key)
    info = candidate.endpoint
    return kills.endpoint_kill(
        public_id=info.public_id, provider_key=info.provider_key, is_external=info.is_external
    )


def _guard(candidate: Candidate, request: CompletionRequest, job_id: str = "") -> _Permit:
    """Every check that must pass immediately before an upstream call: the endpoint can honour the
    request's output contracts (:meth:`~routing.providers.types.CompletionRequest.needs`), enabled,
    kill switch, cooling (:mod:`routing.guards.cooling`), concurrency slot, circuit breaker, credential.
    With ``job_id``, the attempt is noted as started in the same round trip
    (:func:`routing.state.claims.queue_attempt_note`; the note is dropped if a check refuses), so that
    a worker dying during the call leaves it to be recorded ``lost`` (:mod:`routing.worker.reaper`).

    Raises EndpointRefused (nothing was called) or a
    :class:`~routing.guards.credentials.CredentialUnavailable` (missing, or not allowed to go to the
    endpoint's host: :func:`~routing.guards.credentials.credential_for`; nothing was sent).
    """
    info = candidate.endpoint
    for contract, capability in request.needs().items():
        if capability not in info.capabilities:
            raise EndpointRefused(info.public_id, "unsupported_contract", contract=contract)
    if not info.enabled:
        raise EndpointRefused(info.public_id, "disabled")
    kill = kill_for(candidate)
    if kill is not None:
        raise EndpointRefused(info.public_id, "killed", kill.reason, kill)
    # the three shared stores in one Redis round trip (routing.guards.roundtrip); what one of them refuses
    # is given back to the others (a slot, a half-open probe) before the refusal is raised
    pipe = roundtrip.pipeline(redis_client())
    checks = [
        cooling_check(pipe, info.public_id),
        limiter.acquire_check(pipe, info.public_id, info.max_concurrency),
        breaker().allow_check(pipe, info.public_id, probe_lease_s=info.timeout_s + 5.0),
    ]
    if job_id:
        note = {"endpoint": info.public_id, "at": int(time.time() * 1000)}
        claims.queue_attempt_note(pipe, job_id, note)
        checks.append(roundtrip.Pending(read=_noted))
    cooling, slot, permission, *noted = roundtrip.run(pipe, checks)
    refusal = (
        "cooling" if cooling is not None
        else "concurrency_limited" if slot is None
        else "circuit_open" if permission == OPEN
        else ""
    )  # fmt: skip
    if refusal:
        _forget_note(job_id, noted)
        if slot is not None:
            slot.release()
        if permission == PROBE:
            breaker().release_probe(info.public_id)
        raise EndpointRefused(info.public_id, refusal)
    try:
        credential = credential_for(
            provider=info.provider_key, env_name=info.credential_env, base_url=info.base_url
        )
    except CredentialUnavailable:
        _forget_note(job_id, noted)
        slot.release()
        if permission == PROBE:  # a probe that cannot even call: the endpoint stays open
            breaker().record_failure(info.public_id, probe=True)
        raise
    return _Permit(endpoint_config(info, credential), slot, permission == PROBE)


def _noted(reply: Any) -> bool:
    """Whether the attempt's note was written (a Redis error: the call goes on unnoted)."""
    if isinstance(reply, Exception):
        log.warning("noting an attempt failed (%s)", type(reply).__name__)
        return False
    return True


def _forget_note(job_id: str, noted: list[bool]) -> None:
    """Drop the note of an attempt refused before it called upstream (best effort)."""
    if job_id and any(noted):
        try:
            claims.forget_last_note(job_id)
        except Exception as exc:  # noqa: BLE001 - a stale note only over-reports a lost attempt
            log.warning("dropping an attempt note failed (%s)", type(exc).__name__)


def attempt(
    candidate: Candidate, request: CompletionRequest, *, session: OwnedSession | None = None, job_id: str = ""
) -> CompletionResult:
    """ONE guarded non-streaming attempt against ``candidate.endpoint`` (no retries, no fallback).

    Immediately before calling upstream it checks, in order: the endpoint can honour the request's
    output contracts (a fallback reason ``unsupported_contract`` when not); the endpoint is enabled; the kill
    switch (endpoint, provider, all-external, ``MUSE_KILL_EXTERNAL``, fail-closed state, and the
    candidate's experiment/variant); the circuit breaker; a ``max_concurrency`` slot; the
    credential. ``request`` must already carry the candidate's overrides
    (:meth:`Candidate.request_for`).

    Returns the :class:`CompletionResult` (latency in ms, cost in USD). Raises
    :class:`EndpointRefused` (not called), :class:`~routing.guards.credentials.CredentialUnavailable`
    (missing, or bound to other hosts: not called), or a
    :class:`~routing.providers.errors.ProviderError` (called and failed; ``retryable`` and
    ``retry_after_s`` drive the caller's retry). The outcome is reported to the circuit breaker and
    the slot released before returning.

    With ``session`` (the caller's session under its owner: :func:`routing.pipeline.planning.state_session`),
    encrypted reasoning from that session's earlier turns on *this* endpoint and credential is
    passed back (:func:`routing.reasoning_store.reasoning_load`; state from any other endpoint, and
    any other owner's session of the same id, is never forwarded) and the new state is kept
    server-side for the next turn.

    With ``job_id`` (and Redis) the call is watched (:data:`routing.pipeline.cancel.cancel_watcher`): once the
    job's cancel flag is set its upstream connection is shut down and :class:`AttemptCancelled` is
    raised; once a kill switch covers the candidate (:func:`kill_for`) the same happens and
    :class:`AttemptKilled` is raised (the caller falls back). Either way the slot is freed without
    counting against the endpoint.
    """
    permit = _guard(candidate, request, job_id)
    request = _with_session_reasoning(request, permit.config, session)
    started = time.perf_counter()
    with cancel_watcher.watching(job_id, killed=lambda: kill_for(candidate)) as call:
        try:
            result = client_for(permit.config).complete(permit.config, request)
        except BaseException as exc:
            if not call.cancelled:
                permit.finish(exc)
                raise
            permit.slot.release()  # the caller went away, or a kill cut it off: not the endpoint's failure
            usage = Usage(input_tokens=estimate_input_tokens(request), vendor={"estimated": 1})
            usage = usage if call.sent else None
            if call.kill is not None:
                elapsed = (time.perf_counter() - started) * 1000.0
                raise AttemptKilled(permit.config.public_id, call.kill, usage, elapsed) from None
            raise AttemptCancelled(permit.config.public_id, usage) from None
    defer(permit.finish, None)  # after the answer (run_deferred in execute_job)
    if session is not None:
        _keep_reasoning(session, result.reasoning_state)
    return result


def _keep_reasoning(session: OwnedSession, state: Any) -> None:
    """Keep a successful turn's reasoning state for the session's next turn: at once when there is
    state (the caller may send its next turn the moment it has this answer), after the answer
    (:func:`~muse_experiments.infra.deferral.defer`) when the turn only renews the session's TTL
    (``state`` None: every Avocado turn)."""
    if state is None:
        defer(_renew_reasoning, session)
    else:
        reasoning_save(session=session, state=state)


def _renew_reasoning(session: OwnedSession) -> None:
    reasoning_save(session=session, state=None)


def _with_session_reasoning(
    request: CompletionRequest, config: EndpointConfig, session: OwnedSession | None
) -> CompletionRequest:
    if session is None or not config.has("reasoning"):
        return request
    return dataclasses.replace(request, reasoning_state=reasoning_load(session=session, endpoint=config))


def attempt_stream(
    candidate: Candidate, request: CompletionRequest, *, session: OwnedSession | None = None, job_id: str = ""
) -> GuardedStream:
    """ONE guarded streaming attempt. The guards of :func:`attempt` run *now* (before this returns),
    raising :class:`EndpointRefused` / ``CredentialUnavailable`` eagerly.

    The returned :class:`GuardedStream` yields the provider's :class:`StreamEvent` s and holds the
    concurrency slot until it is exhausted or closed (``.close()`` when the caller went away closes
    the upstream response and frees the slot at once, without counting a failure;
    ``.usage_so_far()`` is what the attempt cost until then). Failures *before any content* are
    raised from ``next()`` as ``ProviderError`` (``StreamFailed.after_content`` False): the caller
    may retry or fall back. A failure *after content* arrives as a final ``error`` event whose
    ``event.error`` is a :class:`StreamFailed` with ``after_content=True``: the client has seen
    output, so the caller must end the response there and not restart the call. Both count against
    the circuit breaker; a ``done`` event counts as success.
    """
    permit = _guard(candidate, request, job_id)
    request = _with_session_reasoning(request, permit.config, session)
    try:
        events = client_for(permit.config).stream(permit.config, request)
    except BaseException as exc:
        permit.finish(exc)
        raise
    return GuardedStream(events, permit, session)


class GuardedStream(Iterator[StreamEvent]):
    """A provider stream under a :class:`_Permit`: see :func:`attempt_stream`."""

    def __init__(self, events: ProviderStream, permit: _Permit, session: OwnedSession | None = None) -> None:
        self._stream = events
        self._events = _guarded_events(events, permit, session)
        self._permit = permit
        self.config = permit.config

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        """Close the upstream response and free the concurrency slot (idempotent)."""
        self._events.close()
        self._stream.close()
        self._permit.slot.release()

    def usage_so_far(self) -> Usage:
        return self._stream.usage_so_far()


def _guarded_events(
    events: Iterator[StreamEvent], permit: _Permit, session: OwnedSession | None = None
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
                if session is not None and event.result is not None:
                    reasoning_save(
                        session=session,
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
