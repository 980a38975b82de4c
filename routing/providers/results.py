"""What a provider call gives back, in provider-neutral form: :class:`Usage` (token accounting,
see :mod:`routing.providers.types`), :class:`CompletionResult` and the :class:`StreamEvent`
deltas of a stream. Django-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

from .conversation import ReasoningState, ToolCall

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error"]


@dataclass(frozen=True)
class Usage:
    """Token usage (all counts are tokens).

    * ``input_tokens``: ALL prompt tokens, including ``cached_input_tokens`` and
      ``cache_write_tokens`` (OpenAI semantics; Anthropic's are summed up to match).
    * ``cached_input_tokens``: prompt tokens read from the provider's prompt cache
      (OpenAI ``cached_tokens``; Anthropic ``cache_read_input_tokens``).
    * ``cache_write_tokens``: prompt tokens written to the cache (Anthropic
      ``cache_creation_input_tokens``; OpenAI ``cache_write_tokens`` when reported).
    * ``cache_write_1h_tokens``: of ``cache_write_tokens``, those written with a 1-hour TTL
      (Anthropic ``cache_creation.ephemeral_1h_input_tokens``); the rest have the 5-minute TTL.
    * ``output_tokens``: all generated tokens, *including* ``reasoning_tokens``.
    * ``reasoning_tokens``: hidden reasoning/thinking tokens (OpenAI ``reasoning_tokens``;
      Anthropic ``output_tokens_details.thinking_tokens`` when reported, else 0).
    * ``vendor``: the raw vendor usage numbers as reported (field names of the provider).
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    vendor: Mapping[str, int] = field(default_factory=dict)
    cache_write_1h_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_input_tokens - self.cache_write_tokens)

    def to_public_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "vendor": dict(self.vendor),
        }


