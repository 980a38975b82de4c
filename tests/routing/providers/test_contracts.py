"""Output contracts reach every provider in its own terms, over real HTTP through the official
SDKs, and the simulated upstreams honour them (routing/providers/*: ``contract_kwargs``,
``anthropic_messages.tool_choice`` / ``output_format``)."""

from __future__ import annotations

import json

import pytest

from routing.providers import CompletionRequest, Message, ToolSpec, client_for
from routing.providers.contracts import OutputFormat, ToolChoice
from tests.routing.conftest import ALL_ENDPOINTS, MODELS


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


WEATHER = ToolSpec(
    "get_weather",
    "Weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec(
    "get_time", "Time", {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}
)
FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "array", "items": {"type": "object", "properties": {"high_c": {"type": "number"}},
                                             "required": ["high_c"], "additionalProperties": False}},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}  # fmt: skip
LOOSE = {"type": "object", "properties": {"city": {"type": "string", "minLength": 2}}}


def ask(text: str, **kw) -> CompletionRequest:
    return CompletionRequest(messages=(Message("user", text),), **kw)


def run(ep, request: CompletionRequest, stream: bool):
    client = client_for(ep)
    if not stream:
        return client.complete(ep, request)
    return next(e.result for e in client.stream(ep, request) if e.kind == "done")


def sent(fake, name: str) -> dict:
    return fake.calls(model=MODELS[name])[-1]["body"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_a_json_schema_reaches_every_provider_and_the_answer_follows_it(fake, endpoint_factory, name, stream):
    ep = endpoint_factory(name)
    fmt = OutputFormat("json_schema", schema=FORECAST, name="forecast", strict=True)
    result = run(ep, ask("Oslo", output_format=fmt), stream)
    answer = json.loads(result.text)
    assert answer == {"city": "Oslo", "days": [{"high_c": 1.5}]}
    body = sent(fake, name)
    if ep.api_style == "chat_completions":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "forecast", "schema": FORECAST, "strict": True},
        }
    elif ep.api_style == "responses":
        assert body["text"] == {
            "format": {"type": "json_schema", "name": "forecast", "schema": FORECAST, "strict": True}
        }
    else:
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": FORECAST}}


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_a_schema_from_a_caller_without_a_strict_flag_is_strict_only_where_openai_allows(
    fake, endpoint_factory, name
):
    """An Anthropic caller's schema (no strict flag; always enforced there) is sent ``strict`` to
    OpenAI when it meets strict mode's rules, else without the flag rather than refused; to
    Anthropic, as its SDK would send it (every object closed)."""
    ep = endpoint_factory(name)
    run(ep, ask("Oslo", output_format=OutputFormat("json_schema", schema=FORECAST)), False)
    strict = sent(fake, name)
    run(ep, ask("Oslo", output_format=OutputFormat("json_schema", schema=LOOSE)), False)
    loose = sent(fake, name)
    if ep.api_style == "chat_completions":
        assert strict["response_format"]["json_schema"]["strict"] is True
        assert "strict" not in loose["response_format"]["json_schema"]
    elif ep.api_style == "responses":
        assert strict["text"]["format"]["strict"] is True and "strict" not in loose["text"]["format"]
    else:
        schema = loose["output_config"]["format"]["schema"]
        assert schema["additionalProperties"] is False and "minLength" not in schema["properties"]["city"]


@pytest.mark.parametrize("name", [n for n in ALL_ENDPOINTS if n != "anthropic"])
def test_json_mode_reaches_the_openai_shaped_providers(fake, endpoint_factory, name):
    ep = endpoint_factory(name)
    result = run(ep, ask("Reply in JSON: Oslo", output_format=OutputFormat("json_object")), False)
    assert json.loads(result.text) == {
        "reply": f"{MODELS[name]} reply to: Reply in JSON: Oslo [quality=0.50]"
    }
    body = sent(fake, name)
    wire = body["response_format"] if ep.api_style == "chat_completions" else body["text"]["format"]
    assert wire == {"type": "json_object"}


