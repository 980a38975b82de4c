"""Cost of a call: normalised :class:`~routing.providers.types.Usage` at an endpoint's prices.

Django-free. Prices are USD per million tokens (:class:`~routing.providers.types.EndpointConfig`);
costs are exact ``Decimal`` USD.
"""

from __future__ import annotations

from decimal import Decimal

from routing.providers.types import EndpointConfig, Usage

MILLION = Decimal(1_000_000)


def compute_cost_usd(usage: Usage, endpoint: EndpointConfig) -> Decimal:
    """Cost in USD (exact ``Decimal``) of ``usage`` at ``endpoint``'s per-million prices.

    ``uncached*input + cached*cached_input + cache_write_5m*cache_write + cache_write_1h*
    cache_write_1h + output*output``, all divided by 10**6; ``uncached = input_tokens -
    cached_input_tokens - cache_write_tokens``, ``cache_write_5m = cache_write_tokens -
    cache_write_1h_tokens`` (normalised usage, see :class:`Usage`). Missing cached/cache-write
    prices fall back to the input price, a missing 1-hour write price to the 5-minute one.
    Anthropic prices a 1-hour write at 2x and a 5-minute write at 1.25x the input price:
    https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing
    """
    p_in = endpoint.price_input_per_mtok
    p_cached = (
        endpoint.price_cached_input_per_mtok if endpoint.price_cached_input_per_mtok is not None else p_in
    )
    p_write = endpoint.price_cache_write_per_mtok if endpoint.price_cache_write_per_mtok is not None else p_in
    p_write_1h = endpoint.price_cache_write_1h_per_mtok
    p_write_1h = p_write if p_write_1h is None else p_write_1h
    write_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    total = (
        Decimal(usage.uncached_input_tokens) * p_in
        + Decimal(usage.cached_input_tokens) * p_cached
        + Decimal(usage.cache_write_tokens - write_1h) * p_write
        + Decimal(write_1h) * p_write_1h
        + Decimal(usage.output_tokens) * endpoint.price_output_per_mtok
    )
    return total / MILLION
