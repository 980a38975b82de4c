"""Retries, backoff, fallbacks, circuit breaker and concurrency limits, against the simulated
upstreams over real HTTP through the official SDKs, with exact call counts at the fake."""

from __future__ import annotations

import time

import pytest

from muse_experiments.infra.config_version import invalidate_all
from routing.catalogue import avocado_id
from routing.guards.circuit import breaker
from routing.guards.concurrency import limiter
from routing.guards.cooling import cooling_until
from routing.models import CallRecord, ModelEndpoint
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

pytestmark = pytest.mark.django_db

CONTROL = avocado_id(14)
AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"


@pytest.fixture(autouse=True)
def fast_backoff(settings):
    settings.ROUTING_BACKOFF_BASE_MS = 1.0
    settings.ROUTING_BACKOFF_CAP_MS = 4.0


@pytest.fixture
def azure_experiment(upstreams):
    seed_catalogue(upstreams.url)
    return make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])


@pytest.fixture
def backend(redis_url):
    """The Redis-backed breaker and limiter, reset."""
    breaker().reset()
    limiter.reset()
    return "redis"


def attempts(j):
    return [(a.endpoint, a.outcome) for a in CallRecord.objects.get(job=j).attempts.all()]


def served(j):
    return (j.result["served_model"], j.result["reason"], j.result["variant"])


def test_with_two_retries_the_primary_is_called_three_times_then_control_once(
    azure_experiment, upstreams, settings
):
    settings.ROUTING_MAX_RETRIES = 2
    upstreams.set_scenario("muse-special", failure="server_error")
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 3
    assert upstreams.call_count(model="avocado-v14") == 1
    assert attempts(j) == [(AZURE, "UpstreamUnavailable")] * 3 + [(CONTROL, "ok")]
    rows = list(CallRecord.objects.get(job=j).attempts.all())
    assert [r.status_code for r in rows] == [500, 500, 500, 200]
    assert rows[0].backoff_ms == 0
    assert all(0 <= r.backoff_ms <= 4.0 for r in rows[1:3])  # full jitter within min(cap, base*2^n)
    assert rows[3].backoff_ms == 0  # a new candidate starts without waiting


def test_a_transient_failure_is_retried_on_the_assigned_model_and_keeps_reason_assigned(
    azure_experiment, upstreams, settings
):
    settings.ROUTING_MAX_RETRIES = 2
    upstreams.set_scenario("muse-special", failure="overloaded", fail_first_n=2, retry_after_s=0.001)
    j = run(job())
    assert served(j) == (AZURE, "assigned", "treatment")
    assert upstreams.call_count(model="muse-special") == 3
    assert upstreams.call_count(model="avocado-v14") == 0
    assert attempts(j) == [(AZURE, "UpstreamUnavailable"), (AZURE, "UpstreamUnavailable"), (AZURE, "ok")]
    assert [a.status_code for a in CallRecord.objects.get(job=j).attempts.all()] == [529, 529, 200]


