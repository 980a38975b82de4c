"""Reasoning passed back to the simulated upstreams, checked as the real APIs check it: blobs this
server never issued (:func:`unknown_reasoning`) and reasoning out of its place
(:func:`misplaced_reasoning`). What each blob was issued with is kept by
:class:`routing.simulated.server.FakeUpstreams` (``bind_issued`` / ``issued``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .plan import content_to_text

if TYPE_CHECKING:
    from .server import FakeUpstreams


def unknown_reasoning(fake: FakeUpstreams, api: str, body: dict[str, Any]) -> str | None:
    """The 400 message for a reasoning blob passed back (Responses ``encrypted_content``, Anthropic
    thinking ``signature`` / redacted ``data``) that ``fake`` never issued, else ``None``."""
    if api == "responses" and isinstance(body.get("input"), list):
        for item in body["input"]:
            if isinstance(item, dict) and item.get("type") == "reasoning":
                blob = item.get("encrypted_content")
                if blob is not None and not fake.blob_known(blob):
                    return "The encrypted content for item could not be verified."
    if api == "messages":
        for msg in body.get("messages") or []:
            content = msg.get("content") if isinstance(msg, dict) else None
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "thinking" and not fake.blob_known(block.get("signature", "")):
                    return "messages: Invalid `signature` in `thinking` block"
                if block.get("type") == "redacted_thinking" and not fake.blob_known(block.get("data", "")):
                    return "messages: Invalid `data` in `redacted_thinking` block"
    return None


def misplaced_reasoning(fake: FakeUpstreams, api: str, body: dict[str, Any]) -> str | None:
    """Enforce where passed-back reasoning may stand, as the real APIs do.

    Responses (https://platform.openai.com/docs/guides/reasoning#keeping-reasoning-items-in-context):
    a ``reasoning`` item must be immediately followed by the output item it was issued with
    (same ``id``, or for an item sent without id: the same ``call_id`` / assistant text /
    blob), else 400 "Item 'rs_…' of type 'reasoning' was provided without its required
    following item."; a ``function_call`` sent with the ``fc_…`` id of an item that was issued
    after a reasoning item needs that reasoning item earlier in the input.

    Messages (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#preserving-thinking-blocks):
    the latest assistant message's ``thinking``/``redacted_thinking`` blocks must be first and
    exactly the blocks issued with that message's content; with thinking on and a tool loop
    in progress (the request ends with ``tool_result``), a message whose ``tool_use`` was issued
    after thinking must start with that thinking.
    """
    if api == "responses" and isinstance(body.get("input"), list):
        return _misplaced_responses_reasoning(fake, [i for i in body["input"] if isinstance(i, dict)])
    if api == "messages":
        return _misplaced_thinking(fake, body)
    return None


def _misplaced_responses_reasoning(fake: FakeUpstreams, items: list[dict[str, Any]]) -> str | None:
    seen_reasoning: set[str] = set()
    for pos, item in enumerate(items):
        if item.get("type") == "reasoning":
            seen_reasoning.add(str(item.get("id", "")))
            issued = fake.issued(str(item.get("encrypted_content", "")))
            if issued is None:
                continue
            nxt = items[pos + 1] if pos + 1 < len(items) else None
            if nxt is None or not same_output_item(nxt, issued["following"]):
                return (
                    f"Item '{item.get('id', issued['id'])}' of type 'reasoning' was provided "
                    "without its required following item."
                )
        elif item.get("type") == "function_call" and item.get("id"):
            required = fake.issued("fc:" + str(item["id"]))
            if required is not None and required["id"] not in seen_reasoning:
                return (
                    f"Item '{item['id']}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{required['id']}'."
                )
    return None


def _misplaced_thinking(fake: FakeUpstreams, body: dict[str, Any]) -> str | None:
    msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    last_idx = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=None)
    if last_idx is None or not isinstance(msgs[last_idx].get("content"), list):
        return None
    blocks = [b for b in msgs[last_idx]["content"] if isinstance(b, dict)]
    kinds = [b.get("type") for b in blocks]
    n_reasoning = sum(1 for k in kinds if k in ("thinking", "redacted_thinking"))
    modified = (
        f"messages.{last_idx}.content: `thinking` or `redacted_thinking` blocks in the latest assistant "
        "message cannot be modified. These blocks must remain as they were in the original response."
    )
    if n_reasoning:
        if any(k not in ("thinking", "redacted_thinking") for k in kinds[:n_reasoning]):
            return modified
        first = blocks[0]
        issued = fake.issued(str(first.get("signature") or first.get("data") or ""))
        if issued is None or blocks[:n_reasoning] != issued["reasoning"]:
            return modified
        rest = [(b.get("type"), b.get("id"), b.get("text")) for b in blocks[n_reasoning:]]
        if rest != issued["rest"]:
            return modified
        return None
    thinking_on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    last = msgs[-1] if msgs else {}
    in_tool_loop = isinstance(last.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
    )
    issued_with_thinking = any(
        fake.issued("tool_use:" + str(b.get("id"))) for b in blocks if b.get("type") == "tool_use"
    )
    if thinking_on and in_tool_loop and issued_with_thinking:
        return (
            f"messages.{last_idx}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
            f"found `{kinds[0]}`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
            "blocks). We recommend you include thinking blocks from previous turns. To avoid this "
            "requirement, disable `thinking`."
        )
    return None


def same_output_item(sent: Mapping[str, Any], issued: Mapping[str, Any] | None) -> bool:
    """Whether an input item is the output item ``issued`` (by id, else by what identifies it)."""
    if issued is None:
        return False
    if sent.get("id"):
        return sent["id"] == issued["id"]
    if issued["type"] == "function_call":
        return sent.get("type") == "function_call" and sent.get("call_id") == issued["call_id"]
    if issued["type"] == "reasoning":
        return sent.get("encrypted_content") == issued.get("encrypted_content")
    if issued["type"] == "message":
        return sent.get("role") == "assistant" and content_to_text(sent.get("content")) == content_to_text(
            issued["content"]
        )
    return False
