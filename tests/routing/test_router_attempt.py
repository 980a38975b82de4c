"""The single guarded attempt the streaming path reuses: guards, in-stream errors, slot release."""

from __future__ import annotations

import pytest

from muse_experiments.config_version import invalidate_all
from routing.attempts import EndpointRefused, attempt, attempt_stream
from routing.circuit import breaker
from routing.concurrency import limiter
from routing.ops_services import kill_switch_set
from routing.planning import Candidate
from routing.providers.errors import StreamFailed
from routing.providers.types import CompletionRequest, Message
from routing.selectors import catalogue
from tests.factories import seed_catalogue

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
