"""Anthropic prompt caching: the caller's breakpoints kept; platform-built requests cache their prefix."""

from __future__ import annotations

from decimal import Decimal

import pytest

from routing.providers import CompletionRequest, Message, ToolSpec, client_for
from routing.providers.types import ContentPart
from tests.routing.conftest import MODELS


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


EPHEMERAL = {"type": "ephemeral"}
LONG_SYSTEM = "You are a careful assistant. " * 200
TOOL = ToolSpec(
    "get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def test_the_callers_breakpoints_and_blocks_reach_anthropic_as_sent(fake, endpoint_factory):
    request = CompletionRequest(
        messages=(
            Message(
                "system",
                LONG_SYSTEM + "Rules.",
                parts=(ContentPart(LONG_SYSTEM, EPHEMERAL), ContentPart("Rules.")),
            ),
            Message(
                "user",
                "Question one.",
                parts=(ContentPart("Question one.", {"type": "ephemeral", "ttl": "1h"}),),
            ),
        ),
        tools=(TOOL,),
    )
    ep = endpoint_factory("anthropic")
    client_for(ep).complete(ep, request)
    body = fake.calls(model=MODELS["anthropic"])[0]["body"]
    assert body["system"] == [
        {"type": "text", "text": LONG_SYSTEM, "cache_control": EPHEMERAL},
        {"type": "text", "text": "Rules."},
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Question one.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        }
    ]
    assert "cache_control" not in body["tools"][0]  # the caller chose its breakpoints: none added


def test_a_platform_built_request_caches_its_stable_prefix_and_the_next_turn_reads_it(fake, endpoint_factory):
    ep = endpoint_factory(
        "anthropic",
        price_input_per_mtok=Decimal("3"),
        price_cached_input_per_mtok=Decimal("0.30"),
        price_cache_write_per_mtok=Decimal("3.75"),
        price_output_per_mtok=Decimal("15"),
    )

    def turn(text: str):
        request = CompletionRequest(
            messages=(Message("system", LONG_SYSTEM), Message("user", text)), tools=(TOOL,)
        )
        return client_for(ep).complete(ep, request)

    first = turn("first question")
    body = fake.calls(model=MODELS["anthropic"])[0]["body"]
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert body["system"] == [{"type": "text", "text": LONG_SYSTEM, "cache_control": EPHEMERAL}]
    assert first.usage.cache_write_tokens > 1000 and first.usage.cached_input_tokens == 0

    second = turn("second question")
    assert second.usage.cached_input_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    u = second.usage
    assert (
        second.cost_usd
        == (
            Decimal(u.uncached_input_tokens) * 3
            + Decimal(u.cached_input_tokens) * Decimal("0.30")
            + Decimal(u.output_tokens) * 15
        )
        / 10**6
    )
