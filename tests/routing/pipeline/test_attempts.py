"""The single guarded attempt the streaming path reuses: guards, in-stream errors, slot release."""

from __future__ import annotations

import dataclasses

import pytest

from muse_experiments.infra.config_version import invalidate_all
from muse_experiments.infra.deferral import run_deferred
from routing.guards.circuit import PROBE, breaker
from routing.guards.concurrency import limiter
from routing.guards.cooling import cool
from routing.ops_services import kill_switch_set
from routing.pipeline.attempts import EndpointRefused, _guard, attempt, attempt_stream
from routing.pipeline.planning import Candidate
from routing.providers.errors import ProviderError, StreamFailed
from routing.providers.types import CompletionRequest, Message
from routing.selectors import catalogue
from tests.factories import seed_catalogue
from tests.routing.conftest import WEATHER_TOOL

pytestmark = pytest.mark.django_db

AZURE = "azure/muse-special"
REQUEST = CompletionRequest(messages=(Message(role="user", content="hello there"),))


@pytest.fixture
def candidate(upstreams, settings):
    settings.ROUTING_CIRCUIT_FAILURES = 1
    settings.ROUTING_CIRCUIT_COOLDOWN_S = 60
    seed_catalogue(upstreams.url)
    return Candidate(catalogue().get(AZURE), "assigned")


def test_a_stream_error_before_any_content_is_raised_so_the_caller_can_fall_back(candidate, upstreams):
    upstreams.set_scenario("muse-special", failure="stream_error", stream_error_after=0)
    events = attempt_stream(candidate, REQUEST)
    with pytest.raises(StreamFailed) as exc:
        list(events)
    assert exc.value.after_content is False and exc.value.retryable is True
    assert limiter.in_flight(AZURE) == 0
    assert breaker().state(AZURE) == "open"  # counted against the endpoint


def test_a_stream_error_after_content_ends_with_an_error_event_and_is_not_retryable(candidate, upstreams):
    upstreams.set_scenario("muse-special", failure="stream_error", stream_error_after=2)
    events = list(attempt_stream(candidate, REQUEST))
    kinds = [e.kind for e in events]
    assert kinds.count("text_delta") >= 1 and kinds[-1] == "error"
    error = events[-1].error
    assert isinstance(error, StreamFailed) and error.after_content is True and error.retryable is False
    assert upstreams.call_count(model="muse-special") == 1
    assert limiter.in_flight(AZURE) == 0
    assert breaker().state(AZURE) == "open"


def test_a_completed_stream_frees_its_slot_and_a_closed_one_too(candidate, upstreams):
    events = list(attempt_stream(candidate, REQUEST))
    assert events[-1].kind == "done"
    stream = attempt_stream(candidate, REQUEST)
    next(stream)
    assert limiter.in_flight(AZURE) == 1  # held while the client reads
    stream.close()  # client went away
    assert limiter.in_flight(AZURE) == 0
    assert breaker().state(AZURE) == "closed"


def test_the_guards_refuse_before_anything_is_sent(candidate, upstreams):
    kill_switch_set(scope="provider", target="azure", active=True, reason="test", actor="t")
    invalidate_all()
    with pytest.raises(EndpointRefused) as exc:
        attempt(candidate, REQUEST)
    assert (exc.value.outcome, exc.value.reason) == ("killed", "provider_killed")
    with pytest.raises(EndpointRefused):
        attempt_stream(candidate, REQUEST)  # refused eagerly, not on first next()
    assert upstreams.call_count() == 0


@pytest.fixture
def shared_stores(candidate, redis_url, monkeypatch):
    """``candidate`` with the guards' stores in Redis; returns the round trips the process makes to
    them (per single command or pipeline execute, its ``(command, key)`` pairs; round trips that
    touch no cooling, slot or breaker key, such as the configuration's version check, are left out)."""
    import redis

    trips: list[list[str]] = []
    execute, command = redis.client.Pipeline.execute, redis.Redis.execute_command

    def note(commands) -> None:
        pairs = [(str(c[0]), str(c[2] if c[0] in ("EVAL", "EVALSHA") else c[1])) for c in commands]
        if any(key.startswith(("muse:cool:", "muse:conc:", "muse:cb:")) for _, key in pairs):
            trips.append([name for name, _ in pairs])

    def spy_execute(self, *args, **kwargs):
        note([c[0] for c in self.command_stack])
        return execute(self, *args, **kwargs)

    def spy_command(self, *args, **options):
        if not isinstance(self, redis.client.Pipeline) and len(args) > 1:
            note([args])
        return command(self, *args, **options)

    monkeypatch.setattr(redis.client.Pipeline, "execute", spy_execute)
    monkeypatch.setattr(redis.Redis, "execute_command", spy_command)
    return trips


