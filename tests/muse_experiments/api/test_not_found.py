"""A missing experiment, rollout or shadow test is the API's 404 in its own words ("No such
rollout."), never Django's "No Rollout matches the given query."."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from muse_experiments.api.errors import _readable_not_found
from tests.factories import api_key

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/v1/experiments/nope", "No such experiment."),
        ("/api/v1/rollouts/nope", "No such rollout."),
        ("/api/v1/shadow-tests/nope", "No such shadow test."),
    ],
)
def test_a_missing_object_is_a_404_in_the_apis_words(path, message):
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write', 'analytics:read'])}")
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": message}}


def test_other_messages_are_left_as_they_are():
    assert _readable_not_found("No such completion.") == "No such completion."
    assert _readable_not_found("Not found.") == "Not found."
