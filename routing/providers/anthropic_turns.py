"""Anthropic Messages requests the API accepts: what it would refuse is dropped or merged.

A conversation that another provider takes as it is may hold what Anthropic answers with a 400
``invalid_request_error`` (wording of the API's messages):

* an empty text block — "messages: text content blocks must be non-empty" (``system: …`` in
  ``system``), e.g. an assistant turn with no text and no tool call (a turn another model ended
  at once, or that only called tools on a provider whose text was dropped);
* a whitespace-only text block — "… text content blocks must contain non-whitespace text";
* a message left with no content — "messages.N: all messages must have non-empty content
  except for the optional final assistant message";
* a final assistant message (a prefill) ending in whitespace — "messages: final assistant
  content cannot end with trailing whitespace".

:func:`acceptable_messages` and :func:`acceptable_blocks` turn built ``messages`` / ``system``
into what Anthropic takes: such blocks and messages are dropped (a prompt-caching breakpoint on a
dropped block moves to the block before it), and consecutive turns of one role, which dropping
can leave (and which Anthropic would combine into one turn anyway), are merged into one message,
``tool_result`` blocks first in a user turn and thinking blocks first in an assistant turn, as the
API requires. Nothing the caller said is lost: only empty text goes.

Sources: https://docs.anthropic.com/en/api/messages (``messages``: "consecutive user or assistant
turns in your request will be combined into a single turn"),
https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use (tool results
first), https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Blocks that may carry a ``cache_control`` breakpoint moved off a dropped text block.
CACHEABLE_BLOCKS = frozenset({"text", "tool_use", "tool_result", "image", "document"})
REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def acceptable_blocks(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` (content or ``system`` blocks) without empty or whitespace-only text blocks; a
    dropped block's ``cache_control`` goes to the kept block before it when that one can carry
    one and has none (else the breakpoint is dropped with the block). Returns new dicts where
    changed; the input is not modified."""
    kept: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text" and not str(block.get("text") or "").strip():
            prev = kept[-1] if kept else None
            if (
                block.get("cache_control")
                and prev is not None
                and prev.get("type") in CACHEABLE_BLOCKS
                and not prev.get("cache_control")
            ):
                kept[-1] = {**prev, "cache_control": block["cache_control"]}
            continue
        kept.append(block)
    return kept


def acceptable_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Built Anthropic ``messages`` (``{"role", "content"}``, content a string or a block list)
    made acceptable: empty text dropped (:func:`acceptable_blocks`), messages left empty dropped,
    consecutive same-role messages merged (:func:`merge_turns`), and trailing whitespace taken off
    a final assistant message's last text block. Raises nothing; may return ``[]``."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}] if content.strip() else []
            plain = True
        else:
            blocks = acceptable_blocks(content or [])
            plain = False
        if not blocks:
            continue
        if out and out[-1]["role"] == message["role"]:
            out[-1] = merge_turns(out[-1], {**message, "content": blocks})
        else:
            out.append({**message, "content": content if plain else blocks})
    if out and out[-1]["role"] == "assistant":
        out[-1] = _without_trailing_whitespace(out[-1])
    return out


def merge_turns(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two consecutive messages of one role as one: their blocks in order, except that a user
    turn's ``tool_result`` blocks and an assistant turn's thinking blocks come first (the API
    requires both)."""
    blocks = _as_blocks(first["content"]) + _as_blocks(second["content"])
    leading = {"user": {"tool_result"}, "assistant": REASONING_BLOCKS}.get(first["role"], set())
    head = [b for b in blocks if b.get("type") in leading]
    tail = [b for b in blocks if b.get("type") not in leading]
    return {**first, "content": head + tail}


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _without_trailing_whitespace(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return {**message, "content": content.rstrip()}
    blocks = list(content)
    if blocks and blocks[-1].get("type") == "text":
        blocks[-1] = {**blocks[-1], "text": blocks[-1]["text"].rstrip()}
    return {**message, "content": blocks}