def test_a_429_retry_after_is_honoured_and_recorded(azure_experiment, upstreams, settings):
    settings.ROUTING_MAX_RETRIES = 1
    upstreams.set_scenario("muse-special", failure="rate_limit", fail_first_n=1, retry_after_s=0.05)
    j = run(job())
    assert served(j) == (AZURE, "assigned", "treatment")
    first, second = CallRecord.objects.get(job=j).attempts.all()
    assert (first.outcome, first.status_code, first.retry_after_s) == ("RateLimited", 429, 0.05)
    assert second.outcome == "ok"
    assert second.backoff_ms == pytest.approx(50.0)
    assert upstreams.call_count(model="muse-special") == 2


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
def test_a_retry_after_beyond_the_cap_falls_back_at_once_and_cools_the_endpoint(
    azure_experiment, upstreams, settings, backend, header
):
    """Issue 11 §2: Azure answers 429 ``retry-after: 47``; the policy waits at most 10 s."""
    settings.ROUTING_MAX_RETRIES = 2
    settings.ROUTING_RETRY_AFTER_CAP_S = 10
    upstreams.set_scenario("muse-special", failure="rate_limit", retry_after_s=47, retry_after_header=header)
    started = time.monotonic()
    j = run(job(session_id="s-1"))
    assert time.monotonic() - started < 5  # no wait at all (was 2 x 10 s)
    assert served(j) == (CONTROL, "cooling", "treatment")
    rows = list(CallRecord.objects.get(job=j).attempts.all())
    assert [(r.endpoint, r.outcome, r.status_code, r.retry_after_s) for r in rows] == [
        (AZURE, "RateLimited", 429, 47.0),
        (CONTROL, "ok", 200, None),
    ]
    assert upstreams.call_count(model="muse-special") == 1
    deadline = cooling_until(AZURE)
    assert deadline is not None and 40 < deadline - time.time() <= 47

    later = run(job(session_id="s-2"))  # another call skips the cooling endpoint without calling it
    assert served(later) == (CONTROL, "cooling", "treatment")
    assert attempts(later) == [(AZURE, "cooling"), (CONTROL, "ok")]
    assert upstreams.call_count(model="muse-special") == 1


def test_cooling_is_shared_through_redis_with_other_processes(azure_experiment, upstreams, redis_url):
    import redis

    upstreams.set_scenario("muse-special", failure="unavailable", retry_after_s=120)
    run(job(session_id="s-1"))
    stored = redis.Redis.from_url(redis_url).get(f"muse:cool:{AZURE}")
    assert stored is not None and 110 < float(stored) - time.time() <= 120
    assert 110_000 < redis.Redis.from_url(redis_url).pttl(f"muse:cool:{AZURE}") <= 120_000
    assert cooling_until(AZURE) == pytest.approx(float(stored))


def test_a_retry_after_within_the_cap_is_still_retried_and_cools_nothing(
    azure_experiment, upstreams, settings
):
    settings.ROUTING_MAX_RETRIES = 1
    settings.ROUTING_RETRY_AFTER_CAP_S = 0.5
    upstreams.set_scenario("muse-special", failure="unavailable", retry_after_s=0.02)
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 2
    assert cooling_until(AZURE) is None


def test_anthropic_rate_limit_reset_headers_beyond_the_cap_cool_the_claude_endpoint(
    upstreams, settings, backend
):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", CONTROL, 0.0), ("claude", CLAUDE, 1.0)])
    settings.ROUTING_RETRY_AFTER_CAP_S = 10
    upstreams.set_scenario(
        "claude-sonnet-5-5", failure="rate_limit", retry_after_s=90, retry_after_header="anthropic-reset"
    )
    j = run(job())
    assert (j.result["served_model"], j.result["reason"]) == (CONTROL, "cooling")
    first = CallRecord.objects.get(job=j).attempts.first()
    assert (first.outcome, first.status_code) == ("RateLimited", 429)
    assert 80 < first.retry_after_s <= 90
    assert upstreams.call_count(model="claude-sonnet-5-5") == 1
    assert cooling_until(CLAUDE) is not None


def test_a_client_error_is_not_retried_and_fails_the_call(azure_experiment, upstreams, settings):
    settings.ROUTING_MAX_RETRIES = 2
    upstreams.set_scenario("muse-special", failure="bad_request")
    j = run(job())
    assert j.status == "failed"
    assert j.error.startswith("ClientRequestError")
    assert upstreams.call_count(model="muse-special") == 1
    assert upstreams.call_count(model="avocado-v14") == 0
    assert attempts(j) == [(AZURE, "ClientRequestError")]


def test_an_auth_failure_is_not_retried_but_falls_back(azure_experiment, upstreams, settings):
    settings.ROUTING_MAX_RETRIES = 2
    upstreams.set_scenario("muse-special", failure="auth")
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 1
    assert attempts(j) == [(AZURE, "AuthFailed"), (CONTROL, "ok")]


