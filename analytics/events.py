"""Recording outcome events (service)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from routing.models import CallRecord

from .models import OutcomeEvent


@dataclass(frozen=True)
class EventInput:
    event_id: str
    name: str
    session_id: str
    user_id: str
    value: float
    occurred_at: datetime


def events_record(*, events: Sequence[EventInput]) -> dict[str, int]:
    """Store new events, skipping ids already stored (and repeats within the batch).

    Returns ``{"accepted", "duplicates", "unknown_units"}``; unknown units (never routed) are
    stored and counted, since their calls may still be in flight.
    """
    unique = {e.event_id: e for e in events}
    existing = set(OutcomeEvent.objects.filter(event_id__in=list(unique)).values_list("event_id", flat=True))
    new = [e for eid, e in unique.items() if eid not in existing]
    OutcomeEvent.objects.bulk_create(
        [
            OutcomeEvent(
                event_id=e.event_id,
                name=e.name,
                session_id=e.session_id,
                user_id=e.user_id,
                value=e.value,
                occurred_at=e.occurred_at,
            )
            for e in new
        ],
        ignore_conflicts=True,
    )
    sessions = {e.session_id for e in new if e.session_id}
    users = {e.user_id for e in new if e.user_id and not e.session_id}
    known_sessions = set(
        CallRecord.objects.filter(session_id__in=sessions).values_list("session_id", flat=True)
    )
    known_users = set(CallRecord.objects.filter(user_id__in=users).values_list("user_id", flat=True))
    unknown = sum(
        1
        for e in new
        if (e.session_id and e.session_id not in known_sessions)
        or (not e.session_id and e.user_id not in known_users)
    )
    return {"accepted": len(new), "duplicates": len(events) - len(new), "unknown_units": unknown}
