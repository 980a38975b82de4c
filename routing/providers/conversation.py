"""A conversation in provider-neutral form: :class:`Message` (with :class:`ContentPart`,
:class:`ToolCall`), :class:`ToolSpec`, the chained digests that identify a conversation's turns,
and the opaque :class:`ReasoningState` bound to one. Django-free; part of the provider-neutral
types (:mod:`routing.providers.types`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .endpoint import EndpointConfig

Role = Literal["system", "user", "assistant", "tool"]


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
      regenerated in one session) the newest (:func:`routing.providers.reasoning.anchor_reasoning`).
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
