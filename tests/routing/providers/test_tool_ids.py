"""Tool-call ids minted elsewhere reach each provider in a form it accepts, over real HTTP."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing.providers import CompletionRequest, Message, client_for
from routing.providers.tool_ids import RULES, ToolIdMap, provider_tool_id
from routing.providers.types import ToolCall
from tests.routing.conftest import ALL_ENDPOINTS, MODELS
from tests.wire import frame


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


FOREIGN = "functions.get_weather:0"
LONG = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"  # 53 characters


@given(st.text(min_size=1, max_size=120))
def test_a_mapped_id_is_accepted_stable_and_distinct(original):
    for style, rule in RULES.items():
        mapped = provider_tool_id(original, rule)
        assert rule.accepts(mapped), style
        assert provider_tool_id(original, rule) == mapped
        if rule.accepts(original):
            assert mapped == original
        else:
            assert mapped != provider_tool_id(original + "x", rule)


def test_anthropic_ids_follow_the_pattern_and_chat_ids_the_40_character_limit():
    anthropic = provider_tool_id(FOREIGN, RULES["messages"])
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", anthropic) and anthropic.startswith("functions_get_weather_0_")
    assert len(provider_tool_id(LONG, RULES["chat_completions"])) == 40
    assert provider_tool_id(LONG, RULES["responses"]) == LONG  # within 64
    ids = ToolIdMap("messages")
    assert ids.back(ids.out(FOREIGN)) == FOREIGN


def history(call_id: str) -> CompletionRequest:
    return CompletionRequest(
        messages=(
            Message("user", "weather in Paris?"),
            Message("assistant", "", tool_calls=(ToolCall(call_id, "get_weather", {"city": "Paris"}),)),
            Message("tool", "18C", tool_call_id=call_id),
        )
    )


def sent_ids(body: dict, name: str) -> list[str]:
    if name == "anthropic":
        return [
            b.get("id") or b.get("tool_use_id")
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
        ]
    if "input" in body:
        return [i["call_id"] for i in body["input"] if "call_id" in i]
    return [
        m.get("tool_call_id") or m["tool_calls"][0]["id"]
        for m in body["messages"]
        if m["role"] in ("assistant", "tool")
    ]


@pytest.mark.parametrize("call_id", [FOREIGN, LONG])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_foreign_ids_in_history_are_mapped_the_same_in_the_call_and_its_result(
    fake, endpoint_factory, name, call_id
):
    ep = endpoint_factory(name)
    result = client_for(ep).complete(ep, history(call_id))
    assert result.text  # not a provider 400
    [call] = fake.calls(model=MODELS[name])
    first = sent_ids(call["body"], name)
    assert len(first) == 2 and first[0] == first[1]
    client_for(ep).complete(ep, history(call_id))  # the next turn of the session maps it the same way
    assert sent_ids(fake.calls(model=MODELS[name])[-1]["body"], name) == first


def test_a_mapped_id_the_provider_echoes_back_is_returned_as_the_callers_id(fake, endpoint_factory):
    model = MODELS["anthropic"]
    mapped = provider_tool_id(FOREIGN, RULES["messages"])
    message = {"id": "msg_wire", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    block = {"type": "tool_use", "id": mapped, "name": "get_weather", "input": {}}
    fake.set_scenario(
        model,
        wire=[
            frame({"type": "message_start", "message": message}, "message_start"),
            frame({"type": "content_block_start", "index": 0, "content_block": block}, "content_block_start"),
            frame(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"city": "Oslo"}'},
                },
                "content_block_delta",
            ),
            frame({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            frame(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 9},
                },
                "message_delta",
            ),
            frame({"type": "message_stop"}, "message_stop"),
        ],
    )
    ep = endpoint_factory("anthropic")
    events = list(client_for(ep).stream(ep, history(FOREIGN)))
    assert events[0].tool_call.id == FOREIGN
    assert [c.id for c in events[-1].result.tool_calls] == [FOREIGN]