def half_open(endpoint: str) -> None:
    """Open ``endpoint``'s circuit (one failure opens it here) and let its cooldown pass."""
    from muse_experiments.infra.redis_client import redis_client
    from routing.guards.circuit import KEY_PREFIX

    breaker().record_failure(endpoint)
    redis_client().hset(KEY_PREFIX + endpoint + ":state", "opened_at", 0)


def test_the_guards_ask_the_shared_stores_in_one_round_trip(candidate, shared_stores):
    permit = _guard(candidate, REQUEST)
    assert shared_stores == [["GET", "EVAL", "EVAL"]]  # cooling, concurrency slot, circuit breaker
    assert limiter.in_flight(AZURE) == 1
    permit.finish(None)
    assert limiter.in_flight(AZURE) == 0


def test_a_cooling_refusal_gives_back_the_slot_and_the_half_open_probe(candidate, shared_stores):
    half_open(AZURE)
    cool(AZURE, 30)
    with pytest.raises(EndpointRefused) as exc:
        _guard(candidate, REQUEST)
    assert exc.value.outcome == "cooling"
    assert limiter.in_flight(AZURE) == 0
    assert breaker().allow(AZURE) == PROBE  # the next caller probes at once, not after the lease


def test_a_full_endpoint_gives_back_the_half_open_probe(candidate, shared_stores):
    half_open(AZURE)
    held = limiter.acquire(AZURE, 1)
    with pytest.raises(EndpointRefused) as exc:
        _guard(Candidate(dataclasses.replace(candidate.endpoint, max_concurrency=1), "assigned"), REQUEST)
    assert exc.value.outcome == "concurrency_limited"
    assert limiter.in_flight(AZURE) == 1  # only the slot held above
    held.release()
    assert breaker().allow(AZURE) == PROBE


def test_a_successful_attempt_frees_its_slot_once_the_answer_is_out(candidate, upstreams, redis_url):
    with run_deferred():
        attempt(candidate, REQUEST)
        assert limiter.in_flight(AZURE) == 1  # still held while the job's answer is handed back
    assert limiter.in_flight(AZURE) == 0


def test_a_failed_attempt_is_reported_at_once_even_before_the_answer(candidate, upstreams, redis_url):
    upstreams.set_scenario("muse-special", failure="server_error")
    with run_deferred():
        with pytest.raises(ProviderError):
            attempt(candidate, REQUEST)
        assert limiter.in_flight(AZURE) == 0
        assert breaker().state(AZURE) == "open"  # the next attempt's guards see it


@pytest.mark.redis
def test_a_turn_without_reasoning_renews_the_sessions_reasoning_after_the_answer(
    upstreams, settings, redis_url, monkeypatch
):
    import redis

    from routing import reasoning_store
    from routing.catalogue import avocado_id

    settings.REASONING_STORE_URL = redis_url
    settings.REASONING_SESSION_TTL_S = 3600
    seed_catalogue(upstreams.url)
    client = redis.Redis.from_url(redis_url)
    session = reasoning_store.OwnedSession(owner="key:1", session_id="s-renewed")
    key = f"muse:reasoning:{session.store_key}"
    client.delete(key)
    client.rpush(key, "{}")  # the session kept reasoning from an earlier external turn
    client.expire(key, 100)
    monkeypatch.setattr(reasoning_store._Renewals, "RENEW_EVERY_S", 0.0)
    avocado = Candidate(catalogue().get(avocado_id(14)), "assigned")
    with run_deferred():
        result = attempt(avocado, REQUEST, session=session)
        assert result.reasoning_state is None
        assert 0 < client.ttl(key) <= 100  # not yet: the answer does not wait for it
    assert client.ttl(key) > 3500
    client.delete(key)


@pytest.mark.redis
def test_a_turn_with_reasoning_keeps_it_before_the_answer(candidate, upstreams, settings, redis_url):
    import redis

    from routing import reasoning_store

    upstreams.set_scenario("muse-special", reasoning=True)

    settings.REASONING_STORE_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    session = reasoning_store.OwnedSession(owner="key:1", session_id="s-kept")
    key = f"muse:reasoning:{session.store_key}"
    client.delete(key)
    with run_deferred():
        result = attempt(candidate, dataclasses.replace(REQUEST, tools=(WEATHER_TOOL,)), session=session)
        assert result.reasoning_state is not None
        assert client.llen(key) == 1  # the next turn may come the moment this answer is out
    client.delete(key)
