"""The circuit breaker state machine, shared through real Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from routing.guards.circuit import CLOSED, OPEN, PROBE, breaker
from tests.conftest import REPO

EP = "azure/muse-special"


@pytest.fixture
def cb(redis_url, settings):
    settings.ROUTING_CIRCUIT_FAILURES = 3
    settings.ROUTING_CIRCUIT_WINDOW_S = 60
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    b = breaker()
    b.reset()
    yield b
    b.reset()


def test_it_opens_on_the_nth_failure_within_the_window(cb):
    assert [cb.record_failure(EP) for _ in range(3)] == [False, False, True]
    assert cb.allow(EP) == OPEN
    assert cb.state(EP) == "open"
    assert cb.allow("other/endpoint") == CLOSED


def test_failures_older_than_the_window_are_forgotten(cb, settings):
    settings.ROUTING_CIRCUIT_WINDOW_S = 0.1
    cb.record_failure(EP)
    cb.record_failure(EP)
    time.sleep(0.15)
    assert cb.record_failure(EP) is False
    assert cb.allow(EP) == CLOSED


def test_half_open_lets_exactly_one_probe_through(cb, settings):
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 0.1
    for _ in range(3):
        cb.record_failure(EP)
    assert cb.allow(EP) == OPEN
    time.sleep(0.15)
    assert cb.state(EP) == "half_open"
    assert [cb.allow(EP) for _ in range(3)] == [PROBE, OPEN, OPEN]
    cb.record_success(EP, probe=True)
    assert cb.allow(EP) == CLOSED
    assert cb.state(EP) == "closed"


def test_a_failed_probe_restarts_the_cooldown(cb, settings):
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 0.1
    for _ in range(3):
        cb.record_failure(EP)
    time.sleep(0.15)
    assert cb.allow(EP) == PROBE
    assert cb.record_failure(EP, probe=True) is True
    assert cb.allow(EP) == OPEN


def test_a_probe_whose_process_died_is_replaced_after_its_lease(cb, settings):
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 0.05
    for _ in range(3):
        cb.record_failure(EP)
    time.sleep(0.1)
    assert cb.allow(EP, probe_lease_s=0.05) == PROBE  # never reports back
    time.sleep(0.1)
    assert cb.allow(EP, probe_lease_s=0.05) == PROBE


def test_a_non_probe_success_does_not_close_an_open_circuit(cb):
    for _ in range(3):
        cb.record_failure(EP)
    cb.record_success(EP)
    assert cb.allow(EP) == OPEN


@pytest.mark.django_db
def test_an_open_circuit_is_seen_by_another_process_through_redis(redis_url, settings):
    settings.ROUTING_CIRCUIT_FAILURES = 2
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    b = breaker()
    b.reset()
    b.record_failure(EP)
    b.record_failure(EP)
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='muse_experiments.settings'; django.setup();"
        f"from routing.guards.circuit import breaker; print(breaker().allow({EP!r}), breaker().state({EP!r}))"
    )
    env = {**os.environ, "REDIS_URL": redis_url, "ROUTING_CIRCUIT_COOLDOWN_S": "60", "DJANGO_DEBUG": "true"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["open", "open"], out.stderr[-2000:]
    b.reset()
