"""Provider clients over real HTTP against the fake upstreams, through the official SDKs."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from routing.providers import CompletionRequest, Message, ToolSpec, client_for
from tests.routing.conftest import ALL_ENDPOINTS, API_VERSION, AZURE_DEPLOYMENT, MODELS, second_turn


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec(
    "get_time",
    "Time in a zone",
    {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
)


def ask(text: str, **kw) -> CompletionRequest:
    return CompletionRequest(messages=(Message("system", "Be brief."), Message("user", text)), **kw)


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_text_reply(fake, endpoint_factory, name):
    ep = endpoint_factory(name)
    result = client_for(ep).complete(ep, ask("Hello world"))
    assert result.text == f"{MODELS[name]} reply to: Hello world [quality=0.50]"
    assert result.finish_reason == "stop"
    assert result.tool_calls == ()
    assert result.endpoint_id == f"ep-{name}" and result.upstream_model == MODELS[name]
    assert result.latency_ms > 0
    call = fake.calls(model=MODELS[name])
    assert len(call) == 1
    assert result.upstream_request_id and result.upstream_request_id.endswith(call[0]["request_id"][-12:])
    body = call[0]["body"]
    if name == "anthropic":
        # system as blocks, with the platform's cache breakpoint on this stable prefix
        assert body["system"] == [
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        ]
        assert body["max_tokens"] == 4096
    elif ep.api_style == "responses":
        assert body["instructions"] == "Be brief." and body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
    else:
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_parallel_tool_calls_with_json_arguments(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], tool_calls="parallel")
    ep = endpoint_factory(name)
    result = client_for(ep).complete(ep, ask("Lisbon", tools=(WEATHER, TIME)))
    assert result.finish_reason == "tool_calls"
    assert [(tc.name, dict(tc.arguments)) for tc in result.tool_calls] == [
        ("get_weather", {"city": "Lisbon"}),
        ("get_time", {"tz": "Lisbon"}),
    ]
    assert len({tc.id for tc in result.tool_calls}) == 2


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_tool_result_round_trip_and_allowed_tools(fake, endpoint_factory, name):
    ep = endpoint_factory(name)
    client = client_for(ep)
    first = client.complete(ep, ask("Lisbon", tools=(WEATHER, TIME), allowed_tools=("get_weather",)))
    assert [tc.name for tc in first.tool_calls] == ["get_weather"]
    sent = fake.calls(model=MODELS[name])[0]["body"]["tools"]
    assert len(sent) == 1
    follow = CompletionRequest(
        messages=(
            Message("user", "Lisbon"),
            Message("assistant", first.text, tool_calls=first.tool_calls),
            Message("tool", "22C sunny", tool_call_id=first.tool_calls[0].id),
        ),
        tools=(WEATHER,),
    )
    second = client.complete(ep, follow)
    assert second.finish_reason == "stop" and second.text
    body = fake.calls(model=MODELS[name])[1]["body"]
    call_id = first.tool_calls[0].id
    if name == "anthropic":
        assert body["messages"][1]["content"][-1] == {
            "type": "tool_use",
            "id": call_id,
            "name": "get_weather",
            "input": {"city": "Lisbon"},
        }
        assert body["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": call_id, "content": "22C sunny"}
        ]
    elif ep.api_style == "responses":
        fc = next(i for i in body["input"] if i.get("type") == "function_call")
        assert (fc["call_id"], fc["name"], json.loads(fc["arguments"])) == (
            call_id,
            "get_weather",
            {"city": "Lisbon"},
        )
        assert body["input"][-1] == {
            "type": "function_call_output",
            "call_id": call_id,
            "output": "22C sunny",
        }
    else:
        assert body["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": "22C sunny"}
        assert body["messages"][-2]["tool_calls"][0]["id"] == call_id


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_streaming_text(fake, endpoint_factory, name):
    ep = endpoint_factory(name)
    events = list(client_for(ep).stream(ep, ask("one two three")))
    assert events[-1].kind == "done"
    text = "".join(e.text for e in events if e.kind == "text_delta")
    assert text == f"{MODELS[name]} reply to: one two three [quality=0.50]"
    assert sum(e.kind == "text_delta" for e in events) > 3
    result = events[-1].result
    assert result.text == text and result.finish_reason == "stop"
    assert result.usage.output_tokens > 0 and result.usage.input_tokens > 0
    assert result.time_to_first_token_ms is not None and result.latency_ms >= result.time_to_first_token_ms
    assert result.upstream_request_id
    assert fake.call_count(MODELS[name]) == 1 and fake.calls()[0]["stream"] is True


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_streaming_parallel_tool_call_deltas(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], tool_calls="parallel")
    ep = endpoint_factory(name)
    events = list(client_for(ep).stream(ep, ask("Kyiv", tools=(WEATHER, TIME))))
    deltas = [e.tool_call for e in events if e.kind == "tool_call_delta"]
    assembled: dict[int, dict] = {}
    for d in deltas:
        entry = assembled.setdefault(d.index, {"id": None, "name": None, "args": ""})
        entry["id"] = d.id or entry["id"]
        entry["name"] = d.name or entry["name"]
        entry["args"] += d.arguments_delta
    assert sorted(assembled) == [0, 1]
    assert [(assembled[i]["name"], json.loads(assembled[i]["args"])) for i in (0, 1)] == [
        ("get_weather", {"city": "Kyiv"}),
        ("get_time", {"tz": "Kyiv"}),
    ]
    assert sum(1 for d in deltas if d.arguments_delta) >= 4  # arguments arrive in pieces
    result = events[-1].result
    assert result.finish_reason == "tool_calls"
    assert [tc.id for tc in result.tool_calls] == [assembled[0]["id"], assembled[1]["id"]]


# Exact usage and cost with hand-computed values. Scenario usage is provider-neutral and inclusive:
# input 1000 (of which 400 cache reads and 100 cache writes), output 200 (of which 50 reasoning).
PRICES = {
    "price_input_per_mtok": Decimal("2.50"),
    "price_cached_input_per_mtok": Decimal("0.25"),
    "price_cache_write_per_mtok": Decimal("3.00"),
    "price_output_per_mtok": Decimal("10"),
}
# uncached = 1000 - 400 - 100 = 500 -> 500*2.5 + 400*0.25 + 100*3 + 200*10 = 1250+100+300+2000 = 3650
EXPECTED_COST = Decimal("0.00365")


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_usage_and_cost_exact(fake, endpoint_factory, name, stream):
    anthropic = name == "anthropic"
    chat = name in ("native", "openai_chat")
    fake.set_scenario(
        MODELS[name],
        input_tokens=1000,
        cached_tokens=400,
        # Chat Completions reports no cache writes: keep that case to reads only.
        cache_write_tokens=0 if chat else 100,
        output_tokens=200,
        reasoning_tokens=50,
    )
    ep = endpoint_factory(name, **PRICES)
    client = client_for(ep)
    result = (
        next(e.result for e in client.stream(ep, ask("x")) if e.kind == "done")
        if stream
        else client.complete(ep, ask("x"))
    )
    u = result.usage
    assert (u.input_tokens, u.cached_input_tokens, u.output_tokens) == (1000, 400, 200)
    if chat:
        assert u.cache_write_tokens == 0 and u.reasoning_tokens == 50
        # 600*2.5 + 400*0.25 + 200*10 = 1500+100+2000 = 3600
        assert result.cost_usd == Decimal("0.0036")
    else:
        assert u.cache_write_tokens == 100
        assert result.cost_usd == EXPECTED_COST
    if anthropic:
        # Anthropic's own input_tokens excludes cache reads and writes.
        assert u.vendor["input_tokens"] == 500
        assert u.vendor["cache_read_input_tokens"] == 400
        assert u.reasoning_tokens == 0  # not reported by the API unless output_tokens_details is sent
    elif not chat:
        assert u.reasoning_tokens == 50 and u.vendor["input_tokens"] == 1000
    assert result.to_public_dict()["cost_usd"] == str(result.cost_usd)


def test_azure_dated_and_v1_urls(fake, endpoint_factory):
    dated = endpoint_factory("azure_dated")
    v1 = endpoint_factory("azure_v1")
    client_for(dated).complete(dated, ask("a"))
    client_for(v1).complete(v1, ask("b"))
    first, second = fake.calls()
    assert (first["path"], first["query"]) == ("/openai/responses", {"api-version": API_VERSION})
    assert first["headers"]["api-key"] == "<redacted>" and first["model"] == AZURE_DEPLOYMENT
    assert (second["path"], second["query"]) == ("/openai/v1/responses", {})
    assert second["headers"]["authorization"] == "<redacted>"


def test_azure_chat_completions_deployment_path(fake, endpoint_factory):
    ep = endpoint_factory("azure_dated", api_style="chat_completions")
    result = client_for(ep).complete(ep, ask("hi"))
    assert result.text.startswith(AZURE_DEPLOYMENT)
    assert fake.calls()[0]["path"] == f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions"


def test_overrides_are_sent(fake, endpoint_factory):
    req = ask("x", reasoning_effort="low", temperature=0.2, max_output_tokens=77)
    for name in ("native", "openai_chat", "openai_responses", "anthropic"):
        ep = endpoint_factory(name)
        client_for(ep).complete(ep, req)
    native, chat, responses, anthropic = (c["body"] for c in fake.calls())
    assert (native["max_tokens"], native["reasoning_effort"], native["temperature"]) == (77, "low", 0.2)
    assert (chat["max_completion_tokens"], chat["reasoning_effort"]) == (77, "low")
    assert (responses["max_output_tokens"], responses["reasoning"], responses["temperature"]) == (
        77,
        {"effort": "low"},
        0.2,
    )
    assert (anthropic["max_tokens"], anthropic["output_config"], anthropic["temperature"]) == (
        77,
        {"effort": "low"},
        0.2,
    )
    assert anthropic["thinking"] == {"type": "adaptive"}


def test_sdk_clients_are_cached_per_endpoint_and_credential(fake, endpoint_factory):
    from routing.providers._openai_common import openai_sdk_client

    a = endpoint_factory("openai_chat")
    assert openai_sdk_client(a) is openai_sdk_client(endpoint_factory("openai_chat"))
    assert openai_sdk_client(a) is not openai_sdk_client(
        endpoint_factory("openai_chat", credential="sk-other")
    )
    assert openai_sdk_client(a).max_retries == 0


@pytest.mark.parametrize("name", ["native", "openai_chat"])
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_the_chat_body_posted_as_it_is_equals_what_the_sdks_create_would_send(
    fake, endpoint_factory, name, stream
):
    """The Chat Completions client posts its body with ``client.post`` (no parameter transform,
    0.96 ms per call): the installed SDK's transform must leave such a body unchanged."""
    from openai._utils import maybe_transform
    from openai.types.chat import completion_create_params as params

    from routing.providers.openai_chat import build_chat_kwargs
    from routing.providers.types import ToolCall

    request = CompletionRequest(
        messages=(
            Message("system", "Be brief."),
            Message("user", "Weather in Lima and Quito?"),
            Message(
                "assistant",
                "",
                tool_calls=(ToolCall("c1", "weather", {"city": "Lima", "when": {"__type__": "datetime"}}),),
            ),
            Message("tool", "25C", tool_call_id="c1"),
        ),
        tools=(
            ToolSpec(
                "weather", "Weather by city", {"type": "object", "properties": {"city": {"type": "string"}}}
            ),
        ),
        reasoning_effort="low",
        temperature=0.2,
        max_output_tokens=64,
    )
    body = build_chat_kwargs(endpoint_factory(name), request)
    if stream:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    shape = params.CompletionCreateParamsStreaming if stream else params.CompletionCreateParamsNonStreaming
    assert maybe_transform(body, shape) == body
    assert len(body["messages"]) == 4 and body["tools"][0]["function"]["name"] == "weather"


