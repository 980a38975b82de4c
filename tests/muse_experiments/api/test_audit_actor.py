"""Every API records who acted in one spelling (:func:`muse_experiments.api.keyed.api_actor`): an
API key as ``api-key:<name> (<prefix>)``, a staff session by its username as the admin does, so
one key's actions can be found together in the audit trail."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from muse_experiments.api.keyed import api_actor
from muse_experiments.experiments.models import ApiKey, AuditEntry
from routing.catalogue import avocado_id
from routing.transcripts.models import TrainingOptOut
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db


def test_one_key_is_one_actor_in_the_experiments_ops_and_training_apis():
    seed_catalogue()
    make_experiment(key="actor-exp")
    client = APIClient(
        HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write', 'analytics:read', 'ops', 'training'])}"
    )
    prefix = ApiKey.objects.get(name="test").prefix
    expected = f"api-key:test ({prefix})"

    version = client.get("/api/v1/experiments/actor-exp").json()["version"]
    edited = client.patch(
        "/api/v1/experiments/actor-exp", {"version": version, "hypothesis": "h"}, format="json"
    )
    assert edited.status_code == 200, edited.content
    killed = client.post(
        "/api/v1/ops/kill-switches",
        {"scope": "endpoint", "target": avocado_id(13), "active": True, "reason": "r"},
        format="json",
    )
    assert killed.status_code == 200, killed.content
    assert client.post("/api/v1/users/u1/training-opt-out").status_code == 200

    assert AuditEntry.objects.get(action="update").actor == expected
    assert AuditEntry.objects.get(action="kill_switch_on").actor == expected
    assert killed.json()["updated_by"] == expected
    assert TrainingOptOut.objects.get(user_id="u1").actor == expected
    assert re.fullmatch(r"api-key:test \([^)]+\)", expected)


def test_a_staff_session_is_its_username():
    user = get_user_model().objects.create_user("pm-ana", "a@example.com", "pw", is_staff=True)
    assert api_actor(user) == "pm-ana"
