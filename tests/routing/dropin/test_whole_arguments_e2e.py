"""Tool-call arguments an upstream gives whole, not in deltas, reach every drop-in stream.

Live server + a real Celery worker + simulated upstreams sending exact scripted wire bytes
(:mod:`tests.wire`), read through the official ``openai`` and ``anthropic`` SDKs' own stream
accumulators: a Responses stream that carries a call's arguments only in
``function_call_arguments.done`` / ``output_item.done``, and an Anthropic-compatible stream that
puts the whole ``input`` in ``content_block_start``. Each drop-in stream and the stored result
hold the call's arguments.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from routing.models import CompletionJob
from tests.conftest import wait_for_records_written
from tests.factories import api_key, seed_catalogue
from tests.wire import anthropic_whole_input_stream, responses_whole_arguments_stream

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARGS = {"city": "Paris", "days": 3}
TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
#: upstream style -> (catalogue model, its upstream model, wire script)
UPSTREAMS = {
    "responses_arguments_done": (
        "azure/muse-special",
        "muse-special",
        lambda m: responses_whole_arguments_stream(m, "call_w1", "get_weather", ARGS, "arguments_done"),
    ),
    "responses_item_done": (
        "azure/muse-special",
        "muse-special",
        lambda m: responses_whole_arguments_stream(m, "call_w1", "get_weather", ARGS, "item_done"),
    ),
    "anthropic_block_start": (
        "anthropic/claude-sonnet-5-5",
        "claude-sonnet-5-5",
        lambda m: anthropic_whole_input_stream(m, "call_w1", "get_weather", ARGS),
    ),
}


@pytest.fixture
def platform(live_server, upstreams, celery_worker_process):
    seed_catalogue(upstreams.url)
    return live_server.url, api_key(["completions"]), upstreams


def via_chat(url: str, key: str, model: str) -> list[tuple[str, str, dict]]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    with client.chat.completions.stream(
        model=model,
        messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
        tools=[{"type": "function", "function": TOOL}],
    ) as stream:
        message = stream.get_final_completion().choices[0].message
    return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def via_responses(url: str, key: str, model: str) -> list[tuple[str, str, dict]]:
    """The calls as a streaming client assembles them from ``function_call_arguments.delta``
    events, checked against ``function_call_arguments.done`` and ``response.completed``."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    items: dict[str, dict] = {}
    done: dict[str, str] = {}
    with client.responses.stream(
        model=model, input="Weather in Paris for 3 days?", tools=[{"type": "function", **TOOL}]
    ) as stream:
        for event in stream:
            if event.type == "response.output_item.added" and event.item.type == "function_call":
                items[event.item.id] = {"call_id": event.item.call_id, "name": event.item.name, "args": ""}
            elif event.type == "response.function_call_arguments.delta":
                items[event.item_id]["args"] += event.delta
            elif event.type == "response.function_call_arguments.done":
                done[event.item_id] = event.arguments
        final = stream.get_final_response()
    streamed = [(i["call_id"], i["name"], json.loads(i["args"])) for i in items.values()]
    assert {k: json.loads(v) for k, v in done.items()} == {k: json.loads(i["args"]) for k, i in items.items()}
    completed = [
        (o.call_id, o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"
    ]
    assert completed == streamed
    return streamed


def via_messages(url: str, key: str, model: str) -> list[tuple[str, str, dict]]:
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    with client.messages.stream(
        model=model,
        max_tokens=200,
        messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
        tools=[
            {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}
        ],
    ) as stream:
        message = stream.get_final_message()
    return [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]


@pytest.mark.parametrize(
    "dropin", [via_chat, via_responses, via_messages], ids=["chat", "responses", "messages"]
)
@pytest.mark.parametrize("style", list(UPSTREAMS))
def test_arguments_given_whole_reach_every_drop_in_stream_and_the_stored_result(platform, style, dropin):
    url, key, upstreams = platform
    model, upstream_model, script = UPSTREAMS[style]
    upstreams.set_scenario(upstream_model, wire=script(upstream_model))
    calls = dropin(url, key, model)
    assert [(name, args) for _, name, args in calls] == [("get_weather", ARGS)]
    wait_for_records_written()
    job = CompletionJob.objects.get()
    assert [(c["name"], c["arguments"]) for c in job.result["tool_calls"]] == [("get_weather", ARGS)]
    assert calls[0][0] == job.result["tool_calls"][0]["id"]
