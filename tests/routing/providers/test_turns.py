"""Requests each provider accepts: what one would refuse (empty text, null content) is never sent.

The simulated upstreams answer what the real APIs refuse with the real 400 (its message and
error shape), so these run over HTTP: a request we build that a provider would refuse fails here.
"""

from __future__ import annotations

import anthropic
import httpx
import pytest

from routing.providers import CompletionRequest, Message, ToolCall, client_for
from routing.providers.anthropic_turns import acceptable_messages
from routing.providers.types import ContentPart
from routing.simulated import DEFAULT_API_KEYS
from tests.routing.conftest import ALL_ENDPOINTS, MODELS, WEATHER_TOOL


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


CALL = ToolCall("call_1", "get_weather", {"city": "Bern"})
#: The issue's conversation: an assistant turn with empty content and no tool call.
EMPTY_ASSISTANT_TURN = (
    Message("user", "Hi"),
    Message("assistant", ""),
    Message("user", "Weather in Bern?"),
)
#: Every kind of empty a conversation can hold, next to a tool-call turn with empty content.
EVERY_EMPTY = (
    Message("system", ""),
    Message("system", "Be brief."),
    Message("user", "Hi"),
    Message("assistant", ""),
    Message("user", "   \n"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "25C", tool_call_id="call_1"),
    Message("user", "", parts=(ContentPart(""),)),
    Message("assistant", " "),
    Message("user", "And tomorrow?"),
)


def anthropic_error(fake, body: dict) -> httpx.Response:
    return httpx.post(
        f"{fake.url}/v1/messages",
        headers={"x-api-key": DEFAULT_API_KEYS["anthropic"], "anthropic-version": "2023-06-01"},
        json={"model": MODELS["anthropic"], "max_tokens": 10, **body},
    )


def test_the_simulated_anthropic_refuses_an_empty_text_block_as_the_real_api_does(fake):
    r = anthropic_error(
        fake,
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": ""}]},
                {"role": "user", "content": "Weather in Bern?"},
            ]
        },
    )
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages: text content blocks must be non-empty",
        },
        "request_id": r.headers["request-id"],
    }
    assert r.headers["request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": " \n"}]}]},
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            {"messages": [{"role": "user", "content": ""}, {"role": "user", "content": "x"}]},
            "messages.0: all messages must have non-empty content except for the optional final assistant message",
        ),
        (
            {"system": [{"type": "text", "text": ""}], "messages": [{"role": "user", "content": "x"}]},
            "system: text content blocks must be non-empty",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "The answer is "},
                ]
            },
            "messages: final assistant content cannot end with trailing whitespace",
        ),
    ],
)
def test_the_simulated_anthropic_refuses_other_empty_content_with_the_apis_words(fake, body, message):
    r = anthropic_error(fake, body)
    assert (r.status_code, r.json()["error"]) == (400, {"type": "invalid_request_error", "message": message})


def test_the_simulated_anthropic_takes_an_empty_final_assistant_turn_and_a_tool_call_turn(fake):
    ok = anthropic_error(
        fake, {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]}
    )
    assert ok.status_code == 200
    sdk = anthropic.Anthropic(base_url=fake.url, api_key=DEFAULT_API_KEYS["anthropic"], max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        sdk.messages.create(
            model=MODELS["anthropic"],
            max_tokens=10,
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": ""}]},
                {"role": "user", "content": "x"},
            ],
        )
    sdk.close()
    assert err.value.body["error"]["message"] == "messages: text content blocks must be non-empty"


def test_the_simulated_openai_refuses_a_null_assistant_content_without_tool_calls(fake):
    r = httpx.post(
        f"{fake.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {DEFAULT_API_KEYS['openai']}"},
        json={
            "model": MODELS["openai_chat"],
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}],
        },
    )
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Invalid value for 'content': expected a string, got null."


