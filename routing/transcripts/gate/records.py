"""The training-data ingestion gate over records: :func:`check_record` for one, :func:`gate_check`
for a batch (:class:`GateReport`: a :class:`RecordVerdict` each and counts per
:class:`~routing.transcripts.gate.markers.RejectReason`). See :mod:`routing.transcripts.gate`
for a record's fields."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from muse_experiments.experiments.validation import unit_id_problem

from .detector import find_encrypted_reasoning
from .markers import MAX_RECORD_BYTES, Finding, RejectReason


@dataclass(frozen=True)
class RecordVerdict:
    """The gate's answer for record number ``index`` (0-based position in the batch).

    ``record_id`` is the record's id when it has a valid one; ``reasons`` empty means accepted;
    ``detail`` is a short human explanation that never contains record content.
    """

    index: int
    record_id: str | None
    reasons: tuple[str, ...] = ()
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class GateReport:
    """Result of :func:`gate_check`: one verdict per record in batch order, and the accepted
    records (the very objects passed in, unchanged) with their compact JSON text."""

    verdicts: tuple[RecordVerdict, ...]
    accepted: tuple[tuple[RecordVerdict, Mapping[str, Any], str], ...] = field(default=())

    @property
    def rejected(self) -> tuple[RecordVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.accepted)

    @property
    def counts(self) -> dict[str, int]:
        """``{"received", "accepted", "rejected", <reason>: n, ...}``; a record with several
        reasons counts once under each."""
        reasons = Counter(r for v in self.verdicts for r in v.reasons)
        return {
            "received": len(self.verdicts),
            "accepted": len(self.accepted),
            "rejected": len(self.rejected),
            **dict(sorted(reasons.items())),
        }


def record_json(record: Mapping[str, Any]) -> str:
    """The canonical stored form of a record: compact JSON, keys in the order received, UTF-8."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_record(
    index: int,
    record: Any,
    *,
    opted_out_users: Container[str] = frozenset(),
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> tuple[RecordVerdict, str | None]:
    """Verdict for one record, and its canonical JSON when it could be serialised (the rules of
    :func:`gate_check` but the in-batch duplicate check)."""
    if not isinstance(record, Mapping):
        return RecordVerdict(
            index,
            None,
            (RejectReason.INVALID_RECORD,),
            f"record must be a JSON object, not {type(record).__name__}",
        ), None
    rid = record.get("record_id")
    record_id = rid if isinstance(rid, str) and 0 < len(rid) <= 200 else None
    problems = []
    if record_id is None:
        problems.append("record_id must be a non-empty string of at most 200 characters")
    for name, required in (("user_id", True), ("session_id", False)):
        unit = record.get(name)
        if unit is None and not required:
            continue
        if not isinstance(unit, str):
            problems.append(f"{name} must be a string")
        elif problem := unit_id_problem(unit):
            problems.append(f"{name}: {problem}")
    if not isinstance(record.get("provenance"), str):
        problems.append("provenance must be a string ('native' or an external provider)")
    try:
        text = record_json(record)
    except (TypeError, ValueError, RecursionError):
        reasons = [RejectReason.INVALID_RECORD]
        if find_encrypted_reasoning(record):  # iterative: works where serialisation gave up
            reasons.append(RejectReason.CONTAINS_ENCRYPTED_REASONING)
        return RecordVerdict(index, record_id, tuple(reasons), "record is not serialisable JSON"), None
    if len(text.encode()) > max_record_bytes:
        return RecordVerdict(
            index, record_id, (RejectReason.RECORD_TOO_LARGE,), f"record exceeds {max_record_bytes} bytes"
        ), None
    reasons: list[str] = []
    details: list[str] = []
    if problems:
        reasons.append(RejectReason.INVALID_RECORD)
        details += problems
    try:
        findings = find_encrypted_reasoning(record, opaque_blobs=True)
    except RecursionError:  # json.loads of a pathological string; refuse rather than guess
        findings = [Finding("", "undecodable")]
    opaque = [f for f in findings if f.kind == "opaque_blob"]
    findings = [f for f in findings if f.kind != "opaque_blob"]
    if findings:
        reasons.append(RejectReason.CONTAINS_ENCRYPTED_REASONING)
        kinds = sorted({f.kind for f in findings})
        details.append(f"encrypted reasoning at {len(findings)} place(s): {', '.join(kinds)}")
    if opaque and not findings:  # the blob of a marked reasoning carrier is opaque too: one reason
        reasons.append(RejectReason.CONTAINS_OPAQUE_BLOB)
        details.append(f"opaque encoded blob (unscannable binary) at {len(opaque)} place(s)")
    provenance = record.get("provenance")
    provider_kind = record.get("provider_kind", "native")
    if isinstance(provenance, str) and (provenance != "native" or provider_kind != "native"):
        reasons.append(RejectReason.EXTERNAL_PROVIDER)
        details.append("served by an external provider")
    if record.get("shadow") is not None and record.get("shadow") is not False:
        # a shadow test's answer (routing.shadow) was never served to anyone: never trained on
        reasons.append(RejectReason.SHADOW_CALL)
        details.append("a shadow test's answer, never served")
    user = record.get("user_id")
    if isinstance(user, str) and user in opted_out_users:
        reasons.append(RejectReason.OPTED_OUT)
        details.append("user opted out of training")
    return RecordVerdict(index, record_id, tuple(reasons), "; ".join(details)), text


def gate_check(
    records: Iterable[Any],
    *,
    opted_out_users: Container[str] = frozenset(),
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> GateReport:
    """Validate a batch of training records.

    ``opted_out_users``: user ids whose records are refused (the caller looks them up).
    A record is rejected when it is not a valid record object (:attr:`RejectReason.INVALID_RECORD`),
    is larger than ``max_record_bytes`` (compact JSON, bytes), carries encrypted reasoning
    anywhere, contains an opaque blob (:attr:`RejectReason.CONTAINS_OPAQUE_BLOB`: a run of
    base64, base64url, wrapped base64, hex, base32 or base85 that decodes to at least
    :data:`MIN_OPAQUE_BYTES` bytes of random-looking binary, not text: :func:`opaque_blob`; such
    as a bare Anthropic signature with no marker near it -- an opaque blob cannot be scanned,
    so it is refused, as a value too deeply encoded already is; reported only when the record
    has no encrypted-reasoning finding, whose blobs are opaque too), came from an external provider
    (``provenance != "native"`` or a non-native ``provider_kind``), belongs to an opted-out
    user, is a shadow test's answer (``shadow`` present and not ``false``:
    :attr:`RejectReason.SHADOW_CALL`), or repeats a ``record_id`` seen earlier in the same batch. Never raises for bad
    records; each gets its own verdict.
    """
    verdicts: list[RecordVerdict] = []
    accepted: list[tuple[RecordVerdict, Mapping[str, Any], str]] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        verdict, text = check_record(
            index, record, opted_out_users=opted_out_users, max_record_bytes=max_record_bytes
        )
        if verdict.record_id is not None:
            if verdict.record_id in seen:
                verdict = RecordVerdict(
                    index,
                    verdict.record_id,
                    (*verdict.reasons, RejectReason.DUPLICATE_IN_BATCH),
                    "; ".join(filter(None, [verdict.detail, "record_id repeated in this batch"])),
                )
            seen.add(verdict.record_id)
        verdicts.append(verdict)
        if verdict.accepted and text is not None:
            accepted.append((verdict, record, text))
    return GateReport(verdicts=tuple(verdicts), accepted=tuple(accepted))
