"""Two creates of one key at once (PostgreSQL): the one that loses is a 400 naming ``key``, never
a 500. The race is made deterministic with the database itself: another connection has inserted
the key and not committed, so the API's check sees nothing and its INSERT waits on the unique
index until that transaction commits, then violates it."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from muse_experiments.experiments.models import Experiment, Rollout, ShadowTest
from muse_experiments.experiments.services.shadow import shadow_test_create
from routing.catalogue import avocado_id
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres")]

V14, V15 = avocado_id(14), avocado_id(15)
BODIES = {
    "experiments": {
        "key": "race",
        "name": "race",
        "variants": [
            {"key": "control", "weight": 0.5, "model": V14, "is_control": True},
            {"key": "treatment", "weight": 0.5, "model": V15},
        ],
    },
    "rollouts": {
        "key": "race",
        "model": V15,
        "replaces": V14,
        "steps": [10, 100],
        "guardrails": ["error_rate"],
    },
    "shadow-tests": {
        "key": "race",
        "name": "race",
        "candidate": V15,
        "source": {"model": V14},
        "sample_percent": 10,
        "max_usd_per_day": 1,
    },
}


def _other_create_uncommitted(
    what: str, inserted: threading.Event, commit: threading.Event
) -> threading.Thread:
    """A thread that inserts the row with key ``race`` in its own transaction and commits only when
    ``commit`` is set."""

    def run():
        try:
            with transaction.atomic():
                if what == "shadow-tests":
                    shadow_test_create(
                        actor="first",
                        judge=None,
                        allow_external=False,
                        **{**BODIES[what], "max_usd_per_day": Decimal(1)},
                    )
                else:  # an experiment holds the key of an experiment and of a rollout
                    make_experiment(key="race", start=False)
                inserted.set()
                commit.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.parametrize("what", ["experiments", "rollouts", "shadow-tests"])
def test_the_create_that_loses_the_race_for_a_key_is_a_400_naming_the_key(what, upstreams):
    seed_catalogue(upstreams.url)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write'])}")
    inserted, commit = threading.Event(), threading.Event()
    other = _other_create_uncommitted(what, inserted, commit)
    assert inserted.wait(10)
    answers: list = []
    caller = threading.Thread(
        target=lambda: (
            answers.append(client.post(f"/api/v1/{what}", BODIES[what], format="json")),
            connection.close(),
        )
    )
    caller.start()
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock() and time.monotonic() < deadline:  # its INSERT waits on the index
        time.sleep(0.05)
    commit.set()
    other.join(10)
    caller.join(20)
    response = answers[0]
    assert response.status_code == 400, response.content
    assert "key" in response.json()["error"]["fields"]
    model = {"experiments": Experiment, "rollouts": Experiment, "shadow-tests": ShadowTest}[what]
    assert model.objects.filter(key="race").count() == 1
    assert Rollout.objects.count() == 0  # nothing half-written by the loser