def test_a_missing_credential_falls_back_without_calling(azure_experiment, upstreams, monkeypatch):
    monkeypatch.delenv("AZURE_OPENAI_API_KEY")
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 0
    assert attempts(j) == [(AZURE, "missing_credential"), (CONTROL, "ok")]


def test_a_slow_upstream_times_out_at_the_endpoint_timeout_and_is_retried(
    azure_experiment, upstreams, settings
):
    settings.ROUTING_MAX_RETRIES = 1
    ModelEndpoint.objects.filter(public_id=AZURE).update(timeout_s=0.3)
    invalidate_all()
    upstreams.set_scenario("muse-special", failure="timeout", hang_ms=3000)
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 2
    assert attempts(j) == [(AZURE, "UpstreamTimeout"), (AZURE, "UpstreamTimeout"), (CONTROL, "ok")]


@pytest.mark.parametrize(("failure", "error"), [("reset", "ConnectionFailed"), ("malformed", "BadResponse")])
def test_resets_and_malformed_bodies_are_retried_then_fall_back(
    azure_experiment, upstreams, settings, failure, error
):
    settings.ROUTING_MAX_RETRIES = 1
    upstreams.set_scenario("muse-special", failure=failure)
    j = run(job())
    assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert upstreams.call_count(model="muse-special") == 2
    assert upstreams.call_count(model="avocado-v14") == 1
    assert attempts(j) == [(AZURE, error), (AZURE, error), (CONTROL, "ok")]


def test_when_control_also_fails_the_platform_default_serves(azure_experiment, upstreams, settings):
    settings.ROUTING_MAX_RETRIES = 0
    upstreams.set_scenario("muse-special", failure="server_error")
    upstreams.set_scenario("avocado-v14", failure="reset")
    j = run(job())
    assert served(j) == (avocado_id(15), "error_fallback", "treatment")
    assert attempts(j) == [
        (AZURE, "UpstreamUnavailable"),
        (CONTROL, "ConnectionFailed"),
        (avocado_id(15), "ok"),
    ]


def test_when_every_candidate_fails_the_job_fails_with_every_attempt_recorded(
    azure_experiment, upstreams, settings
):
    settings.ROUTING_MAX_RETRIES = 0
    for model in ("muse-special", "avocado-v14", "avocado-v15"):
        upstreams.set_scenario(model, failure="unavailable", retry_after_s=0)
    j = run(job())
    assert j.status == "failed"
    assert j.error.startswith("UpstreamUnavailable")
    record = CallRecord.objects.get(job=j)
    assert (record.status, record.served_endpoint, record.assigned_endpoint) == ("failed", "", AZURE)
    assert len(attempts(j)) == 3


# --- circuit breaker ------------------------------------------------------------------------


def test_the_circuit_opens_after_n_failures_and_skips_the_endpoint(
    azure_experiment, upstreams, settings, backend
):
    settings.ROUTING_MAX_RETRIES = 0
    settings.ROUTING_CIRCUIT_FAILURES = 3
    settings.ROUTING_CIRCUIT_WINDOW_S = 60
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    upstreams.set_scenario("muse-special", failure="server_error")
    for i in range(3):
        j = run(job(session_id=f"s-{i}"))
        assert served(j) == (CONTROL, "error_fallback", "treatment")
    assert breaker().state(AZURE) == "open"
    j = run(job(session_id="s-after"))
    assert served(j) == (CONTROL, "circuit_open", "treatment")
    assert attempts(j) == [(AZURE, "circuit_open"), (CONTROL, "ok")]
    assert upstreams.call_count(model="muse-special") == 3
    assert upstreams.call_count(model="avocado-v14") == 4


def test_retries_count_towards_the_circuit_and_stop_once_it_opens(
    azure_experiment, upstreams, settings, backend
):
    settings.ROUTING_MAX_RETRIES = 4
    settings.ROUTING_CIRCUIT_FAILURES = 2
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    upstreams.set_scenario("muse-special", failure="server_error")
    j = run(job())
    assert attempts(j) == [
        (AZURE, "UpstreamUnavailable"),
        (AZURE, "UpstreamUnavailable"),
        (AZURE, "circuit_open"),
        (CONTROL, "ok"),
    ]
    assert j.result["reason"] == "circuit_open"  # what finally moved the call off the endpoint
    assert upstreams.call_count(model="muse-special") == 2