def test_an_empty_assistant_turn_reaches_claude_merged_away(fake, endpoint_factory):
    """The issue's input: Anthropic answered 400; now the empty turn is dropped and the two user
    turns it separated are sent as one."""
    ep = endpoint_factory("anthropic")
    result = client_for(ep).complete(ep, CompletionRequest(messages=EMPTY_ASSISTANT_TURN))
    assert result.text
    [call] = fake.calls(model=MODELS["anthropic"])
    assert call["status"] == 200
    assert call["body"]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "Weather in Bern?"}],
        }
    ]


def test_a_tool_call_turn_with_empty_content_reaches_claude_without_a_text_block(fake, endpoint_factory):
    ep = endpoint_factory("anthropic")
    request = CompletionRequest(
        messages=(
            Message("user", "Weather in Bern?"),
            Message("assistant", "", tool_calls=(CALL,)),
            Message("tool", "25C", tool_call_id="call_1"),
        ),
        tools=(WEATHER_TOOL,),
    )
    client_for(ep).complete(ep, request)
    sent = fake.calls(model=MODELS["anthropic"])[0]["body"]["messages"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use"]
    assert sent[2]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_every_provider_takes_a_conversation_holding_every_kind_of_empty(
    fake, endpoint_factory, name, stream
):
    ep = endpoint_factory(name)
    request = CompletionRequest(messages=EVERY_EMPTY, tools=(WEATHER_TOOL,))
    client = client_for(ep)
    if stream:
        events = list(client.stream(ep, request))
        assert events[-1].kind == "done"
    else:
        client.complete(ep, request)
    [call] = fake.calls(model=MODELS[name])
    assert (call["status"], call["outcome"]) == (200, "ok")


def test_every_empty_is_dropped_and_same_role_turns_merged_for_claude(fake, endpoint_factory):
    ep = endpoint_factory("anthropic")
    client_for(ep).complete(ep, CompletionRequest(messages=EVERY_EMPTY, tools=(WEATHER_TOOL,)))
    body = fake.calls(model=MODELS["anthropic"])[0]["body"]
    assert [b["text"] for b in body["system"]] == ["Be brief."]
    assert body["messages"] == [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Bern"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "25C"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]


def test_chat_completions_sends_an_empty_string_not_null_for_an_empty_turn(fake, endpoint_factory):
    ep = endpoint_factory("openai_chat")
    client_for(ep).complete(ep, CompletionRequest(messages=EMPTY_ASSISTANT_TURN))
    sent = fake.calls(model=MODELS["openai_chat"])[0]["body"]["messages"]
    assert sent[1] == {"role": "assistant", "content": ""}


def test_responses_sends_no_item_for_an_empty_assistant_turn(fake, endpoint_factory):
    ep = endpoint_factory("openai_responses")
    client_for(ep).complete(ep, CompletionRequest(messages=EMPTY_ASSISTANT_TURN))
    sent = fake.calls(model=MODELS["openai_responses"])[0]["body"]["input"]
    assert sent == [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Weather in Bern?"}]


def test_a_breakpoint_on_a_dropped_block_moves_to_the_block_before_it():
    ephemeral = {"type": "ephemeral"}
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Long context."},
                {"type": "text", "text": "", "cache_control": ephemeral},
            ],
        }
    ]
    assert acceptable_messages(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "Long context.", "cache_control": ephemeral}]}
    ]


def test_merged_turns_keep_tool_results_and_thinking_first():
    thinking = {"type": "thinking", "thinking": "", "signature": "sig"}
    merged = acceptable_messages(
        [
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": [{"type": "text", "text": "Calling."}]},
            {
                "role": "assistant",
                "content": [thinking, {"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            },
            {"role": "user", "content": "More."},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        ]
    )
    assert [
        [b["type"] for b in m["content"]] if isinstance(m["content"], list) else m["content"] for m in merged
    ] == [
        "Go.",
        ["thinking", "text", "tool_use"],
        ["tool_result", "text"],
    ]
