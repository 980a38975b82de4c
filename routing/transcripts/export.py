"""Training export: eligible transcript turns as JSONL, streamed, with a manifest.

One line per turn (a *training record*, the shape the ingestion gate accepts)::

    {"record_id": "<turn uuid>", "session_id", "turn": 1, "user_id", "provenance": "native",
     "provider_kind": "native", "served_model", "model_version", "experiment", "variant",
     "created_at": "<ISO 8601>", "input": {"messages": [...], "tools": [...]},
     "output": {"text", "tool_calls": [...], "finish_reason"}, "usage": {...}}

A turn is exported when it is not exported yet, lies in ``[since, until)`` (``created_at``),
matches ``model_version`` (the catalogue version label or the endpoint public id) when given,
and is eligible *at export time*: served natively, its user not opted out now, and free of
encrypted reasoning (re-checked with the gate's detector). Everything else in the range is
counted in the manifest's ``excluded`` by reason (``external_provider``, ``opted_out``,
``contains_encrypted_reasoning``, ``contains_opaque_blob``: the gate's opaque-blob rule; a turn
counts under its first reason in that order).

Usage::

    export = TrainingExport(since=..., until=..., model_version=None)
    for line in export.records(): ...      # JSONL lines, queryset.iterator(): nothing buffered
    export.commit()                        # marks the exported turns (exported_at), one transaction
    export.manifest                        # counts

Only the ids of exported turns are kept in memory (for :meth:`TrainingExport.commit`). If the
consumer stops early nothing is marked, so the export can simply be run again. Two exports of
the same range running at once may both emit a turn; run one at a time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .gate import RejectReason, check_record
from .models import Provenance, TrainingOptOut, TranscriptTurn
from .selectors import turn_input_messages

log = logging.getLogger(__name__)

FORMAT = "muse-training-jsonl/1"
EXCLUSION_REASONS = ("external_provider", "opted_out", "contains_encrypted_reasoning", "contains_opaque_blob")
CHUNK = 500


def turn_record(turn: TranscriptTurn, input_messages: list[Any] | None = None) -> dict[str, Any]:
    """The training record of one turn (see the module docstring for the shape).

    ``input_messages``: the turn's whole input if the caller already reassembled it, else it is
    reassembled here (:func:`turn_input_messages`)."""
    if input_messages is None:
        input_messages = turn_input_messages(turn)
    return {
        "record_id": str(turn.id),
        "session_id": turn.transcript.session_id,
        "turn": turn.number,
        "user_id": turn.user_id,
        "provenance": turn.provenance,
        "provider_kind": turn.provider_kind,
        "served_model": turn.served_model,
        "model_version": turn.model_version,
        "experiment": turn.experiment_key,
        "variant": turn.variant_key,
        "created_at": turn.created_at.isoformat(),
        "input": {"messages": input_messages, "tools": turn.tools},
        "output": {
            "text": turn.output_text,
            "tool_calls": turn.tool_calls,
            "finish_reason": turn.finish_reason,
        },
        "usage": turn.usage,
    }


class _Histories:
    """Whole inputs of the last exported turn of recently seen sessions (at most :data:`KEEP`),
    so a session's turns, exported in order, are reassembled from the previous one instead of
    from the database each time."""

    KEEP = 256

    def __init__(self) -> None:
        self._last: dict[Any, tuple[int, list[Any]]] = {}

    def input_of(self, turn: TranscriptTurn) -> list[Any]:
        cached = self._last.pop(turn.transcript_id, None)
        if cached and cached[0] == turn.number - 1 and turn.context_messages == len(cached[1]):
            whole = cached[1] + list(turn.input_messages)
        else:
            whole = turn_input_messages(turn)
        self._last[turn.transcript_id] = (turn.number, whole)
        if len(self._last) > self.KEEP:
            self._last.pop(next(iter(self._last)))
        return whole


class TrainingExport:
    """One export run over ``[since, until)`` (aware datetimes or ``None`` = open) for an
    optional ``model_version``. Not thread-safe; iterate :meth:`records` once."""

    def __init__(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        model_version: str | None = None,
    ) -> None:
        self.since, self.until, self.model_version = since, until, model_version or None
        self.exported_ids: list[Any] = []
        self.considered = 0
        self.excluded = dict.fromkeys(EXCLUSION_REASONS, 0)
        self.marked = 0
        self.complete = False
        self.committed = False
        self._histories = _Histories()

    def queryset(self):
        qs = TranscriptTurn.objects.filter(exported_at__isnull=True)
        if self.since is not None:
            qs = qs.filter(created_at__gte=self.since)
        if self.until is not None:
            qs = qs.filter(created_at__lt=self.until)
        if self.model_version:
            qs = qs.filter(Q(model_version=self.model_version) | Q(served_model=self.model_version))
        return (
            qs.select_related("transcript")
            .annotate(opted_out=Exists(TrainingOptOut.objects.filter(user_id=OuterRef("user_id"))))
            .order_by("created_at", "id")
        )

    def _exclusion(self, turn: TranscriptTurn) -> str | None:
        if turn.provenance != Provenance.NATIVE or turn.provider_kind != "native":
            return "external_provider"
        if turn.opted_out:
            return "opted_out"
        if turn.reasoning_removed:
            return "contains_encrypted_reasoning"
        return None

    def records(self) -> Iterator[str]:
        """Yield one JSONL line (``\\n``-terminated) per eligible turn, streaming from the database."""
        for turn in self.queryset().iterator(chunk_size=CHUNK):
            self.considered += 1
            reason = self._exclusion(turn)
            text = None
            if reason is None:
                verdict, text = check_record(0, turn_record(turn, self._histories.input_of(turn)))
                if verdict.reasons == (RejectReason.CONTAINS_OPAQUE_BLOB,):  # user content the gate refuses
                    reason = "contains_opaque_blob"
                    log.warning("transcript turn %s holds an opaque blob: %s", turn.id, verdict.detail)
                elif not verdict.accepted:  # defence in depth: the writer should have stripped it
                    reason = "contains_encrypted_reasoning"
                    log.error("transcript turn %s failed the export gate: %s", turn.id, verdict.detail)
            if reason is not None:
                self.excluded[reason] += 1
                continue
            self.exported_ids.append(turn.id)
            yield text + "\n"
        self.complete = True

    def commit(self) -> int:
        """Mark every turn yielded by a completed :meth:`records` as exported (one transaction).

        Returns how many turns were marked. Raises ``RuntimeError`` if the records were not all read.
        """
        if not self.complete:
            raise RuntimeError("export not read to the end; nothing marked")
        now = timezone.now()
        with transaction.atomic():
            for start in range(0, len(self.exported_ids), CHUNK):
                self.marked += TranscriptTurn.objects.filter(
                    pk__in=self.exported_ids[start : start + CHUNK], exported_at__isnull=True
                ).update(exported_at=now)
        self.committed = True
        log.info("training export: %d records, excluded %s", len(self.exported_ids), self.excluded)
        return self.marked

    @property
    def manifest(self) -> dict[str, Any]:
        """``{"format", "generated_at", "filters", "considered", "records", "excluded": {reason: n},
        "marked_exported"}``."""
        return {
            "format": FORMAT,
            "generated_at": timezone.now().isoformat(),
            "filters": {
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None,
                "model_version": self.model_version,
            },
            "considered": self.considered,
            "records": len(self.exported_ids),
            "excluded": dict(self.excluded),
            "marked_exported": self.marked,
        }

    def lines(self, *, mark_exported: bool = True) -> Iterator[str]:
        """Records, then (when read to the end) the commit, then a last line ``{"manifest": {...}}``."""
        yield from self.records()
        if mark_exported:
            self.commit()
        yield json.dumps({"manifest": self.manifest}) + "\n"
