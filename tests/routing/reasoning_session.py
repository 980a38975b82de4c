"""Helpers for reasoning-store tests: seeded endpoints as provider configs and a client-driven session."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from routing.catalogue import endpoint_seeds, provider_seeds
from routing.providers import CompletionRequest, CompletionResult, Message, ToolSpec, client_for
from routing.providers.types import EndpointConfig
from routing.reasoning_store import OwnedSession, reasoning_load, reasoning_save
from tests.conftest import CREDENTIAL_ENV

WEATHER = ToolSpec(
    "get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)


def seeded_endpoint(base_url: str, public_id: str, **overrides) -> EndpointConfig:
    """The provider-client config of a seeded catalogue entry pointing at ``base_url``."""
    providers = {p.key: p for p in provider_seeds(base_url)}
    seed = next(e for e in endpoint_seeds() if e.public_id == public_id)
    provider = providers[seed.provider]
    fields = {
        "public_id": seed.public_id,
        "provider_kind": provider.kind,
        "base_url": provider.base_url,
        "upstream_model": seed.upstream_model,
        "api_style": seed.api_style,
        "credential": CREDENTIAL_ENV[provider.credential_env],
        "api_version": provider.api_version or None,
        "timeout_s": 10.0,
        "capabilities": frozenset(
            {"tools", "streaming"} | ({"reasoning"} if seed.supports_reasoning else set())
        ),
        **overrides,
    }
    return EndpointConfig(**fields)


@dataclass
class Session:
    """A client conversation whose every turn loads/saves reasoning through the store, as the
    session ``session_id`` of ``owner`` (an API key's owner string by default)."""

    session_id: str
    messages: list[Message] = field(default_factory=lambda: [Message("user", "Weather in Bern?")])
    results: list[CompletionResult] = field(default_factory=list)
    owner: str = "key:1"

    @property
    def owned(self) -> OwnedSession:
        return OwnedSession(owner=self.owner, session_id=self.session_id)

    def turn(self, endpoint: EndpointConfig) -> CompletionResult:
        request = CompletionRequest(
            messages=tuple(self.messages),
            tools=(WEATHER,),
            reasoning_state=reasoning_load(session=self.owned, endpoint=endpoint),
        )
        result = client_for(endpoint).complete(endpoint, request)
        reasoning_save(session=self.owned, state=result.reasoning_state, endpoint_id=endpoint.public_id)
        self.results.append(result)
        self.messages.append(Message("assistant", result.text, tool_calls=result.tool_calls))
        if result.tool_calls:
            self.messages += [
                Message("tool", json.dumps({"temp_c": 21 + i}), tool_call_id=tc.id)
                for i, tc in enumerate(result.tool_calls)
            ]
        else:
            self.messages.append(Message("user", "And in Zurich?"))
        return result


def issued_reasoning(call: dict) -> list[dict]:
    """Reasoning items/blocks the fake sent back in a recorded non-streaming response."""
    body = json.loads(call["response_body"])
    if "content" in body:  # Anthropic message
        return [b for b in body["content"] if b["type"] in ("thinking", "redacted_thinking")]
    return [i for i in body["output"] if i["type"] == "reasoning"]


def secret_strings(items: list[dict]) -> list[str]:
    """The opaque blobs of reasoning items (encrypted_content / signature / data)."""
    keys = ("encrypted_content", "signature", "data")
    return [item[k] for item in items for k in keys if item.get(k)]
