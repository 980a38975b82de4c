"""Usage and cost of every attempt, from exact upstream wire bytes, through the official SDKs."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from routing.providers import CompletionRequest, Message, client_for
from routing.providers.errors import StreamFailed, UpstreamUnavailable
from routing.providers.types import Usage, merge_usage
from tests.routing.conftest import MODELS
from tests.wire import anthropic_stream, chat_text_stream, responses_failed_stream


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


ASK = CompletionRequest(messages=(Message("user", "Hello"),))
CLAUDE_PRICES = {
    "price_input_per_mtok": Decimal("3"),
    "price_cached_input_per_mtok": Decimal("0.30"),
    "price_cache_write_per_mtok": Decimal("3.75"),
    "price_output_per_mtok": Decimal("15"),
}


def test_merge_usage_keeps_fields_a_later_snapshot_leaves_out_and_never_sums():
    start = {
        "input_tokens": 20,
        "cache_creation_input_tokens": 10_000,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    later = {"input_tokens": 20, "output_tokens": 500, "cache_read_input_tokens": None}
    assert merge_usage(start, later) == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 10_000,
        "cache_read_input_tokens": 0,
        "output_tokens": 500,
    }
    nested = merge_usage({"input_tokens_details": {"cached_tokens": 7}}, {"input_tokens_details": {}})
    assert nested == {"input_tokens_details": {"cached_tokens": 7}}


def test_anthropic_stream_merges_message_start_and_message_delta_usage(fake, endpoint_factory):
    model = MODELS["anthropic"]
    fake.set_scenario(
        model,
        wire=anthropic_stream(
            model,
            start_usage={
                "input_tokens": 20,
                "cache_creation_input_tokens": 10_000,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
            delta_usage={"input_tokens": 20, "output_tokens": 500},
        ),
    )
    ep = endpoint_factory("anthropic", **CLAUDE_PRICES)
    done = [e for e in client_for(ep).stream(ep, ASK) if e.kind == "done"][0].result
    u = done.usage
    assert (u.input_tokens, u.cache_write_tokens, u.cached_input_tokens, u.output_tokens) == (
        10_020,
        10_000,
        0,
        500,
    )
    # 20 x $3 + 10,000 x $3.75 + 500 x $15 per million
    assert done.cost_usd == Decimal("0.04506")


@pytest.mark.parametrize("name", ["openai_responses", "azure_v1"])
def test_a_failed_responses_stream_carries_the_usage_it_billed(fake, endpoint_factory, name):
    model = MODELS[name]
    fake.set_scenario(model, wire=responses_failed_stream(model, input_tokens=1200, output_tokens=40))
    ep = endpoint_factory(name, price_input_per_mtok=Decimal("1.25"), price_output_per_mtok=Decimal("10"))
    with pytest.raises(StreamFailed) as err:
        list(client_for(ep).stream(ep, ASK))
    assert err.value.cause_class == "UpstreamUnavailable" and not err.value.after_content
    assert isinstance(err.value.usage, Usage)
    assert (err.value.usage.input_tokens, err.value.usage.output_tokens) == (1200, 40)
    assert err.value.retryable


def test_a_failed_non_streamed_response_carries_the_usage_it_billed(fake, endpoint_factory):
    model = MODELS["openai_responses"]
    failed = responses_failed_stream(model, input_tokens=1200, output_tokens=40)
    import json

    body = json.loads(failed[-1]["data"].split("data: ", 1)[1])["response"]
    fake.set_scenario(model, wire_body=body)
    ep = endpoint_factory("openai_responses")
    with pytest.raises(UpstreamUnavailable) as err:
        client_for(ep).complete(ep, ASK)
    assert (err.value.usage.input_tokens, err.value.usage.output_tokens) == (1200, 40)


def test_closing_a_stream_early_closes_the_upstream_and_reports_what_it_cost(fake, endpoint_factory):
    model = MODELS["openai_chat"]
    fake.set_scenario(model, wire=chat_text_stream(model, [f"w{i} " for i in range(30)], delay_ms=200))
    ep = endpoint_factory("openai_chat")
    stream = client_for(ep).stream(ep, ASK)
    deltas = 0
    for event in stream:
        deltas += event.kind == "text_delta"
        if deltas == 4:
            break
    stream.close()
    closed_at = time.time()
    usage = stream.usage_so_far()
    assert usage.output_tokens == 4 and usage.input_tokens >= 1 and usage.vendor["estimated"] == 1
    deadline = time.monotonic() + 3
    while "client_closed_at" not in fake.calls(model=model)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    call = fake.calls(model=model)[0]
    assert call["client_closed_at"] - closed_at < 1.0
    assert call["frames_sent"] < 10  # not the 34 frames of the whole answer


def test_a_stream_broken_after_content_carries_the_tokens_delivered(fake, endpoint_factory):
    model = MODELS["anthropic"]
    frames = anthropic_stream(
        model,
        start_usage={"input_tokens": 50, "output_tokens": 1},
        delta_usage={"output_tokens": 9},
        text_pieces=["a ", "b ", "c "],
    )[:5]  # message_start, block start, 3 deltas: then the connection ends
    fake.set_scenario(model, wire=frames)
    ep = endpoint_factory("anthropic")
    events = list(client_for(ep).stream(ep, ASK))
    assert events[-1].kind == "error" and isinstance(events[-1].error, StreamFailed)
    usage = events[-1].error.usage
    assert (usage.input_tokens, usage.output_tokens) == (50, 3)
