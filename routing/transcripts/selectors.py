"""Reads of transcripts, opt-outs and gate metrics."""

from __future__ import annotations

from collections.abc import Iterable

from .models import GateCounter, Provenance, TrainingOptOut, Transcript, TranscriptTurn


def opted_out_users(user_ids: Iterable[str]) -> frozenset[str]:
    """The subset of ``user_ids`` that opted out of training (one query)."""
    ids = set(user_ids)
    if not ids:
        return frozenset()
    return frozenset(TrainingOptOut.objects.filter(user_id__in=ids).values_list("user_id", flat=True))


def user_opted_out(user_id: str) -> bool:
    return TrainingOptOut.objects.filter(user_id=user_id).exists()


def turn_training_eligible(turn: TranscriptTurn) -> bool:
    """Eligible now: served natively, nothing stripped, and the user not opted out at this moment."""
    return (
        turn.provenance == Provenance.NATIVE
        and turn.reasoning_removed == 0
        and not user_opted_out(turn.user_id)
    )


def session_transcript(session_id: str) -> list[TranscriptTurn]:
    """The session's turns in order (empty when the session has none)."""
    return list(TranscriptTurn.objects.filter(transcript__session_id=session_id).order_by("number"))


def transcript_for_session(session_id: str) -> Transcript | None:
    return Transcript.objects.filter(session_id=session_id).first()


def gate_totals() -> dict[str, int]:
    """Running totals of the ingestion gate: ``accepted``, ``duplicate``, ``rejected:<reason>``."""
    return dict(GateCounter.objects.values_list("name", "count"))


def turn_input_messages(turn: TranscriptTurn) -> list:
    """The whole input of a turn, reassembled: the earlier turns' new messages back to the last
    turn that started afresh (``context_messages`` 0), then this turn's (one query for turns
    after the first). Raises ``ValueError`` if the stored chain is inconsistent."""
    if not turn.context_messages:
        return list(turn.input_messages)
    parts = [turn.input_messages]
    earlier = (
        TranscriptTurn.objects.filter(transcript_id=turn.transcript_id, number__lt=turn.number)
        .order_by("-number")
        .values_list("context_messages", "input_messages")
    )
    for context, messages in earlier.iterator():
        parts.append(messages)
        if not context:
            break
    whole = [m for part in reversed(parts) for m in part]
    if len(whole) != turn.context_messages + len(turn.input_messages):
        raise ValueError(f"transcript turn {turn.pk}: stored history does not add up")
    return whole
