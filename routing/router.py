"""The inference proxy's core: decide which model serves a job, call it, record what happened.

``execute_job`` is what the Celery task runs. Steps:

1. claim the job (row lock; a redelivered task for a finished or claimed job does nothing);
2. decide: the pure assignment engine on the cached configuration snapshot, with the unit's
   durable sticky assignments (one indexed query);
3. serve: try the candidate chain — assigned endpoint, the experiment's control, the platform
   default — skipping disabled endpoints, falling back on retryable upstream errors;
4. record, in one transaction: the exposure (intent-to-treat: recorded even when a fallback
   served), the call record with every attempt, and the job's public result.

Encrypted reasoning returned by external providers never reaches the job result or the database:
only ``CompletionResult.to_public_dict()`` is stored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from muse_experiments.assignment.engine import Decision, route
from muse_experiments.selectors import assignment_snapshot, sticky_variants
from muse_experiments.services import exposure_record

from .credentials import MissingCredential, resolve_credential
from .models import Attempt, CallRecord, CompletionJob, JobStatus, RoutingReason
from .providers.errors import ProviderError
from .providers.registry import client_for
from .providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Message,
    Secret,
    ToolCall,
    ToolSpec,
)
from .selectors import Catalogue, EndpointInfo, catalogue
from .services import completion_job_claim

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """An endpoint to try and why it is in the chain."""

    endpoint: EndpointInfo
    role: str  # "assigned", "control", "default"


@dataclass
class AttemptLog:
    endpoint: str
    outcome: str
    latency_ms: float
    status_code: int | None = None
    upstream_request_id: str = ""


@dataclass
class ServeOutcome:
    result: CompletionResult | None
    served: EndpointInfo | None
    reason: str
    attempts: list[AttemptLog] = field(default_factory=list)
    error_kind: str = ""
    error_message: str = ""


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
                experiment_ids=[e.id for e in snapshot.experiments], unit_ids={job.session_id, job.user_id}
            )
            or None
        )
    return route(
        snapshot, session_id=job.session_id, user_id=job.user_id, attributes=attributes, sticky=sticky
    )


def candidate_chain(decision: Decision, cat: Catalogue) -> list[Candidate]:
    """Assigned endpoint, then the experiment's control, then the platform default (deduplicated)."""
    snapshot = assignment_snapshot()
    ids: list[tuple[str | None, str]] = [(decision.endpoint_id, "assigned")]
    if decision.experiment_id is not None:
        exp = next((e for e in snapshot.experiments if e.id == decision.experiment_id), None)
        control = next((v for v in exp.variants if v.is_control), None) if exp else None
        ids.append((control.endpoint_id if control else None, "control"))
    ids.append((cat.default_id, "default"))
    seen: set[str] = set()
    chain = []
    for public_id, role in ids:
        info = cat.get(public_id)
        if info is None or info.public_id in seen:
            continue
        seen.add(info.public_id)
        chain.append(Candidate(info, role))
    return chain


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


OVERRIDE_FIELDS = (
    "reasoning_effort",
    "temperature",
    "max_output_tokens",
    "allowed_tools",
    "system_prompt_version",
)


def build_request(job: CompletionJob, overrides: dict[str, Any]) -> CompletionRequest:
    """The normalised request from a job's stored messages and tools plus the variant's overrides."""
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


def serve(request: CompletionRequest, chain: list[Candidate], assigned_reason: str) -> ServeOutcome:
    """Try the chain in order. Returns the first success, or the last failure."""
    outcome = ServeOutcome(result=None, served=None, reason=assigned_reason)
    fell_back_because = ""
    for candidate in chain:
        info = candidate.endpoint
        if not info.enabled:
            fell_back_because = fell_back_because or RoutingReason.KILLED
            outcome.attempts.append(AttemptLog(info.public_id, "disabled", 0.0))
            continue
        started = time.perf_counter()
        try:
            credential = resolve_credential(info.credential_env)
            config = endpoint_config(info, credential)
            result = client_for(config).complete(config, request)
        except MissingCredential as exc:
            outcome.attempts.append(AttemptLog(info.public_id, "missing_credential", _ms(started)))
            outcome.error_kind, outcome.error_message = "missing_credential", str(exc)
            fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
            continue
        except ProviderError as exc:
            outcome.attempts.append(
                AttemptLog(info.public_id, type(exc).__name__, _ms(started), exc.status_code)
            )
            outcome.error_kind, outcome.error_message = type(exc).__name__, str(exc)
            if not exc.retryable:
                break  # a client error would fail the same way elsewhere
            fell_back_because = fell_back_because or RoutingReason.ERROR_FALLBACK
            continue
        outcome.attempts.append(
            AttemptLog(info.public_id, "ok", _ms(started), 200, result.upstream_request_id or "")
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
    request = build_request(job, dict(decision.overrides or {}))
    outcome = serve(request, chain, _reason_for(decision))
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
