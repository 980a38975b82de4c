"""Tool-call arguments given whole instead of in deltas: taken from whichever event carries them.

Provider streams over HTTP from a scripted upstream sending exact wire bytes (:mod:`tests.wire`),
and the drop-in formatters re-framing calls from the assembled result, read back through the
official SDKs' own accumulators (``tests/routing/dropin/test_framing.py``).
"""

from __future__ import annotations

import json

import pytest

from routing.dropin.streams import assembled_tool_calls
from routing.providers import CompletionRequest, Message, client_for
from tests.routing.conftest import MODELS
from tests.routing.dropin.test_framing import via_chat, via_messages, via_responses
from tests.wire import WHOLE_ARGUMENT_CARRIERS, anthropic_whole_input_stream, responses_whole_arguments_stream


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


ARGS = {"city": "Paris", "days": 3}
REQUEST = CompletionRequest(messages=(Message("user", "Weather in Paris for 3 days?"),))


def streamed_calls(ep) -> tuple[dict[int, dict], list]:
    """``(calls as the deltas assemble them, the done result's calls)``."""
    calls: dict[int, dict] = {}
    result = None
    for event in client_for(ep).stream(ep, REQUEST):
        if event.kind == "tool_call_delta":
            d = event.tool_call
            call = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
            call["id"] = call["id"] or d.id
            call["name"] = call["name"] or d.name
            call["args"] += d.arguments_delta
        elif event.kind == "done":
            result = event.result
    return calls, [(c.id, c.name, dict(c.arguments)) for c in result.tool_calls]


@pytest.mark.parametrize("carrier", WHOLE_ARGUMENT_CARRIERS)
def test_a_responses_call_whose_arguments_come_only_whole_streams_them(fake, endpoint_factory, carrier):
    model = MODELS["openai_responses"]
    fake.set_scenario(
        model, wire=responses_whole_arguments_stream(model, "call_w1", "get_weather", ARGS, carrier)
    )
    calls, result = streamed_calls(endpoint_factory("openai_responses"))
    assert [(c["id"], c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("call_w1", "get_weather", ARGS)
    ]
    assert result == [("call_w1", "get_weather", ARGS)]


def test_responses_arguments_given_in_deltas_and_again_whole_are_streamed_once(fake, endpoint_factory):
    model = MODELS["openai_responses"]
    frames = responses_whole_arguments_stream(model, "call_w1", "get_weather", ARGS, "arguments_done")
    raw = json.dumps(ARGS)
    head = {"type": "response.function_call_arguments.delta", "sequence_number": 50, "item_id": "fc_whole",
            "output_index": 0, "delta": raw[:9]}  # fmt: skip
    frames.insert(2, {"data": f"event: {head['type']}\ndata: {json.dumps(head)}\n\n"})
    fake.set_scenario(model, wire=frames)
    calls, result = streamed_calls(endpoint_factory("openai_responses"))
    assert [c["args"] for c in calls.values()] == [raw]
    assert result == [("call_w1", "get_weather", ARGS)]


@pytest.mark.parametrize("empty_delta", [False, True], ids=["no_delta", "empty_delta"])
def test_an_anthropic_compatible_call_with_its_whole_input_in_block_start(
    fake, endpoint_factory, empty_delta
):
    """Was ``{}`` in the stream and the stored result."""
    model = MODELS["anthropic"]
    fake.set_scenario(
        model,
        wire=anthropic_whole_input_stream(model, "toolu_w1", "get_weather", ARGS, empty_delta=empty_delta),
    )
    calls, result = streamed_calls(endpoint_factory("anthropic"))
    assert [(c["id"], c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("toolu_w1", "get_weather", ARGS)
    ]
    assert result == [("toolu_w1", "get_weather", ARGS)]


def header(index, call_id, name, args=""):
    return {"type": "tool_call_delta", "index": index, "id": call_id, "name": name, "arguments_delta": args}


def done(*calls):
    result = {"tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in calls], "usage": {}}
    return {"type": "done", "result": {**result, "finish_reason": "tool_calls"}}


@pytest.mark.parametrize(
    "formatter", [via_chat, via_responses, via_messages], ids=["chat", "responses", "messages"]
)
def test_drop_in_streams_are_reframed_from_the_assembled_calls(formatter):
    """A call whose deltas carried no arguments, one whose deltas carried their beginning, and
    one no delta introduced: every drop-in hands out the calls of the result."""
    other = {"q": "x"}
    events = [
        header(0, "call_a", "get_weather"),
        header(1, "call_b", "get_weather", '{"city": '),
        done(
            ("call_a", "get_weather", ARGS),
            ("call_b", "get_weather", {"city": "Oslo"}),
            ("call_c", "search", other),
        ),
    ]
    assert formatter(events) == [
        ("call_a", "get_weather", ARGS),
        ("call_b", "get_weather", {"city": "Oslo"}),
        ("call_c", "search", other),
    ]


def test_a_call_without_arguments_is_streamed_as_an_empty_object():
    events = list(assembled_tool_calls(iter([header(0, "call_a", "now"), done(("call_a", "now", {}))])))
    assert [e.get("arguments_delta") for e in events] == ["", "{}", None]


def test_streamed_arguments_are_left_as_they_are_when_whole():
    raw = '{"city":"Paris","days":3}'  # the upstream's own spacing, not json.dumps's
    events = [header(0, "call_a", "get_weather", raw), done(("call_a", "get_weather", ARGS))]
    assert list(assembled_tool_calls(iter(events))) == events
