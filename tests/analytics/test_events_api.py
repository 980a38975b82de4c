"""Outcome events: single or batch, idempotent by event id, unknown units reported, bad input 400."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from analytics.models import OutcomeEvent
from tests.factories import api_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def client():
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['events'])}")
    return c


def event(i: int, **extra):
    return {"event_id": f"e-{i}", "name": "task_success", "session_id": f"s-{i}", "value": 1, **extra}


def test_a_single_event_is_stored_and_its_unknown_unit_reported(client):
    response = client.post("/api/v1/events", event(1), format="json")
    assert response.status_code == 201
    assert response.json() == {"accepted": 1, "duplicates": 0, "unknown_units": 1}
    stored = OutcomeEvent.objects.get(event_id="e-1")
    assert (stored.name, stored.session_id, stored.value) == ("task_success", "s-1", 1.0)


def test_reposting_a_batch_stores_each_event_once(client):
    batch = {"events": [event(i) for i in range(5)] + [event(0)]}
    first = client.post("/api/v1/events", batch, format="json").json()
    second = client.post("/api/v1/events", batch, format="json").json()
    assert first["accepted"] == 5 and first["duplicates"] == 1
    assert second == {"accepted": 0, "duplicates": 6, "unknown_units": 0}
    assert OutcomeEvent.objects.count() == 5


def test_batches_over_1000_events_are_refused_whole(client):
    response = client.post("/api/v1/events", {"events": [event(i) for i in range(1001)]}, format="json")
    assert response.status_code == 400
    assert OutcomeEvent.objects.count() == 0


def test_an_event_without_a_unit_is_a_field_error(client):
    response = client.post("/api/v1/events", {"event_id": "x", "name": "rating", "value": 4}, format="json")
    assert response.status_code == 400
    assert "session_id" in response.json()["error"]["fields"]["events"]["0"]


def test_a_bad_event_in_a_batch_stores_nothing(client):
    batch = {"events": [event(1), event(2, value="high")]}
    response = client.post("/api/v1/events", batch, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["events"]["1"] == {
        "value": ["Must be a JSON number (not a string or a boolean)."]
    }
    assert OutcomeEvent.objects.count() == 0


def test_an_event_timestamp_far_in_the_future_is_a_field_error(client):
    response = client.post("/api/v1/events", event(1, timestamp="3000-01-01T00:00:00Z"), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["events"]["0"] == {"timestamp": ["Timestamp is in the future."]}
    assert OutcomeEvent.objects.count() == 0


# --------------------------------------------------------------------------- hostile input


def keyed_client(scopes=("events",)):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(list(scopes))}")
    return c


def test_event_ids_are_scoped_per_api_key():
    a, b = keyed_client(), keyed_client()
    assert a.post("/api/v1/events", event(1), format="json").json()["accepted"] == 1
    response = b.post("/api/v1/events", event(1, session_id="other"), format="json")
    assert response.status_code == 201 and response.json() == {
        "accepted": 1,
        "duplicates": 0,
        "unknown_units": 1,
    }
    assert sorted(OutcomeEvent.objects.values_list("session_id", flat=True)) == ["other", "s-1"]


def test_the_same_id_with_a_different_body_is_a_conflict_and_stores_nothing(client):
    assert client.post("/api/v1/events", event(1), format="json").status_code == 201
    assert client.post("/api/v1/events", event(1), format="json").json()["duplicates"] == 1  # same body
    response = client.post("/api/v1/events", {"events": [event(2), event(1, value=0)]}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "event_id_conflict" and response.json()["error"][
        "event_ids"
    ] == ["e-1"]
    assert list(OutcomeEvent.objects.values_list("event_id", "value")) == [("e-1", 1.0)]
    response = client.post("/api/v1/events", {"events": [event(3), event(3, value=0)]}, format="json")
    assert response.status_code == 409 and not OutcomeEvent.objects.filter(event_id="e-3").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e308, "Must be between -1e+09 and 1e+09."),
        (1.2e29, "Must be between -1e+09 and 1e+09."),
        (-1e10, "Must be between -1e+09 and 1e+09."),
        (True, "Must be a JSON number (not a string or a boolean)."),
        ("12", "Must be a JSON number (not a string or a boolean)."),
        (None, "This field may not be null."),
    ],
)
def test_values_out_of_bounds_or_of_the_wrong_type_are_refused(client, value, message):
    response = client.post("/api/v1/events", event(1, name="tokens_saved", value=value), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["events"]["0"] == {"value": [message]}
    assert not OutcomeEvent.objects.exists()


@pytest.mark.parametrize("value", [-5, 2, 0.5])
def test_a_yes_no_metric_takes_only_0_or_1(client, value):
    response = client.post("/api/v1/events", event(1, value=value), format="json")  # task_success: proportion
    assert response.status_code == 400
    assert "must be 0 or 1" in response.json()["error"]["fields"]["events"]["0"]["value"][0]
    assert client.post("/api/v1/events", event(2, value=0), format="json").status_code == 201


@pytest.mark.parametrize(
    ("timestamp", "message"),
    [
        ("1970-01-01T00:00:00Z", "Timestamp is too old"),
        ("0001-01-01T00:00:00Z", "Timestamp is too old"),
        ("2026-11-30T23:30:00", "Give a time zone"),
    ],
)
def test_timestamps_need_a_zone_and_a_plausible_time(client, timestamp, message):
    response = client.post("/api/v1/events", event(1, timestamp=timestamp), format="json")
    assert response.status_code == 400
    assert message in response.json()["error"]["fields"]["events"]["0"]["timestamp"][0]


def test_a_timestamp_a_few_minutes_ahead_is_accepted_but_not_ten(client):
    from datetime import timedelta

    from django.utils import timezone

    soon = (timezone.now() + timedelta(minutes=2)).isoformat()
    later = (timezone.now() + timedelta(minutes=10)).isoformat()
    assert client.post("/api/v1/events", event(1, timestamp=soon), format="json").status_code == 201
    response = client.post("/api/v1/events", event(2, timestamp=later), format="json")
    assert response.json()["error"]["fields"]["events"]["0"] == {"timestamp": ["Timestamp is in the future."]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("same_body", [True, False])
def test_two_requests_racing_on_one_event_id_store_it_once_and_only_one_says_accepted(postgres, same_body):
    """The second request's SELECT runs before the first commits; its insert then waits for that
    commit and is classified again: a duplicate (same body) or a 409 conflict (different body)."""
    import threading
    import time as _time
    from datetime import UTC, datetime

    from django.db import connection, transaction

    from analytics.events import EventConflict, EventInput, events_record
    from analytics.models import OutcomeEvent

    def event(value: float) -> EventInput:
        return EventInput("race-1", "task_success", "s-race", "", value, datetime(2026, 12, 1, tzinfo=UTC))

    looked = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                outcome["first"] = events_record(events=[event(1.0)], source="race")
                looked.wait()
                _time.sleep(0.5)  # the second request inserts now and waits for this commit
        finally:
            connection.close()

    def second() -> None:
        looked.wait()
        try:
            with transaction.atomic():
                outcome["second"] = events_record(events=[event(1.0 if same_body else 0.0)], source="race")
        except EventConflict as exc:
            outcome["second"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcome["first"]["accepted"] == 1
    if same_body:
        assert (outcome["second"]["accepted"], outcome["second"]["duplicates"]) == (0, 1)
    else:
        assert isinstance(outcome["second"], EventConflict) and outcome["second"].ids == ["race-1"]
    assert list(OutcomeEvent.objects.filter(source="race").values_list("value", flat=True)) == [1.0]
