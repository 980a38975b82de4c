"""Transcripts of routed sessions, users' training opt-outs, and what the training gate accepted.

Nothing here ever holds encrypted reasoning: :func:`routing.transcripts.services.transcript_record_turn`
scans and strips everything it stores, and the ingestion gate refuses records that carry it.
Provider reasoning needed for multi-turn continuity lives only in :mod:`routing.reasoning_store`.
"""

from __future__ import annotations

import uuid

from django.db import models


class Provenance(models.TextChoices):
    NATIVE = "native", "Native (Avocado)"
    EXTERNAL = "external", "External provider"


class Transcript(models.Model):
    """One session's conversation as served through the proxy: its ordered :class:`TranscriptTurn` s."""

    session_id = models.CharField(max_length=200, unique=True)
    user_id = models.CharField(max_length=200, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The last turn's whole input, by size and digest, so the next turn stores only what is new.
    last_input_count = models.PositiveIntegerField(default=0)
    last_input_digest = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return f"session {self.session_id}"


class TranscriptTurn(models.Model):
    """One served completion of a session.

    * ``input_messages``: the messages NEW in this turn. What the model saw (the client's whole
      history for that call, including tool results posted back) is the previous turn's whole
      input followed by these when ``context_messages`` > 0 (it is the size of that previous
      input), else these alone (first turn, or a client that rewrote its history):
      :func:`routing.transcripts.selectors.turn_input_messages` reassembles it. So storage grows
      with a session's length, not its square. ``tools``: the tools offered;
      ``output_text``/``tool_calls``/``finish_reason``: the public result. Tool results of earlier
      calls are the ``role: tool`` input messages.
    * ``served_model``: endpoint public id; ``model_version``: the catalogue's version label.
    * ``provenance``: native (Avocado) or external, from the serving endpoint's provider kind.
    * ``training_eligible``: native and the user not opted out (kept up to date by the opt-out
      services for turns not yet exported; the export re-checks opt-outs at export time).
    * ``reasoning_removed``: how many encrypted-reasoning carriers were stripped before storing
      (should always be 0; a turn with removals is never exported).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    transcript = models.ForeignKey(Transcript, on_delete=models.CASCADE, related_name="turns")
    number = models.PositiveIntegerField(help_text="1-based position in the session.")
    job_id = models.UUIDField(unique=True, help_text="The completion job this turn recorded.")
    user_id = models.CharField(max_length=200, db_index=True)
    input_messages = models.JSONField(default=list, help_text="Messages new in this turn.")
    context_messages = models.PositiveIntegerField(
        default=0, help_text="How many messages of the input are the previous turn's whole input."
    )
    tools = models.JSONField(default=list)
    output_text = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list)
    finish_reason = models.CharField(max_length=20, blank=True)
    usage = models.JSONField(default=dict)
    served_model = models.CharField(max_length=200)
    model_version = models.CharField(max_length=64, blank=True)
    provider_kind = models.CharField(max_length=20)
    provenance = models.CharField(max_length=10, choices=Provenance.choices)
    experiment_key = models.CharField(max_length=100, blank=True)
    variant_key = models.CharField(max_length=100, blank=True)
    training_eligible = models.BooleanField(default=False)
    reasoning_removed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    exported_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["transcript", "number"]
        constraints = [
            models.UniqueConstraint(fields=["transcript", "number"], name="unique_turn_number_per_transcript")
        ]
        permissions = [("export_training_data", "Can export training data (marks the turns exported)")]

    def __str__(self) -> str:
        return f"{self.transcript_id}#{self.number} {self.served_model}"


class TrainingOptOut(models.Model):
    """A user who opted out of training. Opting back in deletes the row."""

    user_id = models.CharField(max_length=200, unique=True)
    actor = models.CharField(max_length=200, blank=True, help_text="Who recorded the opt-out.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "training opt-out"

    def __str__(self) -> str:
        return f"{self.user_id} opted out"


class TrainingRecord(models.Model):
    """A record the ingestion gate accepted, stored exactly as received (compact JSON text,
    keys in the order sent). Idempotent by ``record_id``."""

    record_id = models.CharField(max_length=200, unique=True)
    user_id = models.CharField(max_length=200, db_index=True)
    body = models.TextField(help_text="The record's compact JSON, unchanged.")
    sha256 = models.CharField(max_length=64)
    ingested_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        permissions = [("ingest_training_data", "Can send training records through the ingestion gate")]

    def __str__(self) -> str:
        return self.record_id


class GateCounter(models.Model):
    """Running totals of the ingestion gate per outcome (``accepted``, ``duplicate``, or a reject reason)."""

    name = models.CharField(max_length=60, unique=True)
    count = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.count}"
