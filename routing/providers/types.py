"""Provider-neutral request/result types and endpoint configuration.

Costs: :mod:`routing.providers.pricing`.

Django-free. Shapes:

* :class:`EndpointConfig` -- one upstream model endpoint (where, how, which credential, prices).
* :class:`CompletionRequest` -- neutral chat request (``messages`` of :class:`Message`,
  ``tools`` of :class:`ToolSpec`, overrides, opaque ``reasoning_state``, the caller's output
  contracts ``output_format``, ``tool_choice`` and ``parallel_tool_calls``:
  :mod:`routing.providers.contracts`).
* :class:`CompletionResult` -- neutral result (text, :class:`ToolCall` list, normalised
  ``finish_reason``, :class:`Usage`, ``cost_usd``, ``latency_ms``, ``upstream_request_id``,
  opaque server-side ``reasoning_state``). :meth:`CompletionResult.to_public_dict` is the ONLY
  form that may leave the server or be persisted; it never contains reasoning state.
* :class:`StreamEvent` -- streaming deltas (text, tool call), ``done`` (with result), ``error``.

Token accounting (see :class:`Usage`): ``input_tokens`` is normalised to the OpenAI meaning
(all prompt tokens, *including* cache reads and cache writes). Anthropic reports
``input_tokens`` *excluding* ``cache_read_input_tokens`` and ``cache_creation_input_tokens``;
the Anthropic client adds them up. The raw vendor numbers are kept in ``Usage.vendor``.

Sources: https://platform.openai.com/docs/guides/prompt-caching ,
https://platform.openai.com/docs/api-reference/responses/object#responses/object-usage ,
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#tracking-cache-performance ,
https://docs.anthropic.com/en/docs/about-claude/pricing
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

from routing.providers.contracts import OutputFormat, ToolChoice, contract_needs

ProviderKind = Literal["native", "openai", "azure_openai", "anthropic"]
ApiStyle = Literal["chat_completions", "responses", "messages"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error"]
Role = Literal["system", "user", "assistant", "tool"]

PROVIDER_KINDS: frozenset[str] = frozenset({"native", "openai", "azure_openai", "anthropic"})
API_STYLES: frozenset[str] = frozenset({"chat_completions", "responses", "messages"})


class Secret:
    """A credential string whose ``repr``/``str`` never reveal it.

    ``Secret("sk-...")``; :meth:`reveal` returns the value (only pass it to an SDK client);
    :attr:`fingerprint` is a short, non-reversible SHA-256 prefix usable in cache keys/logs.
    Equality compares values in constant time.
    """

    __slots__ = ("__value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str):
            raise TypeError("Secret value must be a str")
        self.__value = value

    def reveal(self) -> str:
        return self.__value

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(b"muse-secret:" + self.__value.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self.__value, other.__value)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __bool__(self) -> bool:
        return bool(self.__value)

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce__(self) -> Any:
        """Refuse pickling, so a credential is never written to a cache/queue by accident."""
        raise TypeError("Secret objects cannot be pickled")


@dataclass(frozen=True)
class EndpointConfig:
    """One upstream model endpoint.

    * ``public_id``: our stable id for the endpoint (what experiments reference).
    * ``provider_kind``: ``native`` (Avocado, OpenAI-compatible chat) | ``openai`` |
      ``azure_openai`` | ``anthropic``.
    * ``base_url``: for ``native``/``openai`` the API root incl. ``/v1`` (e.g.
      ``https://api.openai.com/v1``); for ``azure_openai`` the resource host
      (``https://res.openai.azure.com``); for ``anthropic`` the host
      (``https://api.anthropic.com``).
    * ``upstream_model``: model / Azure deployment name, verbatim (dots, underscores kept).
    * ``api_style``: ``chat_completions`` | ``responses`` | ``messages``.
    * ``api_version``: Azure only. A dated version (``2025-04-01-preview``) uses
      ``AzureOpenAI(azure_endpoint=base_url, api_version=...)`` ->
      ``POST {base_url}/openai/responses?api-version=...`` with an ``api-key`` header.
      ``None`` uses the v1 GA surface ``OpenAI(base_url=f"{base_url}/openai/v1/")``.
    * ``credential``: the secret itself (resolved by the caller, e.g. from an env var); a
      plain ``str`` is wrapped in :class:`Secret`.
    * prices in USD per million tokens: ``price_input_per_mtok`` (uncached input),
      ``price_cached_input_per_mtok`` (cache reads; ``None`` -> input price),
      ``price_cache_write_per_mtok`` (cache writes with the default 5-minute TTL; ``None`` ->
      input price), ``price_cache_write_1h_per_mtok`` (Anthropic cache writes with a 1-hour TTL;
      ``None`` -> the 5-minute write price),
      ``price_output_per_mtok`` (output incl. reasoning tokens).
    * ``timeout_s``: total request timeout in seconds (passed to the SDK).
    * ``capabilities``: e.g. ``{"tools", "streaming", "reasoning", "structured_output",
      "json_mode"}``; ``reasoning`` turns on encrypted-reasoning round-tripping / thinking; the
      output contracts need theirs (:func:`routing.providers.contracts.contract_needs`).
    """

    public_id: str
    provider_kind: str
    base_url: str
    upstream_model: str
    api_style: str
    credential: Secret
    api_version: str | None = None
    price_input_per_mtok: Decimal = Decimal(0)
    price_cached_input_per_mtok: Decimal | None = None
    price_cache_write_per_mtok: Decimal | None = None
    price_output_per_mtok: Decimal = Decimal(0)
    price_cache_write_1h_per_mtok: Decimal | None = None
    timeout_s: float = 60.0
    capabilities: frozenset[str] = frozenset({"tools", "streaming"})

    def __post_init__(self) -> None:
        if self.provider_kind not in PROVIDER_KINDS:
            raise ValueError(f"provider_kind must be one of {sorted(PROVIDER_KINDS)}")
        if self.api_style not in API_STYLES:
            raise ValueError(f"api_style must be one of {sorted(API_STYLES)}")
        if not isinstance(self.credential, Secret):
            object.__setattr__(self, "credential", Secret(self.credential))
        for name in (
            "price_input_per_mtok",
            "price_cached_input_per_mtok",
            "price_cache_write_per_mtok",
            "price_cache_write_1h_per_mtok",
            "price_output_per_mtok",
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Decimal):
                object.__setattr__(self, name, Decimal(str(value)))
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))

    @property
    def fingerprint(self) -> str:
        """Identity of endpoint + credential (SHA-256 prefix; reveals nothing about the key).

        Reasoning state produced by one fingerprint is never forwarded to another.
        """
        ident = json.dumps(
            [
                self.provider_kind,
                self.api_style,
                self.base_url.rstrip("/"),
                self.upstream_model,
                self.api_version,
                self.credential.fingerprint,
            ]
        )
        return hashlib.sha256(ident.encode()).hexdigest()[:24]

    def has(self, capability: str) -> bool:
        return capability in self.capabilities


@dataclass(frozen=True)
class ToolCall:
    """A tool call made by the model. ``arguments`` is the decoded JSON object."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    def to_public_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class ToolSpec:
    """A function tool offered to the model: ``parameters`` is a JSON Schema object.

    ``cache_control``: the caller's Anthropic prompt-caching breakpoint on this tool (e.g.
    ``{"type": "ephemeral"}``), kept verbatim for Anthropic and ignored by other providers.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    cache_control: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ContentPart:
    """One text block of a message as the caller structured it (Anthropic ``/v1/messages``).

    ``cache_control``: the caller's prompt-caching breakpoint after this block, verbatim
    (``{"type": "ephemeral"}``, optionally with ``"ttl"``); ``None`` for none.
    """

    text: str
    cache_control: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Message:
    """One neutral chat message.

    * ``system``/``user``: ``content`` text.
    * ``assistant``: ``content`` text (may be empty) and optional ``tool_calls``.
    * ``tool``: a tool result: ``content`` text, ``tool_call_id`` of the call it answers.

    ``parts``: the caller's block structure of ``content`` with its cache breakpoints (empty when
    the caller sent plain text); Anthropic sends these blocks as they came, other providers use
    ``content`` (the parts' text joined). For a ``tool`` message the last part's breakpoint applies
    to the ``tool_result`` block.
    """

    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    parts: tuple[ContentPart, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown role {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("tool messages need tool_call_id")
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "parts", tuple(self.parts))


def conversation_digests(messages: Sequence[Message]) -> list[str]:
    """Chained identity of a conversation after each of its messages (32 hex chars each).

    Entry ``i`` is SHA-256 over entry ``i - 1`` and message ``i``'s role, text (outer whitespace
    ignored) and tool calls (name + canonical JSON arguments). System messages add nothing (their
    entry repeats the previous one) and ids (tool-call ids, ``tool_call_id``) are left out, since
    drop-ins may present them to clients under other ids. Two assistant turns therefore share a
    digest only when they and everything before them are the same.
    """
    out: list[str] = []
    current = ""
    for m in messages:
        if m.role != "system":
            ident = json.dumps(
                [
                    current,
                    m.role,
                    (m.content or "").strip(),
                    [[tc.name, json.dumps(dict(tc.arguments), sort_keys=True)] for tc in m.tool_calls],
                ],
                ensure_ascii=False,
                separators=(",", ":"),
            )
            current = hashlib.sha256(ident.encode()).hexdigest()[:32]
        out.append(current)
    return out


def assistant_turn_digest(
    history: Sequence[Message], content: str | None, tool_calls: Sequence[ToolCall]
) -> str:
    """:func:`conversation_digests` of ``history`` followed by the assistant turn (``content``,
    ``tool_calls``) a provider just returned: the key its reasoning is bound to."""
    turn = Message("assistant", content or "", tool_calls=tuple(tool_calls))
    return conversation_digests([*history, turn])[-1]


@dataclass(frozen=True, repr=False)
class ReasoningState:
    """Opaque provider-native reasoning to pass back on the next turn. SERVER-SIDE ONLY.

    * ``endpoint_fingerprint``: :attr:`EndpointConfig.fingerprint` of the producer; a client
      drops the state when the current endpoint's fingerprint differs.
    * ``provider_kind`` / ``api_style``: producer protocol.
    * ``items``: provider-native JSON objects exactly as received, in order -- Responses
      ``reasoning`` items (with ``encrypted_content``), or Anthropic ``thinking`` (with
      ``signature``) / ``redacted_thinking`` (with ``data``) blocks.
    * ``turn_digest``: :func:`assistant_turn_digest` of the assistant turn this reasoning came
      with (its text and tool calls). Replay binds the state to the assistant message with the
      same digest and the same tool-call ids; of several such states (the turn retried or
      regenerated in one session) the newest (:func:`routing.providers.base.anchor_reasoning`).
      A state whose turn is no longer in the history (edited or dropped by the client) is
      dropped, never moved.
    * ``tool_call_ids``: ids of the tool calls of the assistant turn this reasoning preceded
      (tells apart turns of equal content; anchors states stored before ``turn_digest`` existed).
    * ``native_ids``: provider item ids of that turn's other output items keyed by tool call
      id (Responses ``function_call`` item ids ``fc_...``), replayed so the reasoning item
      stays adjacent to the exact item that followed it.

    ``repr`` hides the items. Never serialise this into client responses or logs.
    """

    endpoint_fingerprint: str
    provider_kind: str
    api_style: str
    items: tuple[Mapping[str, Any], ...]
    tool_call_ids: tuple[str, ...] = ()
    native_ids: Mapping[str, str] = field(default_factory=dict)
    turn_digest: str = ""

    def __repr__(self) -> str:
        return (
            f"ReasoningState(endpoint={self.endpoint_fingerprint!r}, api_style={self.api_style!r}, "
            f"items=<{len(self.items)} opaque>, tool_call_ids={self.tool_call_ids!r})"
        )

    def matches(self, endpoint: EndpointConfig) -> bool:
        return self.endpoint_fingerprint == endpoint.fingerprint and self.api_style == endpoint.api_style


@dataclass(frozen=True)
class CompletionRequest:
    """Neutral completion request.

    * ``messages``: conversation (:class:`Message`), system messages anywhere (they are
      concatenated into the provider's system/instructions field for Responses/Anthropic).
    * ``tools``: offered tools; ``allowed_tools`` (names) filters them (``None`` = all).
    * ``reasoning_effort``: ``minimal|low|medium|high`` (provider-mapped; ``None`` = default).
    * ``temperature``: 0..2, ``None`` = provider default.
    * ``max_output_tokens``: cap on output tokens (Anthropic requires one: default 4096).
    * ``system_prompt_version``: carried for logging/analytics; not sent upstream.
    * ``reasoning_state``: :class:`ReasoningState` objects from earlier turns (server-side).

    Output contracts, the caller's (never a variant's), which every provider forwards in its own
    terms or, when the endpoint cannot honour them (:meth:`needs`), is never asked to serve:

    * ``output_format``: :class:`~routing.providers.contracts.OutputFormat` (``None``: free text);
    * ``tool_choice``: :class:`~routing.providers.contracts.ToolChoice` (``None``: the model decides);
    * ``parallel_tool_calls``: ``False`` = at most one tool call (``None``: the provider default,
      parallel calls allowed).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    reasoning_effort: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    allowed_tools: tuple[str, ...] | None = None
    system_prompt_version: str | None = None
    reasoning_state: tuple[ReasoningState, ...] = ()
    output_format: OutputFormat | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        if self.allowed_tools is not None:
            object.__setattr__(self, "allowed_tools", tuple(self.allowed_tools))
        state = self.reasoning_state
        if isinstance(state, ReasoningState):
            state = (state,)
        object.__setattr__(self, "reasoning_state", tuple(state or ()))

    def effective_tools(self) -> tuple[ToolSpec, ...]:
        """``tools`` filtered by the variant's ``allowed_tools`` and the caller's
        ``tool_choice.allowed``; a tool the caller's ``tool_choice`` names is always kept (the
        caller's contract wins over a variant's filter)."""
        variant = None if self.allowed_tools is None else set(self.allowed_tools)
        choice = self.tool_choice
        caller = None if choice is None or choice.allowed is None else set(choice.allowed)
        if variant is None and caller is None:
            return self.tools
        forced = choice.name if choice is not None else None
        return tuple(
            t
            for t in self.tools
            if t.name == forced
            or ((variant is None or t.name in variant) and (caller is None or t.name in caller))
        )

    def needs(self) -> dict[str, str]:
        """``{contract: capability}`` an endpoint must have to serve this request
        (:func:`~routing.providers.contracts.contract_needs`)."""
        return contract_needs(self.output_format, self.tool_choice)

    def has_cache_breakpoints(self) -> bool:
        """Whether the caller placed any prompt-caching breakpoint (parts or tools)."""
        return any(p.cache_control for m in self.messages for p in m.parts) or any(
            t.cache_control for t in self.tools
        )

    def system_text(self) -> str:
        return "\n\n".join(m.content for m in self.messages if m.role == "system" and m.content)


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


def messages_from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """Convert OpenAI chat-style message dicts to :class:`Message` (helper for callers).

    Accepts ``{"role", "content"}`` with string or text-part list content, assistant
    ``tool_calls`` (``function.arguments`` JSON string), and ``{"role": "tool",
    "tool_call_id", "content"}``. Raises ``ValueError`` on bad shapes/JSON.
    """
    out: list[Message] = []
    for raw in messages:
        role = raw.get("role")
        if role == "developer":
            role = "system"
        content = raw.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        calls = []
        for tc in raw.get("tool_calls") or ():
            fn = tc.get("function") or {}
            args = fn.get("arguments") or "{}"
            calls.append(
                ToolCall(
                    id=tc["id"],
                    name=fn["name"],
                    arguments=json.loads(args) if isinstance(args, str) else args,
                )
            )
        out.append(
            Message(role=role, content=content, tool_calls=tuple(calls), tool_call_id=raw.get("tool_call_id"))
        )
    return tuple(out)
