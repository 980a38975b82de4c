"""Claude cache writes priced by their TTL: 5 minutes at 1.25x input, 1 hour at 2x input.

Anthropic's usage splits ``cache_creation_input_tokens`` into ``cache_creation:
{ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}``
(https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing). The issue's usage
(20 uncached input, 10,000 written, 500 output tokens) cost $0.04506 at the catalogue's Claude
prices whatever the TTL; written for an hour it costs $0.06756.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from routing.catalogue import endpoint_seeds
from routing.providers import CompletionRequest, Message, client_for
from routing.providers.anthropic_messages import anthropic_usage
from routing.providers.pricing import compute_cost_usd
from routing.providers.types import EndpointConfig
from tests.routing.conftest import MODELS
from tests.wire import anthropic_stream


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


ASK = CompletionRequest(messages=(Message("user", "Hello"),))
SONNET = next(e for e in endpoint_seeds() if e.public_id == "anthropic/claude-sonnet-5-5")


def usage(five_min: int, one_hour: int, *, split: bool = True) -> dict:
    """The issue's Anthropic usage with ``five_min`` + ``one_hour`` cache-write tokens."""
    raw = {
        "input_tokens": 20,
        "cache_creation_input_tokens": five_min + one_hour,
        "cache_read_input_tokens": 0,
        "output_tokens": 500,
    }
    if split:
        raw["cache_creation"] = {"ephemeral_5m_input_tokens": five_min, "ephemeral_1h_input_tokens": one_hour}
    return raw


def test_the_catalogue_prices_claude_cache_writes_by_ttl():
    prices = SONNET.price_fields()
    assert (prices["price_cache_write_per_mtok"], prices["price_cache_write_1h_per_mtok"]) == (
        Decimal("3.75"),
        Decimal("6.0"),
    )
    assert prices["price_cache_write_1h_per_mtok"] == 2 * prices["price_input_per_mtok"]
    avocado = endpoint_seeds()[0].price_fields()
    assert avocado["price_cache_write_1h_per_mtok"] == avocado["price_cache_write_per_mtok"]


@pytest.mark.parametrize(
    ("five_min", "one_hour", "split", "cost"),
    [
        (10_000, 0, True, "0.04506"),  # 20 x $3 + 10,000 x $3.75 + 500 x $15 per million
        (10_000, 0, False, "0.04506"),  # no split reported: the default 5-minute TTL
        (0, 10_000, True, "0.06756"),  # 20 x $3 + 10,000 x $6 + 500 x $15 per million
        (6_000, 4_000, True, "0.05406"),  # 20 x $3 + 6,000 x $3.75 + 4,000 x $6 + 500 x $15
    ],
)
def test_a_stream_costs_each_cache_write_at_its_ttls_price(
    fake, endpoint_factory, five_min, one_hour, split, cost
):
    model = MODELS["anthropic"]
    start = {**usage(five_min, one_hour, split=split), "output_tokens": 1}
    fake.set_scenario(
        model,
        wire=anthropic_stream(
            model, start_usage=start, delta_usage={"input_tokens": 20, "output_tokens": 500}
        ),
    )
    ep = endpoint_factory("anthropic", **SONNET.price_fields())
    result = [e for e in client_for(ep).stream(ep, ASK) if e.kind == "done"][0].result
    u = result.usage
    assert (u.input_tokens, u.cache_write_tokens, u.cache_write_1h_tokens, u.output_tokens) == (
        10_020,
        10_000,
        one_hour,
        500,
    )
    assert result.cost_usd == Decimal(cost)


def test_a_non_streamed_answer_costs_a_one_hour_write_at_the_one_hour_price(fake, endpoint_factory):
    model = MODELS["anthropic"]
    body = {
        "id": "msg_wire", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": usage(0, 10_000),
    }  # fmt: skip
    fake.set_scenario(model, wire_body=body)
    ep = endpoint_factory("anthropic", **SONNET.price_fields())
    result = client_for(ep).complete(ep, ASK)
    assert result.usage.cache_write_1h_tokens == 10_000
    assert result.cost_usd == Decimal("0.06756")
    assert result.to_public_dict()["usage"]["cache_write_1h_tokens"] == 10_000


def test_the_issue_figures_from_the_usage_alone():
    """What the issue measured: the same usage at the 5-minute rate, and at its own 1-hour rate."""
    config = EndpointConfig(
        public_id="anthropic/claude-sonnet-5-5",
        provider_kind="anthropic",
        base_url="https://api.anthropic.com",
        upstream_model="claude-sonnet-5-5",
        api_style="messages",
        credential="unused",
        **SONNET.price_fields(),
    )
    one_hour = anthropic_usage(usage(0, 10_000))
    assert compute_cost_usd(one_hour, config) == Decimal("0.06756")
    as_before = anthropic_usage(usage(10_000, 0))
    assert compute_cost_usd(as_before, config) == Decimal("0.04506")
