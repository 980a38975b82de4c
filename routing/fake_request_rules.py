"""What the real APIs refuse in a request's conversation, for the simulated upstreams.

:func:`conversation_problem` gives the 400 ``invalid_request_error`` message the real API answers
a request's messages with (its wording), or ``None`` when it would take them; the simulated
upstreams (:mod:`routing.fake_upstreams`) answer with it in the API's own error shape, so tests
over real HTTP catch a request we build that the provider would refuse.

* Anthropic Messages: an empty text block ("messages: text content blocks must be non-empty";
  ``system: …`` in ``system``), a whitespace-only one ("… must contain non-whitespace text"), a
  message without content other than a final assistant one ("messages.N: all messages must have
  non-empty content except for the optional final assistant message"), a final assistant message
  ending in whitespace. Consecutive turns of one role are accepted (the API combines them).
* Chat Completions: an assistant message whose ``content`` is null without ``tool_calls``
  ("Invalid value for 'content': expected a string, got null.").

Sources: Anthropic's and OpenAI's 400 answers as quoted in their SDKs' and clients' issue
trackers (e.g. anthropics/claude-code #59812, #23369, #6774; vercel/ai #13744).
"""

from __future__ import annotations

from typing import Any


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
