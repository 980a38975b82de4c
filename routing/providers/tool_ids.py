"""Tool-call ids each provider accepts, and a stable mapping for ids that it would refuse.

A session's history may carry tool-call ids minted by another model or by the caller
(``functions.get_weather:0`` from an OpenAI-compatible model; a 53-character ``fc_…`` id). Sent
as they are, the target API answers 400 after routing. Limits (observed API validation errors):

* Anthropic Messages — ``tool_use.id`` / ``tool_result.tool_use_id`` must match
  ``^[a-zA-Z0-9_-]+$`` ("String should match pattern"); we also cap them at 64 characters.
* OpenAI / Azure Chat Completions — ``messages[].tool_calls[].id`` at most 40 characters
  (``string_above_max_length``); ``tool_call_id`` must equal it.
* OpenAI / Azure Responses — ``function_call.call_id`` / ``function_call_output.call_id`` at
  most 64 characters.

:class:`ToolIdMap` rewrites an id only when the target would refuse it, to
``<sanitised prefix>_<12 hex of SHA-256(original)>`` within the limit: a pure function of the
original id, so a call and its result map to the same id, every turn of a session maps the same
way without stored state, and distinct ids stay distinct. :meth:`ToolIdMap.back` turns any
mapped id the provider echoes back into the caller's original.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolIdRule:
    """What one API accepts as a tool-call id: ``allowed`` characters (a regex class) and ``max_len``."""

    allowed: str | None
    max_len: int

    def accepts(self, value: str) -> bool:
        if not value or len(value) > self.max_len:
            return False
        return self.allowed is None or re.fullmatch(f"[{self.allowed}]+", value) is not None


#: Per ``api_style``.
RULES: dict[str, ToolIdRule] = {
    "messages": ToolIdRule(allowed="a-zA-Z0-9_-", max_len=64),
    "chat_completions": ToolIdRule(allowed=None, max_len=40),
    "responses": ToolIdRule(allowed=None, max_len=64),
}
HASH_CHARS = 12


def provider_tool_id(original: str, rule: ToolIdRule) -> str:
    """``original`` if ``rule`` accepts it, else its stable rewrite (see the module docstring)."""
    if rule.accepts(original):
        return original
    digest = hashlib.sha256(original.encode()).hexdigest()[:HASH_CHARS]
    prefix = re.sub(f"[^{rule.allowed}]", "_", original) if rule.allowed else original
    prefix = prefix[: rule.max_len - HASH_CHARS - 1] or "call"
    return f"{prefix}_{digest}"


@dataclass
class ToolIdMap:
    """The ids of one request as sent to one API; :meth:`out` maps, :meth:`back` reverses."""

    api_style: str
    _back: dict[str, str] = field(default_factory=dict)

    def out(self, original: str) -> str:
        rule = RULES.get(self.api_style)
        if rule is None or not original:
            return original
        mapped = provider_tool_id(original, rule)
        if mapped != original:
            self._back[mapped] = original
        return mapped

    def back(self, provider_id: str) -> str:
        return self._back.get(provider_id, provider_id)
