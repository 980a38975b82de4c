"""REST: experiment list/detail and the assignment preview."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import api_key, make_experiment

pytestmark = pytest.mark.django_db
URL = "/api/v1/experiments/preview-assignment"


def client(scopes=None) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(scopes)}")
    return c


def test_the_preview_returns_the_decision_with_reasons(catalogue):
    make_experiment(key="pv", condition={"tier": "pro"})
    c = client(["analytics:read"])
    response = c.post(
        URL, {"session_id": "s-1", "user_id": "u-1", "attributes": {"tier": "pro"}}, format="json"
    )
    assert response.status_code == 200, response.json()
    routing = response.json()["routing"]
    assert (routing["experiment"], routing["phase"], routing["reason"], routing["in_experiment"]) == (
        "pv",
        1,
        "assigned",
        True,
    )
    assert routing["variant"] in ("control", "treatment") and routing["trace"] == ["pv:assigned"]
    assert 0 <= routing["bucket"] < 1
    response = c.post(
        URL, {"session_id": "s-1", "attributes": {"tier": "free"}, "experiment": "pv"}, format="json"
    )
    body = response.json()
    assert body["routing"]["reason"] == "no_experiment" and body["routing"]["trace"] == ["pv:not_targeted"]
    assert body["experiment"]["reason"] == "not_targeted" and body["experiment_error"] == ""


@pytest.mark.parametrize(
    "body, field",
    [
        ({"attributes": {}}, "session_id"),
        ({"session_id": "s", "experiment": "missing"}, "experiment"),
        ({"session_id": "s", "attributes": [1]}, "attributes"),
        ({"session_id": "s", "colour": "red"}, "colour"),
    ],
)
def test_bad_preview_input_is_a_400_with_field_errors(catalogue, body, field):
    response = client().post(URL, body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_the_preview_needs_the_analytics_read_scope(catalogue):
    response = client(["completions"]).post(URL, {"session_id": "s"}, format="json")
    assert response.status_code == 403


def test_experiment_list_and_detail_still_work(catalogue):
    make_experiment(key="listed")
    c = client()
    assert [e["key"] for e in c.get("/api/v1/experiments").json()] == ["listed"]
    detail = c.get("/api/v1/experiments/listed").json()
    assert (detail["status"], detail["phase"], [v["weight"] for v in detail["variants"]]) == (
        "running",
        1,
        [0.5, 0.5],
    )


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_an_unsupported_content_type_is_a_415(catalogue, content_type):
    response = client().post(URL, data="session_id=s", content_type=content_type)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
