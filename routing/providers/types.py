"""Provider-neutral request/result types and endpoint configuration.

Costs: :mod:`routing.providers.pricing`. :class:`CompletionRequest` is defined here; the other
types live in :mod:`routing.providers.endpoint`, :mod:`routing.providers.conversation` and
:mod:`routing.providers.results`, and are importable from here too.

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

from dataclasses import dataclass

from routing.providers.contracts import OutputFormat, ToolChoice, contract_needs

from .conversation import (
    ContentPart,
    Message,
    ReasoningState,
    Role,
    ToolCall,
    ToolSpec,
    assistant_turn_digest,
    conversation_digests,
    messages_from_openai,
)
from .endpoint import API_STYLES, PROVIDER_KINDS, ApiStyle, EndpointConfig, ProviderKind, Secret
from .results import CompletionResult, FinishReason, StreamEvent, ToolCallDelta, Usage, add_usage, merge_usage

__all__ = [
    "API_STYLES",
    "PROVIDER_KINDS",
    "ApiStyle",
    "CompletionRequest",
    "CompletionResult",
    "ContentPart",
    "EndpointConfig",
    "FinishReason",
    "Message",
    "ProviderKind",
    "ReasoningState",
    "Role",
    "Secret",
    "StreamEvent",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
    "add_usage",
    "assistant_turn_digest",
    "conversation_digests",
    "merge_usage",
    "messages_from_openai",
]


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