@pytest.mark.parametrize("name", ["openai_responses", "azure_dated", "azure_v1"])
def test_the_responses_body_posted_as_it_is_equals_what_the_sdks_create_would_send(
    fake, endpoint_factory, name
):
    """The Responses client posts its body with ``client.post`` (no parameter transform, 1.6 ms
    per call with reasoning items): on a second turn replaying real encrypted reasoning, a tool
    call and its output, the installed SDK's transform leaves the body unchanged, streamed or
    not, and the upstream receives exactly that body, authenticated with the endpoint's key."""
    from openai._utils import maybe_transform
    from openai.types.responses import response_create_params as params

    from routing.providers.openai_responses import build_responses_kwargs

    endpoint = endpoint_factory(name)
    turn2 = second_turn(fake, endpoint, reasoning=True, temperature=0.2, max_output_tokens=64)
    body = build_responses_kwargs(endpoint, turn2)
    kinds = [item.get("type") for item in body["input"]]
    assert "reasoning" in kinds and "function_call" in kinds and "function_call_output" in kinds
    assert maybe_transform(body, params.ResponseCreateParamsNonStreaming) == body
    streamed = {**body, "stream": True}
    assert maybe_transform(streamed, params.ResponseCreateParamsStreaming) == streamed

    for stream in (False, True):
        if stream:
            list(client_for(endpoint).stream(endpoint, turn2))
        else:
            client_for(endpoint).complete(endpoint, turn2)
        call = fake.calls(model=MODELS[name])[-1]
        assert call["auth_ok"] and call["api"] == "responses"
        sent = {k: v for k, v in call["body"].items() if k != "stream"}
        assert sent == build_responses_kwargs(endpoint, turn2)
        assert call["stream"] is stream
