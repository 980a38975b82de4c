"""Output contracts: what a caller requires of an answer, in provider-neutral terms (Django-free).

* :class:`OutputFormat` -- the answer's text as JSON: a JSON Schema (structured outputs) or any
  JSON object (JSON mode);
* :class:`ToolChoice` -- whether (and which) tool must be called;
* :func:`contract_needs` -- the endpoint capabilities (:data:`STRUCTURED_OUTPUT`,
  :data:`JSON_MODE`, :data:`TOOLS`) a request's contracts need to be honoured.

:class:`~routing.providers.types.CompletionRequest` carries them (with ``parallel_tool_calls``);
each provider module maps them to its API; routing never sends a request to an endpoint that
lacks a capability its contracts need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

#: Endpoint capabilities the output contracts need (:meth:`CompletionRequest.needs`; the catalogue's
#: ``supports_*`` flags, :attr:`routing.selectors.EndpointInfo.capabilities`).
STRUCTURED_OUTPUT, JSON_MODE, TOOLS = "structured_output", "json_mode", "tools"


@dataclass(frozen=True)
class OutputFormat:
    """What the caller requires of the answer's text (an output contract).

    * ``type``: ``json_object`` (any JSON object: OpenAI's JSON mode) or ``json_schema`` (JSON
      valid against ``schema``: structured outputs).
    * ``schema``: the JSON Schema (``json_schema`` only), as the caller sent it.
    * ``name``: the schema's name (OpenAI requires one, ``[A-Za-z0-9_-]{1,64}``; Anthropic has none:
      ``"response"``); ``description``: optional, OpenAI only.
    * ``strict``: the caller's OpenAI ``strict`` flag; ``None`` when its API has none (Anthropic,
      whose structured outputs are always enforced).

    Sources: https://platform.openai.com/docs/guides/structured-outputs ,
    https://platform.claude.com/docs/en/build-with-claude/structured-outputs
    """

    type: Literal["json_object", "json_schema"]
    schema: Mapping[str, Any] | None = None
    name: str = "response"
    strict: bool | None = None
    description: str | None = None

    @property
    def capability(self) -> str:
        """The endpoint capability this format needs: :data:`STRUCTURED_OUTPUT` or :data:`JSON_MODE`."""
        return STRUCTURED_OUTPUT if self.type == "json_schema" else JSON_MODE

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``CompletionJob.request["output_format"]``); :meth:`from_dict` reads it."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputFormat:
        return cls(**data)


@dataclass(frozen=True)
class ToolChoice:
    """How the caller requires the model to use its tools (an output contract).

    * ``mode``: ``auto`` (the model decides), ``none`` (no tool call), ``required`` (at least one
      call: OpenAI ``"required"``, Anthropic ``{"type": "any"}``).
    * ``name``: with ``required``, the one tool to call (OpenAI a named function, Anthropic
      ``{"type": "tool"}``).
    * ``allowed``: the names the model may call (OpenAI ``allowed_tools``); ``None`` = all. Every
      provider gets only these tools (:meth:`CompletionRequest.effective_tools`).
    """

    mode: Literal["auto", "none", "required"]
    name: str | None = None
    allowed: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.allowed is not None:
            object.__setattr__(self, "allowed", tuple(self.allowed))

    @property
    def forces_call(self) -> bool:
        return self.mode == "required"

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``CompletionJob.request["tool_choice"]``); :meth:`from_dict` reads it."""
        data: dict[str, Any] = {"mode": self.mode}
        if self.name is not None:
            data["name"] = self.name
        if self.allowed is not None:
            data["allowed"] = list(self.allowed)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolChoice:
        allowed = data.get("allowed")
        return cls(data["mode"], data.get("name"), tuple(allowed) if allowed is not None else None)


def contract_needs(output_format: OutputFormat | None, tool_choice: ToolChoice | None) -> dict[str, str]:
    """``{contract: endpoint capability}`` the output contracts need to be honoured, in order:
    ``output_format`` → :data:`STRUCTURED_OUTPUT` / :data:`JSON_MODE`; a ``tool_choice`` that forces
    a call → :data:`TOOLS`. ``parallel_tool_calls: false`` and ``tool_choice`` ``auto``/``none``
    need nothing: every API style takes them (and an endpoint without tools makes no calls)."""
    needs: dict[str, str] = {}
    if output_format is not None:
        needs["output_format"] = output_format.capability
    if tool_choice is not None and tool_choice.forces_call:
        needs["tool_choice"] = TOOLS
    return needs