def test_after_the_cooldown_one_probe_closes_the_circuit_on_success(
    azure_experiment, upstreams, settings, backend
):
    settings.ROUTING_MAX_RETRIES = 0
    settings.ROUTING_CIRCUIT_FAILURES = 1
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60  # longer than the calls take, even on a loaded machine
    upstreams.set_scenario("muse-special", failure="server_error")
    assert served(run(job(session_id="s-1")))[1] == "error_fallback"
    assert served(run(job(session_id="s-2")))[1] == "circuit_open"
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 0.05  # the breaker reads its cooldown at each call
    time.sleep(0.1)  # let the cooldown pass (a wait, not a timing assertion)
    upstreams.set_scenario("muse-special")  # healthy again
    j = run(job(session_id="s-3"))
    assert served(j) == (AZURE, "assigned", "treatment")
    assert breaker().state(AZURE) == "closed"
    assert upstreams.call_count(model="muse-special") == 2


def test_a_failed_probe_reopens_the_circuit(azure_experiment, upstreams, settings, backend):
    settings.ROUTING_MAX_RETRIES = 0
    settings.ROUTING_CIRCUIT_FAILURES = 1
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 0.05
    upstreams.set_scenario("muse-special", failure="server_error")
    run(job(session_id="s-1"))
    time.sleep(0.1)
    assert attempts(run(job(session_id="s-2")))[0] == (AZURE, "UpstreamUnavailable")  # the probe
    # The failed probe re-opened the circuit: with a cooldown longer than this test can take
    # (even on a loaded machine), the next call finds it open instead of probing again.
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    assert attempts(run(job(session_id="s-3")))[0] == (AZURE, "circuit_open")  # open again
    assert upstreams.call_count(model="muse-special") == 2


# --- concurrency limit ----------------------------------------------------------------------


def test_an_endpoint_at_its_concurrency_limit_is_skipped_with_reason_circuit_open(
    azure_experiment, upstreams, backend
):
    ModelEndpoint.objects.filter(public_id=AZURE).update(max_concurrency=1)
    invalidate_all()
    held = limiter.acquire(AZURE, 1)  # another call in flight
    assert held is not None and limiter.in_flight(AZURE) == 1
    j = run(job(session_id="s-1"))
    assert served(j) == (CONTROL, "circuit_open", "treatment")
    assert attempts(j) == [(AZURE, "concurrency_limited"), (CONTROL, "ok")]
    assert upstreams.call_count(model="muse-special") == 0
    held.release()
    j = run(job(session_id="s-2"))
    assert served(j) == (AZURE, "assigned", "treatment")
    assert limiter.in_flight(AZURE) == 0  # the router gave its slot back


# --- Redis unreachable: the breaker and the limiter fail open ----------------------------


def test_with_redis_unreachable_the_breaker_and_limiter_never_block_traffic(
    azure_experiment, upstreams, settings, monkeypatch
):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(breaker(), "_skip_until", 0.0)
    monkeypatch.setattr(limiter, "_skip_redis_until", 0.0)
    settings.ROUTING_MAX_RETRIES = 0
    settings.ROUTING_CIRCUIT_FAILURES = 1
    ModelEndpoint.objects.filter(public_id=AZURE).update(max_concurrency=1)
    invalidate_all()
    upstreams.set_scenario("muse-special", failure="server_error")
    for i in range(3):
        assert attempts(run(job(session_id=f"s-{i}")))[0] == (AZURE, "UpstreamUnavailable")
    assert upstreams.call_count(model="muse-special") == 3  # never refused by the broken breaker
    upstreams.set_scenario("muse-special")
    assert served(run(job(session_id="s-ok"))) == (AZURE, "assigned", "treatment")
