"""Encrypted reasoning: server-side only, replayed byte-for-byte, dropped across endpoints."""

from __future__ import annotations

import json
import logging

import pytest

from routing.providers import CompletionRequest, Message, ReasoningState, ToolSpec, client_for
from tests.routing.conftest import MODELS, REASONING_ENDPOINTS


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


WEATHER = ToolSpec(
    "get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)
TIME = ToolSpec(
    "get_time", "", {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}
)
TURN1 = CompletionRequest(messages=(Message("user", "Weather in Bern?"),), tools=(WEATHER, TIME))


def reasoning_scenario(fake, name, **kw):
    fake.set_scenario(MODELS[name], reasoning=True, redacted_thinking=(name == "anthropic"), **kw)


def turn2(first, state) -> CompletionRequest:
    msgs = [
        Message("user", "Weather in Bern?"),
        Message("assistant", first.text, tool_calls=first.tool_calls),
    ]
    msgs += [Message("tool", f"result {i}", tool_call_id=tc.id) for i, tc in enumerate(first.tool_calls)]
    return CompletionRequest(messages=tuple(msgs), tools=(WEATHER, TIME), reasoning_state=state)


def secrets_of(fake, call_index: int = 0) -> list[str]:
    """Opaque blobs the fake sent in response #call_index (non-streaming or streaming)."""
    call = fake.calls()[call_index]
    text = call.get("response_body") or "".join(call.get("stream_events", []))
    blobs = []
    for token in text.replace('"', " ").split():
        if token.startswith(("gAAAAA", "EqQB", "EmwK")) and len(token) > 40:
            blobs.append(token.rstrip(","))
    assert blobs, "scenario should have produced reasoning blobs"
    return blobs


def original_reasoning_items(fake, name) -> list[dict]:
    body = json.loads(fake.calls()[0]["response_body"])
    if name == "anthropic":
        return [b for b in body["content"] if b["type"] in ("thinking", "redacted_thinking")]
    return [i for i in body["output"] if i["type"] == "reasoning"]


@pytest.mark.parametrize("thinking_text", ["Considering the weather.", ""], ids=["text", "empty-thinking"])
@pytest.mark.parametrize("name", REASONING_ENDPOINTS)
def test_reasoning_round_trip_byte_for_byte_and_in_order(fake, endpoint_factory, name, thinking_text):
    reasoning_scenario(fake, name, tool_calls="parallel", thinking_text=thinking_text)
    ep = endpoint_factory(name)
    client = client_for(ep)
    first = client.complete(ep, TURN1)
    assert first.reasoning_state is not None and first.reasoning_state.matches(ep)
    originals = original_reasoning_items(fake, name)
    assert [dict(i) for i in first.reasoning_state.items] == originals

    second = client.complete(ep, turn2(first, (first.reasoning_state,)))
    assert second.finish_reason == "stop"
    sent = fake.calls()[1]
    assert sent["outcome"] == "ok"  # the fake verified the blobs it issued
    if name == "anthropic":
        assistant = sent["body"]["messages"][1]["content"]
        assert [b["type"] for b in assistant] == [
            "thinking",
            "redacted_thinking",
            "text",
            "tool_use",
            "tool_use",
        ]
        assert assistant[:2] == originals
        assert assistant[0]["thinking"] == thinking_text
        for blob in secrets_of(fake):
            assert blob in sent["raw_body"]
    else:
        items = sent["body"]["input"]
        types = [i.get("type", i.get("role")) for i in items]
        assert types == [
            "user",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
        assert items[1] == originals[0]
        assert items[1]["encrypted_content"].startswith("gAAAAA")
        assert json.dumps(originals[0]["encrypted_content"]) in sent["raw_body"]  # exact bytes on the wire
        # The function_call that followed the reasoning keeps its original item id.
        fc_ids = [
            o["id"]
            for o in json.loads(fake.calls()[0]["response_body"])["output"]
            if o["type"] == "function_call"
        ]
        assert [items[2]["id"], items[3]["id"]] == fc_ids


@pytest.mark.parametrize("name", REASONING_ENDPOINTS)
def test_streamed_reasoning_round_trip_uses_complete_blob(fake, endpoint_factory, name):
    reasoning_scenario(fake, name)
    ep = endpoint_factory(name)
    client = client_for(ep)
    events = list(client.stream(ep, TURN1))
    first = events[-1].result
    assert first.reasoning_state is not None
    blobs = secrets_of(fake)
    # Every event a caller can see (and the final public result) is free of reasoning blobs.
    for event in events:
        rendered = json.dumps(event.to_public_dict()) + repr(event)
        for blob in blobs:
            assert blob[:24] not in rendered
    second = client.complete(ep, turn2(first, (first.reasoning_state,)))
    assert second.text and fake.calls()[1]["outcome"] == "ok"
    if name != "anthropic":
        # output_item.added carried a truncated blob; the replayed one is the full one.
        full = next(b for b in blobs if len(b) > 60)
        assert json.dumps(full) in fake.calls()[1]["raw_body"]


@pytest.mark.parametrize("name", REASONING_ENDPOINTS)
def test_reasoning_absent_from_public_outputs_and_logs(fake, endpoint_factory, name, caplog):
    caplog.set_level(logging.DEBUG)
    reasoning_scenario(fake, name)
    ep = endpoint_factory(name)
    result = client_for(ep).complete(ep, TURN1)
    public = json.dumps(result.to_public_dict())
    for blob in secrets_of(fake):
        assert blob not in public and blob not in repr(result) and blob not in result.text
        assert blob not in caplog.text
    assert "reasoning" not in result.to_public_dict()
    assert "Considering" not in public and "step by step" not in public  # thinking text stays private too


@pytest.mark.parametrize("name", REASONING_ENDPOINTS)
def test_reasoning_dropped_when_endpoint_differs(fake, endpoint_factory, name):
    reasoning_scenario(fake, name)
    producer = endpoint_factory(name)
    first = client_for(producer).complete(producer, TURN1)
    assert first.reasoning_state is not None
    # Same upstream, different credential -> different fingerprint.
    other_key = {"anthropic": "sk-ant-other", "openai_responses": "sk-other"}.get(name, "azure-other")
    fake_keys = fake._keys
    family = {"anthropic": "anthropic", "openai_responses": "openai"}.get(name, "azure")
    fake_keys[family].add(other_key)
    try:
        consumer = endpoint_factory(name, credential=other_key)
        assert consumer.fingerprint != producer.fingerprint
        second = client_for(consumer).complete(consumer, turn2(first, (first.reasoning_state,)))
    finally:
        fake_keys[family].discard(other_key)
    assert second.text
    sent = fake.calls()[1]
    for blob in secrets_of(fake):
        assert blob not in sent["raw_body"]
    if name == "anthropic":
        assert [b["type"] for b in sent["body"]["messages"][1]["content"]] == ["text", "tool_use"]
    else:
        assert all(i.get("type") != "reasoning" for i in sent["body"]["input"])


def test_reasoning_from_responses_not_sent_to_anthropic(fake, endpoint_factory):
    reasoning_scenario(fake, "openai_responses")
    first = client_for(endpoint_factory("openai_responses")).complete(
        endpoint_factory("openai_responses"), TURN1
    )
    ep = endpoint_factory("anthropic")
    client_for(ep).complete(ep, turn2(first, (first.reasoning_state,)))
    assert "gAAAAA" not in fake.calls()[1]["raw_body"]


def test_forged_state_with_matching_fingerprint_is_rejected_upstream(fake, endpoint_factory):
    """The fake verifies blobs like the real service: tampering surfaces as a client error."""
    from routing.providers import ClientRequestError

    reasoning_scenario(fake, "openai_responses")
    ep = endpoint_factory("openai_responses")
    first = client_for(ep).complete(ep, TURN1)
    item = dict(first.reasoning_state.items[0], encrypted_content="gAAAAAtampered")
    forged = ReasoningState(
        ep.fingerprint, "openai", "responses", (item,), first.reasoning_state.tool_call_ids
    )
    with pytest.raises(ClientRequestError):
        client_for(ep).complete(ep, turn2(first, (forged,)))
