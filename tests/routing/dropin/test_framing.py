"""Drop-in streams that re-frame our events assemble exactly the upstream's tool calls.

A property test over interleavings: parallel tool calls whose fragments arrive in any order
(each call's own fragments in order, its header first) go through each drop-in formatter, and
the official SDKs' own stream accumulators rebuild them from the bytes we send.
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from routing.dropin.anthropic_framing import message_frames
from routing.dropin.openai_framing import ResponsesStream, chat_chunks
from routing.dropin.streams import contiguous_tool_calls
from routing.providers import CompletionRequest, Message, client_for
from tests.routing.conftest import MODELS
from tests.wire import ISSUE_INTERLEAVING, anthropic_tool_stream, chat_tool_stream, responses_tool_stream

NAMES = ("get_weather", "get_time", "search")


def sse_data(frames) -> list[tuple[str | None, str]]:
    out = []
    for raw in b"".join(frames).decode().split("\n\n"):
        event, data = None, None
        for line in raw.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data is not None:
            out.append((event, data))
    return out


@st.composite
def interleaved_calls(draw):
    """``(calls, events)``: the calls an upstream made and our events for them, interleaved."""
    n = draw(st.integers(1, 3))
    calls, pieces = [], []
    for i in range(n):
        args = {"city": draw(st.text('abcdé "\\\u00e9', min_size=0, max_size=8)), "n": i}
        raw = json.dumps(args)
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(raw) - 1)), max_size=4)))
        fragments = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if raw[a:b]]
        call = {"id": f"call_{uuid.uuid4().hex[:8]}", "name": draw(st.sampled_from(NAMES)), "arguments": args}
        calls.append(call)
        header = {
            "type": "tool_call_delta",
            "index": i,
            "id": call["id"],
            "name": call["name"],
            "arguments_delta": "",
        }
        pieces.append(
            [
                header,
                *(
                    {"type": "tool_call_delta", "index": i, "id": None, "name": None, "arguments_delta": f}
                    for f in fragments
                ),
            ]
        )
    events = []
    if draw(st.booleans()):
        events.append({"type": "text_delta", "text": "Checking. "})
    while any(pieces):
        lane = draw(st.sampled_from([i for i, p in enumerate(pieces) if p]))
        events.append(pieces[lane].pop(0))
    text = "".join(e["text"] for e in events if e["type"] == "text_delta")
    result = {
        "text": text,
        "tool_calls": calls,
        "finish_reason": "tool_calls",
        "served_model": "ep/x",
        "usage": {},
    }
    events.append({"type": "done", "result": result})
    return calls, events


def job():
    return SimpleNamespace(id=uuid.uuid4())


def expected(calls):
    return [(c["id"], c["name"], c["arguments"]) for c in calls]


def via_chat(events):
    state = ChatCompletionStreamState()
    for _, data in sse_data(chat_chunks(iter(events), job=job(), model="muse-default", include_usage=True)):
        if data != "[DONE]":
            state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(data)))
    message = state.get_final_completion().choices[0].message
    return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def via_responses(events):
    items: dict[str, dict] = {}
    completed = None
    for _, data in sse_data(ResponsesStream(job(), "muse-default").frames(iter(events))):
        e = json.loads(data)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call":
            items[e["item"]["id"]] = {**e["item"], "arguments": e["item"]["arguments"]}
        elif e["type"] == "response.function_call_arguments.delta":
            items[e["item_id"]]["arguments"] += e["delta"]
        elif e["type"] == "response.completed":
            completed = e["response"]
    streamed = [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in items.values()]
    final = [
        (i["call_id"], i["name"], json.loads(i["arguments"]))
        for i in completed["output"]
        if i["type"] == "function_call"
    ]
    assert streamed == final
    return streamed


def via_messages(events):
    snapshot, bufs = None, {}
    for _, data in sse_data(message_frames(iter(events), job=job(), model="muse-default")):
        event = anthropic_construct(type_=RawMessageStreamEvent, value=json.loads(data))
        if event.type == "ping":
            continue
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return [(b.id, b.name, b.input) for b in snapshot.content if b.type == "tool_use"]


@pytest.mark.parametrize(
    "formatter", [via_chat, via_responses, via_messages], ids=["chat", "responses", "messages"]
)
@settings(max_examples=60, deadline=None)
@given(case=interleaved_calls())
def test_every_drop_in_assembles_exactly_the_upstream_calls_whatever_the_interleaving(formatter, case):
    calls, events = case
    assert formatter(events) == expected(calls)


def test_the_issue_interleaving_gives_two_whole_calls_on_every_drop_in():
    """Headers for call_a (0) and call_b (1), then {"city": (0), {"city": (1), "Paris"} (0), "Oslo"} (1)."""

    def d(i, **f):
        return {
            "type": "tool_call_delta",
            "index": i,
            "id": f.get("id"),
            "name": f.get("name"),
            "arguments_delta": f.get("a", ""),
        }

    events = [
        d(0, id="call_a", name="get_weather"), d(1, id="call_b", name="get_weather"),
        d(0, a='{"city":'), d(1, a='{"city":'), d(0, a='"Paris"}'), d(1, a='"Oslo"}'),
    ]  # fmt: skip
    calls = [
        {"id": "call_a", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "call_b", "name": "get_weather", "arguments": {"city": "Oslo"}},
    ]
    events.append(
        {"type": "done", "result": {"tool_calls": calls, "finish_reason": "tool_calls", "usage": {}}}
    )
    for formatter in (via_chat, via_responses, via_messages):
        assert formatter(events) == expected(calls), formatter.__name__


def test_contiguous_tool_calls_drops_held_back_fragments_of_a_stream_that_failed():
    events = [
        {"type": "tool_call_delta", "index": 0, "id": "a", "name": "f", "arguments_delta": "{"},
        {"type": "tool_call_delta", "index": 1, "id": "b", "name": "f", "arguments_delta": "{"},
        {"type": "error", "error": "boom"},
    ]
    assert [e["type"] for e in contiguous_tool_calls(iter(events))] == ["tool_call_delta", "error"]


UPSTREAM_STYLES = {
    "openai_chat": chat_tool_stream,
    "openai_responses": responses_tool_stream,
    "anthropic": anthropic_tool_stream,
}


@pytest.mark.parametrize("style", list(UPSTREAM_STYLES))
@pytest.mark.parametrize(
    "formatter", [via_chat, via_responses, via_messages], ids=["chat", "responses", "messages"]
)
def test_interleaved_upstream_tool_calls_reach_every_drop_in_whole(fake, endpoint_factory, style, formatter):
    """All drop-ins x all upstream styles, over HTTP through the official SDKs on the upstream side."""
    model = MODELS[style]
    fake.set_scenario(model, wire=UPSTREAM_STYLES[style](model, ISSUE_INTERLEAVING))
    ep = endpoint_factory(style)
    request = CompletionRequest(messages=(Message("user", "weather in Paris and Oslo"),))
    events, result = [], None
    for event in client_for(ep).stream(ep, request):
        if event.kind == "done":
            result = event.result
        else:
            events.append(event.to_public_dict())
    calls = [c.to_public_dict() for c in result.tool_calls]
    assert [(c["id"], c["arguments"]) for c in calls] == [
        ("call_a", {"city": "Paris"}),
        ("call_b", {"city": "Oslo"}),
    ]
    events.append(
        {"type": "done", "result": {"tool_calls": calls, "finish_reason": "tool_calls", "usage": {}}}
    )
    assert formatter(events) == expected(calls)
