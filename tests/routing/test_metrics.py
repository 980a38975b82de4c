"""Routing metrics count each routed call, its retries and its fallback, from a real routed call."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from routing.catalogue import avocado_id
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

pytestmark = pytest.mark.django_db

CONTROL = avocado_id(14)
AZURE = "azure/muse-special"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def fast_backoff(settings):
    settings.ROUTING_BACKOFF_BASE_MS = 1.0
    settings.ROUTING_BACKOFF_CAP_MS = 4.0
    settings.ROUTING_MAX_RETRIES = 2
    # a fresh breaker per test (its state lives in Redis)
    from routing.guards.circuit import breaker

    breaker().reset()


def test_a_call_that_falls_back_after_retries_is_counted_once_with_its_retries_and_fallback(upstreams):
    seed_catalogue(upstreams.url)
    experiment = make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])
    upstreams.set_scenario("muse-special", failure="server_error")
    routed = {
        "endpoint": CONTROL,
        "experiment": experiment.key,
        "variant": "treatment",
        "reason": "error_fallback",
    }
    before = {
        "routed": value("muse_routed_calls_total", **routed, status="succeeded"),
        "retries": value("muse_upstream_retries_total", endpoint=AZURE),
        "fallbacks": value("muse_fallbacks_total", from_endpoint=AZURE, reason="error_fallback"),
        "failed": value("muse_upstream_attempts_total", endpoint=AZURE, outcome="UpstreamUnavailable"),
    }
    run(job())
    assert value("muse_routed_calls_total", **routed, status="succeeded") == before["routed"] + 1
    assert value("muse_upstream_retries_total", endpoint=AZURE) == before["retries"] + 2
    assert (
        value("muse_fallbacks_total", from_endpoint=AZURE, reason="error_fallback") == before["fallbacks"] + 1
    )
    assert (
        value("muse_upstream_attempts_total", endpoint=AZURE, outcome="UpstreamUnavailable")
        == before["failed"] + 3
    )


def test_scrape_shows_circuit_and_kill_switch_state(upstreams):
    from routing.guards.circuit import breaker
    from routing.ops_services import kill_switch_set

    seed_catalogue(upstreams.url)
    for _ in range(10):
        breaker().record_failure(AZURE)
    kill_switch_set(scope="provider", target="anthropic", active=True, reason="test", actor="t")
    body = Client().get("/metrics").content.decode()
    assert f'muse_circuit_state{{endpoint="{AZURE}",state="open"}} 1.0' in body
    assert f'muse_circuit_state{{endpoint="{CONTROL}",state="closed"}} 1.0' in body
    assert 'muse_kill_switch_active{scope="provider",target="anthropic"} 1.0' in body
    assert "muse_kill_state_unreadable 0.0" in body
