"""Routing step 4, record: what a call decided and what served it, in one transaction.

The exposure (intent-to-treat: recorded even when a fallback served -- but never while the unit's
experiment or assigned variant is killed: no new enrolment, see :mod:`routing.killswitch`), the
call record with every attempt, the job's public result, and the session's transcript turn. Encrypted reasoning never
reaches the database: only ``CompletionResult.to_public_dict()`` is stored.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from muse_experiments.assignment.engine import Decision
from muse_experiments.selectors import assignment_snapshot
from muse_experiments.services import exposure_record

from .killswitch import kill_state
from .metrics import observe_outcome
from .models import KILL_REASONS, Attempt, CallRecord, CompletionJob, JobStatus, RoutingReason
from .planning import Candidate
from .serving import ServeOutcome
from .transcripts.services import transcript_record_turn


def unit_id_for(decision: Decision, job: CompletionJob) -> str:
    """The id that was hashed: the session or the user, per the experiment's unit type."""
    if decision.experiment_id is None:
        return ""
    exp = next((e for e in assignment_snapshot().experiments if e.id == decision.experiment_id), None)
    return job.user_id if exp is not None and exp.unit_type == "user" else job.session_id


#: Reasons under which a unit is not (newly) enrolled: no exposure, so no sticky write.
NOT_ENROLLED = frozenset({RoutingReason.EXPERIMENT_KILLED, RoutingReason.VARIANT_KILLED})


def kill_in_result(decision: Decision, chain: list[Candidate], outcome: ServeOutcome) -> dict | None:
    """The kill that moved this call, as the job result states it (``{"scope", "target", "reason",
    "since"}``), or ``None`` when no kill was involved."""
    if outcome.reason not in KILL_REASONS:
        return None
    kills = kill_state()
    kill = kills.enrolment_kill(
        decision.experiment_key if decision.in_experiment else None, decision.variant_key
    )
    if kill is None and chain:
        info = chain[0].endpoint
        kill = kills.endpoint_kill(
            public_id=info.public_id, provider_key=info.provider_key, is_external=info.is_external
        )
    if kill is None:
        return {
            "scope": "",
            "target": chain[0].endpoint.public_id if chain else "",
            "reason": outcome.reason,
            "since": None,
        }
    return kill.to_public_dict()


def record_call(
    job: CompletionJob, decision: Decision, chain: list[Candidate], outcome: ServeOutcome
) -> None:
    """Write the records of one finished call and the job's final state (one transaction)."""
    result = outcome.result
    assigned = chain[0].endpoint.public_id if chain else ""
    observe_outcome(
        experiment=decision.experiment_key, variant=decision.variant_key, assigned=assigned, outcome=outcome
    )
    public = result.to_public_dict() if result else None
    kill = kill_in_result(decision, chain, outcome)
    with transaction.atomic():
        if decision.in_experiment and outcome.reason not in NOT_ENROLLED:
            exposure_record(
                experiment_id=decision.experiment_id,
                phase=decision.phase,
                unit_id=unit_id_for(decision, job),
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
            unit_id=unit_id_for(decision, job),
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
                "kill": kill,
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
