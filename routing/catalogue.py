"""The seed model catalogue: 15 Avocado versions, ``azure/muse-special`` and two Claude models.

Ids are stable across machines: Avocado version *i* has id ``avocado/<md5("avocado-v<i>")>``.
Prices are USD per million tokens; Claude's cache writes cost 1.25x the input price with the
default 5-minute TTL and 2x with a 1-hour TTL
(https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing). Every seeded model honours JSON Schema outputs; the Claude
models have no JSON mode (Anthropic's API has none).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from decimal import Decimal

AVOCADO_VERSIONS = 15


def avocado_id(version: int) -> str:
    """``avocado/<32 lowercase hex>`` for Avocado version ``version`` (1-based)."""
    return "avocado/" + hashlib.md5(f"avocado-v{version}".encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class ProviderSeed:
    key: str
    kind: str
    base_url: str
    credential_env: str
    api_version: str = ""


@dataclass(frozen=True)
class EndpointSeed:
    public_id: str
    version_label: str
    provider: str
    upstream_model: str
    api_style: str
    supports_reasoning: bool
    prices: tuple[float, float, float, float]  # input, cached input, cache write (5 min), output (USD / Mtok)
    is_platform_default: bool = False
    supports_structured_output: bool = True  # a JSON Schema for the answer
    supports_json_mode: bool = True  # OpenAI JSON mode (json_object); Anthropic has none
    cache_write_1h_price: float | None = None  # 1-hour cache writes (USD / Mtok); None: the 5-minute price

    def price_fields(self) -> dict[str, Decimal]:
        """The :class:`~routing.models.ModelEndpoint` price fields of this seed (USD / Mtok)."""
        pin, pcached, pwrite, pout = (Decimal(str(p)) for p in self.prices)
        write_1h = pwrite if self.cache_write_1h_price is None else Decimal(str(self.cache_write_1h_price))
        return {
            "price_input_per_mtok": pin,
            "price_cached_input_per_mtok": pcached,
            "price_cache_write_per_mtok": pwrite,
            "price_cache_write_1h_per_mtok": write_1h,
            "price_output_per_mtok": pout,
        }


def provider_seeds(simulated_base_url: str | None) -> list[ProviderSeed]:
    """Providers; with ``simulated_base_url`` all point at the built-in simulated upstreams."""
    sim = simulated_base_url.rstrip("/") if simulated_base_url else None
    return [
        ProviderSeed(
            "avocado",
            "native",
            f"{sim}/v1" if sim else os.environ.get("AVOCADO_BASE_URL", "http://127.0.0.1:8900/v1"),
            "AVOCADO_API_KEY",
        ),
        ProviderSeed(
            "azure",
            "azure_openai",
            sim or os.environ.get("AZURE_OPENAI_ENDPOINT", "https://muse.openai.azure.com"),
            "AZURE_OPENAI_API_KEY",
            api_version="2025-04-01-preview",
        ),
        ProviderSeed(
            "anthropic",
            "anthropic",
            sim or os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
            "ANTHROPIC_API_KEY",
        ),
    ]


def endpoint_seeds() -> list[EndpointSeed]:
    seeds = [
        EndpointSeed(
            avocado_id(i),
            f"avocado-v{i}",
            "avocado",
            f"avocado-v{i}",
            "chat_completions",
            supports_reasoning=False,
            prices=(0.10, 0.025, 0.0, 0.40),
            is_platform_default=(i == AVOCADO_VERSIONS),
        )
        for i in range(1, AVOCADO_VERSIONS + 1)
    ]
    seeds += [
        EndpointSeed(
            "azure/muse-special",
            "muse-special",
            "azure",
            "muse-special",
            "responses",
            True,
            (1.25, 0.125, 0.0, 10.0),
        ),
        EndpointSeed(
            "anthropic/claude-sonnet-5-5",
            "claude-sonnet-5-5",
            "anthropic",
            "claude-sonnet-5-5",
            "messages",
            True,
            (3.0, 0.30, 3.75, 15.0),
            supports_json_mode=False,
            cache_write_1h_price=6.0,
        ),
        EndpointSeed(
            "anthropic/claude-haiku-5-5",
            "claude-haiku-5-5",
            "anthropic",
            "claude-haiku-5-5",
            "messages",
            True,
            (1.0, 0.10, 1.25, 5.0),
            supports_json_mode=False,
            cache_write_1h_price=2.0,
        ),
    ]
    return seeds
