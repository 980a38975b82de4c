"""The records of a finished call as one JSON-able payload, and their idempotent bulk write.

:func:`call_payload` turns what the router knows after serving a job (decision, candidate chain,
outcome) into a plain dict: the job's final state (what the caller gets), the exposure, the call
record with its attempts, and the transcript turn. :func:`records_write` writes a batch of such
payloads in ONE transaction with a fixed number of queries; replaying a payload that was already
written changes nothing (a job that has a call record is skipped), so a buffer can be drained at
least once (:mod:`routing.worker.drainer`).

Only ``CompletionResult.to_public_dict()`` enters a payload: encrypted reasoning never does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from muse_experiments.experiments.assignment.specs import Decision
from muse_experiments.experiments.selectors import assignment_snapshot
from muse_experiments.experiments.services.exposures import ExposureInput, exposures_record_many
from muse_experiments.infra.storage_text import storable
from routing.guards.killswitch import kill_state
from routing.jobs import completion_jobs_finish, completion_jobs_insert
from routing.messages import job_from_row, job_row
from routing.models import KILL_REASONS, Attempt, CallRecord, CompletionJob, JobStatus, RoutingReason
from routing.pipeline.planning import Candidate
from routing.pipeline.serving import ServeOutcome
from routing.transcripts.services import TurnInput, transcript_record_turns

log = logging.getLogger(__name__)

_USAGE_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)


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


def job_final_state(
    job: CompletionJob, decision: Decision, chain: list[Candidate], outcome: ServeOutcome
) -> dict:
    """The job's public final state: ``{status, result, error, finished_at}`` (ISO-8601 time).

    ``result`` (succeeded jobs) is the public result plus served/assigned model, experiment,
    variant, routing reason, the kill that moved the call (:func:`kill_in_result`) and
    ``call_cost_usd`` (every attempt's cost); ``error`` (failed jobs) says why, at most 2,000
    characters. A call whose caller went away (``outcome.cancelled``) ends ``cancelled``.
    """
    result = outcome.result
    assigned = chain[0].endpoint.public_id if chain else ""
    status = JobStatus.SUCCEEDED if result else JobStatus.CANCELLED if outcome.cancelled else JobStatus.FAILED
    state: dict[str, Any] = {
        "status": status,
        "result": None,
        "error": "",
        "finished_at": timezone.now().isoformat(),
    }
    if result:
        state["result"] = {
            **result.to_public_dict(),
            "served_model": outcome.served.public_id,
            "assigned_model": assigned,
            "experiment": decision.experiment_key,
            "variant": decision.variant_key,
            "reason": outcome.reason,
            "kill": kill_in_result(decision, chain, outcome),
            # every attempt's cost, failed ones and those before a fallback included (USD)
            "call_cost_usd": str(outcome.billed_cost_usd()),
        }
    else:
        state["error"] = (
            f"{outcome.error_kind or 'no_endpoint'}: "
            f"{outcome.error_message or 'no endpoint could serve this call'}"
        )[:2000]
    return state


def call_payload(
    job: CompletionJob, decision: Decision, chain: list[Candidate], outcome: ServeOutcome, final: Mapping
) -> dict[str, Any]:
    """Everything :func:`records_write` needs for one call, as JSON-able values.

    ``final`` is :func:`job_final_state`. Keys: ``job`` (id, final state), ``row`` (the job's row
    when it was claimed without one, :mod:`routing.state.claims`; else None), ``exposure`` (or None
    outside experiments), ``call`` (the CallRecord's fields), ``attempts`` and ``turn`` (or None
    for a failed call).
    """
    result = outcome.result
    billed = outcome.billed_usage()  # every attempt's tokens: failed, abandoned and fallen-back ones too
    unit_id = unit_id_for(decision, job)
    job_id = str(job.id)
    call = {
        "session_id": job.session_id,
        "user_id": job.user_id,
        "subagent": job.subagent,
        "experiment_id": decision.experiment_id,
        "experiment_key": decision.experiment_key or "",
        "phase": decision.phase,
        "variant_key": decision.variant_key or "",
        "unit_id": unit_id,
        "assigned_endpoint": chain[0].endpoint.public_id if chain else "",
        "served_endpoint": outcome.served.public_id if outcome.served else "",
        "reason": outcome.reason,
        "status": final["status"],
        "error_kind": outcome.error_kind if not result else "",
        "latency_ms": result.latency_ms if result else None,
        # streams only (None otherwise; payloads buffered before it existed lack it and drain null):
        # ms to the serving attempt's first content delta, timed in routing.providers.base
        "ttft_ms": result.time_to_first_token_ms if result else None,
        **{f: getattr(billed, f) for f in _USAGE_FIELDS},
        "cost_usd": str(outcome.billed_cost_usd()),
        "cost_unknown": any(a.cost_unknown for a in outcome.attempts),
        "tool_calls": len(result.tool_calls) if result else 0,
        "created_at": final["finished_at"],
    }
    exposure = None
    if decision.in_experiment and outcome.reason not in NOT_ENROLLED:  # killed: no new enrolment
        exposure = {
            "experiment_id": decision.experiment_id,
            "phase": decision.phase,
            "unit_id": unit_id,
            "variant_key": decision.variant_key,
            "reason": decision.reason,
            # when the unit was routed (the call's start), not when the drainer writes the row
            "first_exposed_at": (job.started_at or timezone.now()).isoformat(),
        }
    turn = None
    if result:
        turn = {
            "session_id": job.session_id,
            "user_id": job.user_id,
            "request": job.request,
            "served_endpoint_public_id": outcome.served.public_id,
            "provider_kind": outcome.served.provider_kind,
            "result_public": result.to_public_dict(),
            "experiment_key": decision.experiment_key,
            "variant_key": decision.variant_key,
        }
    return {
        "job": {"id": job_id, **final},
        "row": _claimed_row(job, turn),
        "exposure": exposure,
        "call": call,
        "attempts": [
            {
                "endpoint": a.endpoint,
                "outcome": a.outcome,
                "status_code": a.status_code,
                "latency_ms": a.latency_ms,
                "upstream_request_id": a.upstream_request_id,
                "backoff_ms": a.backoff_ms,
                "retry_after_s": a.retry_after_s,
                **{f: getattr(a.usage, f) if a.usage else 0 for f in _USAGE_FIELDS},
                "cost_usd": str(a.cost_usd),
                "cost_unknown": a.cost_unknown,
            }
            for a in outcome.attempts
        ],
        "turn": turn,
    }


def _claimed_row(job: CompletionJob, turn: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The row of a job claimed without one (:mod:`routing.state.claims`), else None: :func:`job_row`
    and its claim. The ``request`` is left out when the turn carries it (the same conversation,
    carried once)."""
    if not job._state.adding:
        return None
    return {
        **job_row(job, request=turn is None),
        "started_at": job.started_at.isoformat(),
        "lease_expires_at": job.lease_expires_at.isoformat(),
        "deliveries": job.deliveries,
        "worker": job.worker,
    }


def _claimed_job(payload: Mapping[str, Any]) -> CompletionJob:
    """The ``running`` job of a payload's ``row`` (:func:`_claimed_row`), unsaved."""
    row = payload["row"]
    if row["request"] is None:
        row = {**row, "request": payload["turn"]["request"]}
    return job_from_row(
        payload["job"]["id"], row, status=JobStatus.RUNNING, deliveries=row["deliveries"], worker=row["worker"],
        started_at=datetime.fromisoformat(row["started_at"]),
        lease_expires_at=datetime.fromisoformat(row["lease_expires_at"]),
    )  # fmt: skip


def records_write(payloads: Sequence[Mapping[str, Any]]) -> int:
    """Write a batch of :func:`call_payload` s in one transaction. Returns how many calls were new.

    Idempotent: payloads whose job already has a call record (an earlier write of the same
    payload) are skipped, except that the answer of a job whose call was recorded lost (error
    kind :data:`LOST_KIND`: its worker's heartbeat lapsed while it still worked) replaces it, and so are repeats within the batch and payloads whose job no longer
    exists (logged). For each new call: the job's row if it was claimed without one
    (:mod:`routing.state.claims`; ``row`` in the payload), the exposure
    (first variant wins, :func:`muse_experiments.experiments.services.exposures.exposures_record_many`), the call record
    and its attempts, the job's final state (unless another path already finished the job, except
    a ``worker_lost`` verdict, which the answered call overrides), and the transcript turn. Every
    string goes through :func:`muse_experiments.infra.storage_text.storable` first (PostgreSQL cannot
    store NUL), in both the write-behind drainer and the direct path.
    """
    # the storage boundary: NULs in provider output are stored escaped (muse_experiments.infra.storage_text)
    by_job = {p["job"]["id"]: storable(p) for p in payloads}
    if not by_job:
        return 0
    with transaction.atomic():
        done = dict(CallRecord.objects.filter(job_id__in=list(by_job)).values_list("job_id", "error_kind"))
        done = {str(j): kind for j, kind in done.items()}
        # a call recorded lost (its worker was thought dead, routing.worker.reaper) gives way to its answer
        superseded = [j for j, kind in done.items() if kind == LOST_KIND and not _is_lost(by_job[j])]
        if superseded:
            CallRecord.objects.filter(job_id__in=superseded).delete()
        new = [p for j, p in by_job.items() if j not in done or j in superseded]
        if not new:
            return 0
        # jobs claimed in Redis: their rows first (written running; finished below)
        completion_jobs_insert([_claimed_job(p) for p in new if p.get("row")])
        exposures_record_many(
            exposures=[_exposure_input(p["exposure"]) for p in new if p["exposure"] is not None]
        )
        calls = CallRecord.objects.bulk_create(
            [
                CallRecord(
                    job_id=p["job"]["id"],
                    **{
                        **p["call"],
                        "cost_usd": Decimal(p["call"]["cost_usd"]),
                        "created_at": datetime.fromisoformat(p["call"]["created_at"]),
                    },
                )
                for p in new
            ]
        )
        Attempt.objects.bulk_create(
            Attempt(call=call, number=i, **{**a, "cost_usd": Decimal(a.get("cost_usd") or 0)})
            for call, p in zip(calls, new, strict=True)
            for i, a in enumerate(p["attempts"], start=1)
        )
        completion_jobs_finish([p["job"] for p in new])
        transcript_record_turns(
            turns=[TurnInput(job_id=p["job"]["id"], **p["turn"]) for p in new if p["turn"] is not None]
        )
    return len(new)


def _exposure_input(exposure: Mapping[str, Any]) -> ExposureInput:
    """A payload's exposure; its ISO time parsed (payloads buffered before it was carried lack it)."""
    at = exposure.get("first_exposed_at")
    return ExposureInput(**{**exposure, "first_exposed_at": datetime.fromisoformat(at) if at else None})


#: ``error_kind`` of a call whose attempts died with its worker (:mod:`routing.worker.reaper`).
LOST_KIND = "worker_lost"


def _is_lost(payload: Mapping[str, Any]) -> bool:
    return payload["call"].get("error_kind") == LOST_KIND
