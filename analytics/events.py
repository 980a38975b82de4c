"""Recording outcome events (service) and the rules an event's value and time must meet.

Rules (each refused with a field error, nothing stored):

* ``value`` is a JSON number (not ``true``, not ``"12"``) with ``|value| <=``
  :data:`MAX_EVENT_VALUE` (1e9). The bound keeps every sum the analysis forms finite (a unit's
  sum of squares over a million events stays below 1e33), so an accepted value can never turn a
  metric into ``invalid_input``. An event that feeds a proportion (yes/no) metric must be 0 or 1.
* ``timestamp`` carries a zone (``Z`` or ``+01:00``), is at most :data:`MAX_CLOCK_SKEW`
  (5 minutes) ahead of the server clock, and no earlier than :data:`MAX_EVENT_AGE` (366 days, the
  longest CUPED look-back plus a day) before the earliest started experiment (or now).
* ``event_id`` is unique per source (API key): re-posting the same event is a duplicate; the same
  id with a different body is a conflict (:class:`EventConflict`, HTTP 409).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone

from muse_experiments.experiments.models import Experiment
from routing.models import CallRecord

from .models import MetricDefinition, MetricSource, MetricType, OutcomeEvent

#: Largest accepted ``|value|`` of an outcome event.
MAX_EVENT_VALUE = 1e9
#: How far ahead of the server clock an event's timestamp may be.
MAX_CLOCK_SKEW = timedelta(minutes=5)
#: How far before the earliest started experiment an event may be (CUPED looks back ≤ 365 days).
MAX_EVENT_AGE = timedelta(days=366)


@dataclass(frozen=True)
class EventInput:
    """One event as posted: ``value`` a finite float, ``occurred_at`` zone-aware; ``body`` the posted
    fields (for the conflict digest)."""

    event_id: str
    name: str
    session_id: str
    user_id: str
    value: float
    occurred_at: datetime
    body: Mapping[str, Any] | None = None

    @property
    def digest(self) -> str:
        body = (
            self.body
            if self.body is not None
            else {
                "name": self.name,
                "session_id": self.session_id,
                "user_id": self.user_id,
                "value": self.value,
                "timestamp": self.occurred_at.isoformat(),
            }
        )
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()


class EventConflict(Exception):
    """Event ids already stored for this source with a different body; ``ids`` lists them."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = list(ids)
        super().__init__(
            "event_id used with a different body (already stored for this source, or repeated in this "
            f"batch): {', '.join(self.ids[:20])}"
        )


def earliest_event_time(now: datetime | None = None) -> datetime:
    """The earliest timestamp an event may carry (see the module rules)."""
    now = now or timezone.now()
    first = Experiment.objects.filter(started_at__isnull=False).aggregate(first=Min("started_at"))["first"]
    return min(first or now, now) - MAX_EVENT_AGE


def yes_no_event_names(names: Iterable[str]) -> set[str]:
    """The event names among ``names`` that feed a proportion (yes/no) metric: values must be 0 or 1."""
    return set(
        MetricDefinition.objects.filter(
            source=MetricSource.EVENT, metric_type=MetricType.PROPORTION, event_name__in=set(names)
        ).values_list("event_name", flat=True)
    )


def events_record(*, events: Sequence[EventInput], source: str = "") -> dict[str, int]:
    """Store new events of one source, skipping ids it already stored with the same body (and
    repeats within the batch). Call inside a transaction.

    Returns ``{"accepted", "duplicates", "unknown_units"}``; unknown units (never routed) are
    stored and counted, since their calls may still be in flight. Concurrent requests carrying the
    same id: the first to commit stores it; the others' inserts fail on the unique constraint
    (after waiting for that commit) and are classified again against what it stored, so exactly
    one reports the id accepted and a different body is a conflict.

    Raises:
        EventConflict: an id already stored (or repeated in the batch) with a different body;
            nothing is stored.
    """
    for _ in range(_RACE_RETRIES):
        try:
            with transaction.atomic():  # a savepoint: a lost race leaves the caller's transaction usable
                return _events_record_once(events=events, source=source)
        except IntegrityError:
            continue  # a concurrent request committed some of these ids first: look again
    return _events_record_once(events=events, source=source)


#: How often :func:`events_record` re-classifies a batch after losing a race on an id.
_RACE_RETRIES = 3


def _events_record_once(*, events: Sequence[EventInput], source: str) -> dict[str, int]:
    unique: dict[str, EventInput] = {}
    conflicts: list[str] = []
    for e in events:
        seen = unique.setdefault(e.event_id, e)
        if seen is not e and seen.digest != e.digest:
            conflicts.append(e.event_id)
    stored = dict(
        OutcomeEvent.objects.filter(source=source, event_id__in=list(unique)).values_list(
            "event_id", "body_sha256"
        )
    )
    conflicts += [eid for eid, digest in stored.items() if digest and digest != unique[eid].digest]
    if conflicts:
        raise EventConflict(sorted(set(conflicts)))
    new = [e for eid, e in unique.items() if eid not in stored]
    OutcomeEvent.objects.bulk_create(
        [
            OutcomeEvent(
                source=source,
                event_id=e.event_id,
                body_sha256=e.digest,
                name=e.name,
                session_id=e.session_id,
                user_id=e.user_id,
                value=e.value,
                occurred_at=e.occurred_at,
            )
            for e in new
        ],
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