def merge_usage(earlier: Mapping[str, Any] | None, later: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge two vendor usage snapshots of one response, field by field.

    Streams report usage more than once (Anthropic ``message_start`` then ``message_delta``;
    Responses ``response.created`` … ``response.completed``). Each snapshot is cumulative, so a
    field present in ``later`` replaces the earlier value, and a field ``later`` leaves out (or
    sends as ``null``) keeps its earlier value. Snapshots are never summed. Nested objects
    (``input_tokens_details`` …) are merged the same way. Returns a new dict.
    """
    merged: dict[str, Any] = dict(earlier or {})
    for key, value in (later or {}).items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            merged[key] = merge_usage(merged.get(key) if isinstance(merged.get(key), Mapping) else {}, value)
        else:
            merged[key] = value
    return merged


def add_usage(a: Usage, b: Usage) -> Usage:
    """The sum of two usages (tokens of *different* attempts; never of snapshots of one response)."""
    vendor: dict[str, int] = dict(a.vendor)
    for key, value in b.vendor.items():
        vendor[key] = vendor.get(key, 0) + value
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        cache_write_tokens=a.cache_write_tokens + b.cache_write_tokens,
        cache_write_1h_tokens=a.cache_write_1h_tokens + b.cache_write_1h_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        vendor=vendor,
    )


@dataclass(frozen=True, repr=False)
class CompletionResult:
    """Normalised completion result.

    * ``text``: assistant text (reasoning never included).
    * ``tool_calls``: :class:`ToolCall` tuple (``arguments`` decoded dicts).
    * ``finish_reason``: ``stop|tool_calls|length|content_filter|error``.
    * ``usage``: :class:`Usage`; ``cost_usd``: ``Decimal`` USD from endpoint prices.
    * ``latency_ms``: wall time from request start to full result (ms, float);
      ``time_to_first_token_ms`` for streams (first text/tool delta), else ``None``.
    * ``upstream_request_id``: provider request id (``x-request-id`` / ``request-id``).
    * ``endpoint_id``: :attr:`EndpointConfig.public_id`; ``upstream_model``: model sent.
    * ``reasoning_state``: opaque :class:`ReasoningState` or ``None`` -- server-side only,
      excluded from :meth:`to_public_dict` and ``repr``.
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage
    cost_usd: Decimal
    latency_ms: float
    upstream_request_id: str | None
    endpoint_id: str
    upstream_model: str
    time_to_first_token_ms: float | None = None
    reasoning_state: ReasoningState | None = None

    def __repr__(self) -> str:
        return (
            f"CompletionResult(endpoint_id={self.endpoint_id!r}, finish_reason={self.finish_reason!r}, "
            f"text={self.text[:40]!r}, tool_calls={len(self.tool_calls)}, cost_usd={self.cost_usd}, "
            f"latency_ms={self.latency_ms:.1f}, reasoning_state={'<opaque>' if self.reasoning_state else None})"
        )

    def to_public_dict(self) -> dict[str, Any]:
        """JSON-safe dict for clients / persistence. Never contains reasoning state.

        ``cost_usd`` is a string (exact decimal) to avoid float rounding.
        """
        return {
            "endpoint_id": self.endpoint_id,
            "upstream_model": self.upstream_model,
            "text": self.text,
            "tool_calls": [tc.to_public_dict() for tc in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": self.usage.to_public_dict(),
            "cost_usd": str(self.cost_usd),
            "latency_ms": round(self.latency_ms, 3),
            "time_to_first_token_ms": (
                None if self.time_to_first_token_ms is None else round(self.time_to_first_token_ms, 3)
            ),
            "upstream_request_id": self.upstream_request_id,
        }

    def with_latency(self, latency_ms: float) -> CompletionResult:
        return replace(self, latency_ms=latency_ms)


@dataclass(frozen=True)
class ToolCallDelta:
    """Streaming fragment of tool call number ``index`` (0-based, in output order).

    ``id`` and ``name`` are set on the first fragment of a call; ``arguments_delta`` is a
    piece of the JSON arguments string (concatenate all pieces of one index).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


@dataclass(frozen=True, repr=False)
class StreamEvent:
    """One streaming event.

    * ``kind="text_delta"``: ``text`` is the next piece of assistant text.
    * ``kind="tool_call_delta"``: ``tool_call`` is a :class:`ToolCallDelta`.
    * ``kind="done"``: ``result`` is the final :class:`CompletionResult` (with usage/cost and
      server-side ``reasoning_state``); always the last event of a successful stream.
    * ``kind="error"``: ``error`` is a ``StreamFailed`` (``after_content=True``); the stream
      ends. Errors before any content are *raised* from the iterator instead, so callers
      can retry/fail over transparently.

    Events never carry reasoning content (encrypted or not).
    """

    kind: str
    text: str | None = None
    tool_call: ToolCallDelta | None = None
    result: CompletionResult | None = None
    error: Exception | None = None

    def __repr__(self) -> str:
        detail = {
            "text_delta": repr(self.text),
            "tool_call_delta": repr(self.tool_call),
            "done": repr(self.result),
            "error": repr(self.error),
        }.get(self.kind, "")
        return f"StreamEvent({self.kind}: {detail})"

    def to_public_dict(self) -> dict[str, Any]:
        if self.kind == "text_delta":
            return {"type": "text_delta", "text": self.text}
        if self.kind == "tool_call_delta":
            assert self.tool_call is not None
            return {
                "type": "tool_call_delta",
                "index": self.tool_call.index,
                "id": self.tool_call.id,
                "name": self.tool_call.name,
                "arguments_delta": self.tool_call.arguments_delta,
            }
        if self.kind == "done":
            assert self.result is not None
            return {"type": "done", "result": self.result.to_public_dict()}
        err = self.error
        return {
            "type": "error",
            "error": {
                "class": type(err).__name__,
                "message": str(err),
                "retryable": bool(getattr(err, "retryable", False)),
                "after_content": bool(getattr(err, "after_content", False)),
            },
        }