def test_anthropic_has_no_json_mode_so_the_provider_refuses_it_unsent(fake, endpoint_factory):
    from routing.providers.errors import ClientRequestError

    ep = endpoint_factory("anthropic")
    with pytest.raises(ClientRequestError, match="no JSON mode"):
        run(ep, ask("Oslo", output_format=OutputFormat("json_object")), False)
    assert fake.call_count(model=MODELS["anthropic"]) == 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_a_named_tool_choice_is_forced_on_every_provider(fake, endpoint_factory, name, stream):
    """The scenario would never call a tool; the forced choice makes the call, of the named tool,
    also right after a tool result. Anthropic gets it without thinking (thinking allows only
    auto and none)."""
    fake.set_scenario(MODELS[name], tool_calls="never")
    ep = endpoint_factory(name)
    result = run(
        ep, ask("Lisbon", tools=(WEATHER, TIME), tool_choice=ToolChoice("required", "get_time")), stream
    )
    assert [(c.name, dict(c.arguments)) for c in result.tool_calls] == [("get_time", {"tz": "Lisbon"})]
    body = sent(fake, name)
    expected = {
        "chat_completions": {"type": "function", "function": {"name": "get_time"}},
        "responses": {"type": "function", "name": "get_time"},
        "messages": {"type": "tool", "name": "get_time"},
    }[ep.api_style]
    assert body["tool_choice"] == expected
    if name == "anthropic":
        assert "thinking" not in body


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_required_and_none_tool_choices_reach_every_provider(fake, endpoint_factory, name):
    ep = endpoint_factory(name)
    fake.set_scenario(MODELS[name], tool_calls="never")
    forced = run(ep, ask("Lisbon", tools=(WEATHER,), tool_choice=ToolChoice("required")), False)
    assert [c.name for c in forced.tool_calls] == ["get_weather"]
    assert sent(fake, name)["tool_choice"] == ({"type": "any"} if name == "anthropic" else "required")
    fake.set_scenario(MODELS[name], tool_calls="auto")
    none = run(ep, ask("Lisbon", tools=(WEATHER,), tool_choice=ToolChoice("none")), False)
    assert none.tool_calls == () and none.text.startswith(MODELS[name])
    assert sent(fake, name)["tool_choice"] == ({"type": "none"} if name == "anthropic" else "none")
    if name == "anthropic":
        assert "thinking" in sent(fake, name)  # none is allowed with thinking


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_no_parallel_tool_calls_reaches_every_provider(fake, endpoint_factory, name, stream):
    fake.set_scenario(MODELS[name], tool_calls="parallel")
    ep = endpoint_factory(name)
    result = run(ep, ask("Lisbon", tools=(WEATHER, TIME), parallel_tool_calls=False), stream)
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    body = sent(fake, name)
    if name == "anthropic":
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    else:
        assert body["parallel_tool_calls"] is False


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_tool_contracts_are_not_sent_without_tools(fake, endpoint_factory, name):
    """OpenAI refuses tool_choice and parallel_tool_calls without tools, Anthropic tool_choice:
    without tools there is nothing to force or to parallelise."""
    ep = endpoint_factory(name)
    result = run(ep, ask("Hi", tool_choice=ToolChoice("none"), parallel_tool_calls=False), False)
    body = sent(fake, name)
    assert "tool_choice" not in body and "parallel_tool_calls" not in body and result.text


def test_the_allowed_tools_and_a_forced_tool_survive_a_variants_filter():
    request = ask(
        "x",
        tools=(WEATHER, TIME),
        allowed_tools=("get_weather",),
        tool_choice=ToolChoice("required", "get_time"),
    )
    assert [t.name for t in request.effective_tools()] == ["get_weather", "get_time"]
    allowed = ask("x", tools=(WEATHER, TIME), tool_choice=ToolChoice("required", allowed=("get_time",)))
    assert [t.name for t in allowed.effective_tools()] == ["get_time"]
