"""Transcript, opt-out and training-ingestion writes.

* :func:`transcript_record_turns` -- called by the router's record step (in bulk, one transaction);
  :func:`transcript_record_turn` records one.
* :func:`training_opt_out` / :func:`training_opt_in` -- a user's training consent.
* :func:`training_records_ingest` -- the ingestion gate's write side.
* :func:`api_session_end` -- a caller ends one of its sessions (``POST /api/v1/sessions/{id}/end``).

Training export (which marks turns exported) is in :mod:`routing.transcripts.export`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max
from django.utils import timezone

from muse_experiments.infra import bulk_sql
from muse_experiments.infra.storage_text import storable
from routing.reasoning_store import OwnedSession, session_end, session_owner
from routing.selectors import catalogue, session_started

from .gate import GateReport, RecordVerdict, RejectReason, gate_check, strip_encrypted_reasoning
from .models import GateCounter, Provenance, TrainingOptOut, TrainingRecord, Transcript, TranscriptTurn
from .selectors import opted_out_users

log = logging.getLogger(__name__)


def provenance_for(provider_kind: str) -> str:
    """``native`` for the Avocado inference service, ``external`` for every other provider kind."""
    return Provenance.NATIVE if provider_kind == "native" else Provenance.EXTERNAL


@dataclass(frozen=True)
class TurnInput:
    """One finished job's turn, as :func:`transcript_record_turns` stores it.

    ``request``: the job's normalised request (``messages``, ``tools``). ``result_public``: the
    result's ``to_public_dict()`` (``text``, ``tool_calls``, ``finish_reason``, ``usage``).
    ``provider_kind``: the serving endpoint's provider kind, which sets the provenance.
    """

    job_id: Any
    session_id: str
    user_id: str
    request: Mapping[str, Any]
    served_endpoint_public_id: str
    provider_kind: str
    result_public: Mapping[str, Any]
    experiment_key: str | None = None
    variant_key: str | None = None


def transcript_record_turn(
    *,
    job: Any,
    served_endpoint_public_id: str,
    provider_kind: str,
    result_public: Mapping[str, Any] | None,
    experiment_key: str | None,
    variant_key: str | None,
) -> TranscriptTurn | None:
    """Append the turn a finished job produced to its session's transcript (one turn of
    :func:`transcript_record_turns`).

    ``job``: the :class:`routing.models.CompletionJob` (``id``, ``session_id``, ``user_id``,
    ``request`` with ``messages``/``tools``). ``result_public``: ``None`` (a failed job) records
    nothing. Returns the turn (the existing one for a job already recorded), or ``None``.
    """
    if result_public is None:
        return None
    turn = TurnInput(
        job_id=job.id,
        session_id=job.session_id,
        user_id=job.user_id,
        request=job.request or {},
        served_endpoint_public_id=served_endpoint_public_id,
        provider_kind=provider_kind,
        result_public=result_public,
        experiment_key=experiment_key,
        variant_key=variant_key,
    )
    transcript_record_turns(turns=[turn])
    return TranscriptTurn.objects.filter(job_id=job.id).first()


def transcript_record_turns(*, turns: Sequence[TurnInput]) -> int:
    """Append finished jobs' turns to their sessions' transcripts, in the given order.

    Everything stored is scanned for encrypted reasoning first and stripped if any is found
    (counted in ``reasoning_removed``, logged without content; such a turn is never exported).
    Idempotent per job: a job that already has a turn is skipped, so replaying a batch changes
    nothing. One transaction (the caller's, or its own); a fixed number of queries per batch: the
    transcripts are created if missing and locked (in primary-key order, so concurrent batches
    cannot deadlock), turns are numbered after each transcript's last one. Returns how many turns
    were created.
    """
    turns = list(turns)
    if not turns:
        return 0
    existing = {
        str(j)
        for j in TranscriptTurn.objects.filter(job_id__in=[t.job_id for t in turns]).values_list(
            "job_id", flat=True
        )
    }
    fresh: dict[str, TurnInput] = {}
    for t in turns:
        if str(t.job_id) not in existing:
            fresh.setdefault(str(t.job_id), t)
    if not fresh:
        return 0
    sessions = {t.session_id: t.user_id for t in fresh.values()}
    cat = catalogue()
    with transaction.atomic():
        opted_out = opted_out_users({t.user_id for t in fresh.values()})
        Transcript.objects.bulk_create(
            [Transcript(session_id=s, user_id=u) for s, u in sessions.items()], ignore_conflicts=True
        )
        transcripts = {
            t.session_id: t
            for t in Transcript.objects.select_for_update()
            .filter(session_id__in=list(sessions))
            .order_by("pk")
        }
        last = dict(
            TranscriptTurn.objects.filter(transcript__in=list(transcripts.values()))
            .order_by()
            .values_list("transcript_id")
            .annotate(n=Max("number"))
        )
        rows = []
        for t in fresh.values():
            transcript = transcripts[t.session_id]
            last[transcript.pk] = number = (last.get(transcript.pk) or 0) + 1
            rows.append(
                _turn_row(t, transcript=transcript, number=number, opted_out=t.user_id in opted_out, cat=cat)
            )
        TranscriptTurn.objects.bulk_create(rows)
        _transcripts_advance(list(transcripts.values()), now=timezone.now())
    return len(rows)


def _transcripts_advance(transcripts: Sequence[Transcript], *, now: Any) -> None:
    """Store each transcript's ``last_input_count``/``last_input_digest`` and ``updated_at``.

    One ``UPDATE`` for the batch (:func:`muse_experiments.infra.bulk_sql.update_from_values`; one per
    transcript was the drain's largest cost with many sessions per batch, and Django's
    ``bulk_update`` builds a CASE per row and field); one per transcript where not supported.
    """
    if not bulk_sql.supported():
        for transcript in transcripts:
            Transcript.objects.filter(pk=transcript.pk).update(
                updated_at=now,
                last_input_count=transcript.last_input_count,
                last_input_digest=transcript.last_input_digest,
            )
        return
    stamp = connection.ops.adapt_datetimefield_value(now)
    bulk_sql.update_from_values(
        Transcript._meta.db_table,
        columns=[("id", "bigint"), ("n", "integer"), ("digest", "text"), ("at", "timestamptz")],
        rows=[(t.pk, t.last_input_count, t.last_input_digest, stamp) for t in transcripts],
        assign="updated_at = v.at, last_input_count = v.n, last_input_digest = v.digest",
        where="x.id = v.id",
    )


def messages_digest(messages: Sequence[Any]) -> str:
    """SHA-256 of a message list's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(
        json.dumps(list(messages), sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _turn_row(
    t: TurnInput, *, transcript: Transcript, number: int, opted_out: bool, cat: Any
) -> TranscriptTurn:
    """The unsaved turn for ``t``: encrypted reasoning stripped, provenance and eligibility set,
    only the messages that are new since the transcript's last turn kept (``transcript``'s
    ``last_input_*`` move on to this turn's whole input)."""
    result_public = t.result_public
    stored = {
        "input_messages": list(t.request.get("messages") or []),
        "tools": list(t.request.get("tools") or []),
        "output_text": result_public.get("text") or "",
        "tool_calls": list(result_public.get("tool_calls") or []),
        "usage": dict(result_public.get("usage") or {}),
    }
    clean, removed = strip_encrypted_reasoning(storable(stored))
    if removed:
        log.warning(
            "transcript turn of job %s: removed %d encrypted-reasoning carrier(s) before storing",
            t.job_id,
            removed,
        )
    info = cat.get(t.served_endpoint_public_id)
    provenance = provenance_for(t.provider_kind)
    whole = clean["input_messages"]
    context = transcript.last_input_count
    if not (
        context and len(whole) >= context and messages_digest(whole[:context]) == transcript.last_input_digest
    ):
        context = 0  # first turn, or the client rewrote its history: store it whole
    transcript.last_input_count, transcript.last_input_digest = len(whole), messages_digest(whole)
    return TranscriptTurn(
        transcript=transcript,
        number=number,
        job_id=t.job_id,
        user_id=t.user_id,
        input_messages=whole[context:],
        context_messages=context,
        tools=clean["tools"],
        output_text=clean["output_text"],
        tool_calls=clean["tool_calls"],
        finish_reason=str(result_public.get("finish_reason") or "")[:20],
        usage=clean["usage"],
        served_model=t.served_endpoint_public_id,
        model_version=info.version_label if info else "",
        provider_kind=t.provider_kind,
        provenance=provenance,
        experiment_key=t.experiment_key or "",
        variant_key=t.variant_key or "",
        training_eligible=provenance == Provenance.NATIVE and not opted_out and not removed,
        reasoning_removed=removed,
    )


@transaction.atomic
def training_opt_out(*, user_id: str, actor: str) -> tuple[TrainingOptOut, int]:
    """Opt ``user_id`` out of training. Idempotent.

    Every turn of the user not yet exported becomes ineligible. Returns ``(opt_out, n_turns)``
    where ``n_turns`` is how many unexported turns were marked ineligible.
    """
    opt_out, _ = TrainingOptOut.objects.get_or_create(user_id=user_id, defaults={"actor": actor})
    n = TranscriptTurn.objects.filter(
        user_id=user_id, exported_at__isnull=True, training_eligible=True
    ).update(training_eligible=False)
    log.info(
        "user %s opted out of training by %s (%d unexported turns made ineligible)",
        user_id,
        actor or "system",
        n,
    )
    return opt_out, n


@transaction.atomic
def training_opt_in(*, user_id: str, actor: str) -> int:
    """Withdraw ``user_id``'s opt-out. Idempotent.

    Their unexported native turns without removed reasoning become eligible again. Returns
    how many turns became eligible.
    """
    TrainingOptOut.objects.filter(user_id=user_id).delete()
    n = TranscriptTurn.objects.filter(
        user_id=user_id,
        exported_at__isnull=True,
        provenance=Provenance.NATIVE,
        reasoning_removed=0,
        training_eligible=False,
    ).update(training_eligible=True)
    log.info(
        "user %s opted back in to training by %s (%d turns eligible again)", user_id, actor or "system", n
    )
    return n


def gate_counters_add(counts: Mapping[str, int]) -> None:
    """Add ``counts`` (outcome name -> n) to the gate's running totals (atomic increments)."""
    for name, n in counts.items():
        if not n:
            continue
        updated = GateCounter.objects.filter(name=name).update(count=F("count") + n)
        if not updated:
            try:
                with transaction.atomic():
                    GateCounter.objects.create(name=name, count=n)
            except IntegrityError:  # created concurrently
                GateCounter.objects.filter(name=name).update(count=F("count") + n)


@dataclass(frozen=True)
class IngestOutcome:
    """Per-record status (``accepted``, ``duplicate`` or ``rejected``) with reasons, and totals."""

    report: GateReport
    statuses: tuple[tuple[RecordVerdict, str], ...]

    @property
    def counts(self) -> dict[str, int]:
        statuses = [s for _, s in self.statuses]
        rejected_by_reason: dict[str, int] = {}
        for verdict, _ in self.statuses:
            for reason in verdict.reasons:
                rejected_by_reason[reason] = rejected_by_reason.get(reason, 0) + 1
        return {
            "received": len(statuses),
            "accepted": statuses.count("accepted"),
            "duplicates": statuses.count("duplicate"),
            "rejected": statuses.count("rejected"),
            "rejected_by_reason": dict(sorted(rejected_by_reason.items())),
        }


def training_records_ingest(*, records: Iterable[Any]) -> IngestOutcome:
    """Run a batch through the gate and store the accepted records unchanged.

    Rejected records are not stored. A ``record_id`` already stored with the same content is a
    ``duplicate`` (accepted, not stored twice); with different content it is rejected
    (``record_id_conflict``). Counts are added to :class:`GateCounter`. One transaction.
    """
    records = list(records)
    user_ids = {r["user_id"] for r in records if isinstance(r, Mapping) and isinstance(r.get("user_id"), str)}
    report = gate_check(records, opted_out_users=opted_out_users(user_ids))
    accepted = {v.index: (v, text) for v, _, text in report.accepted}
    with transaction.atomic():
        stored = dict(
            TrainingRecord.objects.filter(
                record_id__in=[v.record_id for v, _ in accepted.values()]
            ).values_list("record_id", "sha256")
        )
        statuses: list[tuple[RecordVerdict, str]] = []
        new: list[TrainingRecord] = []
        for verdict in report.verdicts:
            if verdict.index not in accepted:
                statuses.append((verdict, "rejected"))
                continue
            _, text = accepted[verdict.index]
            digest = hashlib.sha256(text.encode()).hexdigest()
            if verdict.record_id in stored:
                if stored[verdict.record_id] == digest:
                    statuses.append((verdict, "duplicate"))
                else:
                    conflict = RecordVerdict(
                        verdict.index,
                        verdict.record_id,
                        ("record_id_conflict",),
                        "a different record with this record_id was already accepted",
                    )
                    statuses.append((conflict, "rejected"))
                continue
            user_id = records[verdict.index]["user_id"]
            new.append(TrainingRecord(record_id=verdict.record_id, user_id=user_id, body=text, sha256=digest))
            statuses.append((verdict, "accepted"))
        TrainingRecord.objects.bulk_create(new, ignore_conflicts=True)
        outcome = IngestOutcome(report=report, statuses=tuple(statuses))
        counts = outcome.counts
        gate_counters_add(
            {
                "accepted": counts["accepted"],
                "duplicate": counts["duplicates"],
                **{f"rejected:{k}": n for k, n in counts["rejected_by_reason"].items()},
            }
        )
    log.info(
        "training ingest: %d received, %d accepted, %d duplicates, %d rejected %s",
        counts["received"],
        counts["accepted"],
        counts["duplicates"],
        counts["rejected"],
        counts["rejected_by_reason"],
    )
    return outcome


__all__ = [
    "IngestOutcome",
    "RejectReason",
    "gate_counters_add",
    "provenance_for",
    "training_opt_in",
    "training_opt_out",
    "training_records_ingest",
    "transcript_record_turn",
    "transcript_record_turns",
]


class SessionNotFound(Exception):
    """The caller never started a session with this id (the API answers 404). The message names
    the session id only."""


def api_session_end(*, api_key_id: int | None, session_id: str) -> int:
    """End the caller's session ``session_id``: delete the encrypted reasoning stored for it under
    the caller's owner (:func:`routing.reasoning_store.session_owner`: the API key ``api_key_id``,
    or the keyless source for ``None``). Returns how many states were deleted.

    Another owner's session with the same id is never touched. Raises :class:`SessionNotFound`
    when the caller has no stored state for the id and no completion job of it
    (:func:`routing.selectors.session_started`): a session this caller never started, whoever
    else did. Raises :class:`routing.reasoning_store.ReasoningStoreUnavailable` when the store
    cannot be reached.
    """
    session = OwnedSession(owner=session_owner(api_key_id=api_key_id), session_id=session_id)
    deleted = session_end(session=session)
    if deleted or session_started(api_key_id=api_key_id, session_id=session_id):
        return deleted
    started_by = "without an API key" if api_key_id is None else "with this API key"
    raise SessionNotFound(f"No session {session_id!r} was started {started_by}.")
