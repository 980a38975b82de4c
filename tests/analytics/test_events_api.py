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
    assert response.json()["error"]["fields"]["events"]["1"] == {"value": ["A valid number is required."]}
    assert OutcomeEvent.objects.count() == 0


def test_an_event_timestamp_far_in_the_future_is_a_field_error(client):
    response = client.post("/api/v1/events", event(1, timestamp="3000-01-01T00:00:00Z"), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["events"]["0"] == {"timestamp": ["Timestamp is in the future."]}
    assert OutcomeEvent.objects.count() == 0
