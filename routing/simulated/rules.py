"""What the real APIs refuse in a request's conversation and its tool-call ids, for the simulated
upstreams.

:func:`conversation_problem` gives the 400 ``invalid_request_error`` message the real API answers
a request's messages with (its wording), or ``None`` when it would take them; the simulated
upstreams (:mod:`routing.simulated`) answer with it in the API's own error shape, so tests
over real HTTP catch a request we build that the provider would refuse.

* Anthropic Messages: an empty text block ("messages: text content blocks must be non-empty";
  ``system: …`` in ``system``), a whitespace-only one ("… must contain non-whitespace text"), a
  message without content other than a final assistant one ("messages.N: all messages must have
  non-empty content except for the optional final assistant message"), a final assistant message
  ending in whitespace. Consecutive turns of one role are accepted (the API combines them).
* Chat Completions: an assistant message whose ``content`` is null without ``tool_calls``
  ("Invalid value for 'content': expected a string, got null.").
* Tool-call ids (:func:`tool_id_problem`): Anthropic's must match ``^[a-zA-Z0-9_-]+$``, Chat
  Completions' are at most 40 characters, Responses' ``call_id`` at most 64.

Sources: Anthropic's and OpenAI's 400 answers as quoted in their SDKs' and clients' issue
trackers (e.g. anthropics/claude-code #59812, #23369, #6774; vercel/ai #13744).
"""

from __future__ import annotations

import re
from typing import Any

#: What Anthropic accepts as a ``tool_use`` id.
_ANTHROPIC_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")


def conversation_problem(api: str | None, body: dict[str, Any]) -> str | None:
    """The message of the real API's 400 for ``body``'s conversation, else ``None``.
    ``api``: ``messages`` | ``chat_completions`` | ``responses`` (nothing checked yet)."""
    if api == "messages":
        return _anthropic_problem(body)
    if api == "chat_completions":
        for message in body.get("messages") or []:
            if (
                isinstance(message, dict)
                and message.get("role") == "assistant"
                and message.get("content") is None
                and not message.get("tool_calls")
            ):
                return "Invalid value for 'content': expected a string, got null."
    return None


def _text_problem(where: str, blocks: Any) -> str | None:
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if not text:
                return f"{where}: text content blocks must be non-empty"
            if isinstance(text, str) and not text.strip():
                return f"{where}: text content blocks must contain non-whitespace text"
    return None


def _anthropic_problem(body: dict[str, Any]) -> str | None:
    problem = _text_problem("system", body.get("system"))
    if problem:
        return problem
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    for i, message in enumerate(messages):
        content = message.get("content")
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if not content and not final_assistant:
            return (
                f"messages.{i}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        if isinstance(content, str) and content and not content.strip():
            return "messages: text content blocks must contain non-whitespace text"
        problem = _text_problem("messages", content)
        if problem:
            return problem
    if messages and messages[-1].get("role") == "assistant":
        content = messages[-1].get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        last = blocks[-1] if blocks else {}
        if (
            isinstance(last, dict)
            and last.get("type") == "text"
            and str(last.get("text")) != str(last.get("text")).rstrip()
        ):
            return "messages: final assistant content cannot end with trailing whitespace"
    return None


def tool_id_problem(api: str, body: dict[str, Any]) -> tuple[str, str] | None:
    """``(param, message)`` for the first tool-call id the real API would refuse, as it words it.

    Anthropic: ``tool_use.id`` / ``tool_result.tool_use_id`` must match ``^[a-zA-Z0-9_-]+$``;
    Chat Completions: ``tool_calls[].id`` at most 40 characters; Responses: ``call_id`` at most 64.
    """
    if api == "messages":
        for i, msg in enumerate(body.get("messages") or []):
            content = msg.get("content") if isinstance(msg, dict) else None
            for j, block in enumerate(content if isinstance(content, list) else []):
                if not isinstance(block, dict) or block.get("type") not in ("tool_use", "tool_result"):
                    continue
                key = "id" if block["type"] == "tool_use" else "tool_use_id"
                if not _ANTHROPIC_TOOL_ID.fullmatch(str(block.get(key, ""))):
                    param = f"messages.{i}.content.{j}.{block['type']}.{key}"
                    return param, f"{param}: String should match pattern '^[a-zA-Z0-9_-]+$'"
    limit, items, where = (
        (40, body.get("messages"), "messages")
        if api == "chat_completions"
        else (64, body.get("input"), "input")
    )
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        ids = [(f"{where}[{i}].call_id", item.get("call_id"))] if api == "responses" else [
            (f"{where}[{i}].tool_calls[{j}].id", c.get("id")) for j, c in enumerate(item.get("tool_calls") or [])
        ]  # fmt: skip
        for param, value in ids:
            if isinstance(value, str) and len(value) > limit:
                return param, (
                    f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, "
                    f"but got a string with length {len(value)} instead."
                )
    return None
