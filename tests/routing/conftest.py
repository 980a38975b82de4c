"""Fixtures: one fake upstream server per session (reset per test) and endpoint configs.

Runs without Django (``-p no:django``); nothing here imports Django.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from routing.providers.base import sdk_clients
from routing.providers.types import CompletionRequest, EndpointConfig, Message, ToolSpec
from routing.simulated import DEFAULT_API_KEYS, FakeUpstreams

#: Azure deployment names keep dots/underscores verbatim.
AZURE_DEPLOYMENT = "o4-mini.prod_eu"
AZURE_V1_DEPLOYMENT = "gpt-5-mini.v1_eu"
API_VERSION = "2025-04-01-preview"
CANARY_KEY = "sk-canary-XXXX"

#: endpoint name -> upstream model (distinct per endpoint so call counts are per endpoint).
MODELS = {
    "native": "avocado-large",
    "openai_chat": "gpt-4.1-mini",
    "openai_responses": "o4-mini",
    "azure_dated": AZURE_DEPLOYMENT,
    "azure_v1": AZURE_V1_DEPLOYMENT,
    "anthropic": "claude-sonnet-4-6",
}
ALL_ENDPOINTS = tuple(MODELS)
REASONING_ENDPOINTS = ("openai_responses", "azure_dated", "azure_v1", "anthropic")


def pytest_addoption(parser, pluginmanager):
    """Let ``pytest -p no:django`` run these Django-free tests: without pytest-django the
    ``DJANGO_SETTINGS_MODULE`` ini key in pyproject.toml is unknown, and the configured
    ``filterwarnings = error`` turns that PytestConfigWarning into a hard failure."""
    if not pluginmanager.has_plugin("django"):
        parser.addini(
            "DJANGO_SETTINGS_MODULE", "(registered by tests/routing/conftest.py without pytest-django)"
        )


@pytest.fixture(scope="session")
def fake_server():
    fake = FakeUpstreams(models=list(MODELS.values()))
    fake.start()
    yield fake
    sdk_clients.clear()
    fake.stop()


@pytest.fixture
def fake(fake_server):
    fake_server.reset(scenarios=True)
    yield fake_server
    fake_server.reset(scenarios=True)


def make_endpoint(fake: FakeUpstreams, name: str, **overrides) -> EndpointConfig:
    url = fake.url
    base: dict = {
        "native": {
            "provider_kind": "native",
            "base_url": f"{url}/v1",
            "api_style": "chat_completions",
            "credential": DEFAULT_API_KEYS["native"],
        },
        "openai_chat": {
            "provider_kind": "openai",
            "base_url": f"{url}/v1",
            "api_style": "chat_completions",
            "credential": DEFAULT_API_KEYS["openai"],
        },
        "openai_responses": {
            "provider_kind": "openai",
            "base_url": f"{url}/v1",
            "api_style": "responses",
            "credential": DEFAULT_API_KEYS["openai"],
            "capabilities": frozenset({"tools", "streaming", "reasoning"}),
        },
        "azure_dated": {
            "provider_kind": "azure_openai",
            "base_url": url,
            "api_style": "responses",
            "api_version": API_VERSION,
            "credential": DEFAULT_API_KEYS["azure"],
            "capabilities": frozenset({"tools", "streaming", "reasoning"}),
        },
        "azure_v1": {
            "provider_kind": "azure_openai",
            "base_url": url,
            "api_style": "responses",
            "api_version": None,
            "credential": DEFAULT_API_KEYS["azure"],
            "capabilities": frozenset({"tools", "streaming", "reasoning"}),
        },
        "anthropic": {
            "provider_kind": "anthropic",
            "base_url": url,
            "api_style": "messages",
            "credential": DEFAULT_API_KEYS["anthropic"],
            "capabilities": frozenset({"tools", "streaming", "reasoning"}),
        },
    }[name]
    cfg = {
        "public_id": f"ep-{name}",
        "upstream_model": MODELS[name],
        "timeout_s": 5.0,
        "price_input_per_mtok": Decimal("1"),
        "price_output_per_mtok": Decimal("2"),
        **base,
        **overrides,
    }
    return EndpointConfig(**cfg)


@pytest.fixture
def endpoint_factory(fake):
    def factory(name: str, **overrides) -> EndpointConfig:
        return make_endpoint(fake, name, **overrides)

    return factory


@pytest.fixture(autouse=True)
def _fresh_routing_protection(request):
    """Each test starts with closed circuits and free concurrency slots (state lives in Redis or
    in this process and would otherwise leak between tests)."""
    from django.apps import apps

    if not apps.ready:  # Django-free provider tests
        yield
        return
    from routing.guards.circuit import breaker
    from routing.guards.concurrency import limiter
    from routing.guards.cooling import cooling_clear

    breaker().reset()
    limiter.reset()
    cooling_clear()
    yield


WEATHER_TOOL = ToolSpec(
    "get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def second_turn(
    fake: FakeUpstreams, endpoint: EndpointConfig, *, reasoning: bool, **fields
) -> CompletionRequest:
    """The turn after a tool call: a first turn is sent to ``endpoint`` (the fake answers with a
    tool call, and encrypted reasoning if ``reasoning``), then system + user + that assistant
    turn + the tool's output, with the first turn's reasoning state, ``reasoning_effort="low"``
    and any other ``fields``."""
    from routing.providers import client_for

    fake.set_scenario(endpoint.upstream_model, reasoning=reasoning)
    first = client_for(endpoint).complete(
        endpoint, CompletionRequest(messages=(Message("user", "Weather in Bern?"),), tools=(WEATHER_TOOL,))
    )
    assert first.tool_calls and (first.reasoning_state is not None) == reasoning
    return CompletionRequest(
        messages=(
            Message("system", "Be brief."),
            Message("user", "Weather in Bern?"),
            Message("assistant", first.text, tool_calls=first.tool_calls),
            Message("tool", "25C", tool_call_id=first.tool_calls[0].id),
        ),
        tools=(WEATHER_TOOL,),
        reasoning_state=(first.reasoning_state,) if reasoning else (),
        **{"reasoning_effort": "low", **fields},
    )
