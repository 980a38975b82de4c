"""The pairwise judge: the prompt it gets and the strict parse of its verdict.

The judge sees the conversation (the client's messages: roles, text, tool calls and tool
results) and the two final answers (text and tool calls) -- never reasoning -- in an order drawn
at random per pair (position bias: Zheng et al. 2023, "Judging LLM-as-a-Judge with MT-Bench and
Chatbot Arena", §3.3) and recorded with the pair. It must answer with exactly one line
``VERDICT: A``, ``VERDICT: B`` or ``VERDICT: TIE`` (surrounding whitespace allowed); anything
else is ``invalid``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..providers.types import CompletionRequest, Message

#: Marks a judge prompt (the simulated upstreams answer such prompts with verdicts).
JUDGE_MARKER = "[muse-shadow-judge]"

DEFAULT_INSTRUCTIONS = "Which answer serves the user better: more correct, more helpful, better tool use?"

_VERDICT = re.compile(r"VERDICT: (A|B|TIE)")


def _render_calls(calls: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        f"\n[tool call] {c.get('name', '')}({json.dumps(c.get('arguments', {}), sort_keys=True)})"
        for c in calls
    )


def render_conversation(messages: Sequence[Mapping[str, Any]]) -> str:
    """The client's messages as plain text, one block per message (tool calls and results shown)."""
    blocks = []
    for m in messages:
        text = m.get("content", "") or "".join(p.get("text", "") for p in m.get("parts", ()))
        blocks.append(f"<{m['role']}>\n{text}{_render_calls(m.get('tool_calls', ()))}\n</{m['role']}>")
    return "\n".join(blocks)


def judge_request(
    *,
    messages: Sequence[Mapping[str, Any]],
    primary: Mapping[str, Any],
    candidate: Mapping[str, Any],
    candidate_first: bool,
    instructions: str,
) -> CompletionRequest:
    """The judge's request. ``primary`` / ``candidate``: ``{"text", "tool_calls"}``;
    ``candidate_first``: the candidate's answer is shown as A."""
    a, b = (candidate, primary) if candidate_first else (primary, candidate)
    system = (
        f"{JUDGE_MARKER} You compare two assistant answers to the same conversation.\n"
        f"{instructions or DEFAULT_INSTRUCTIONS}\n"
        "Reply with exactly one line: VERDICT: A, VERDICT: B or VERDICT: TIE."
    )
    user = (
        f"<conversation>\n{render_conversation(messages)}\n</conversation>\n"
        f"<answer_a>\n{a.get('text', '')}{_render_calls(a.get('tool_calls', ()))}\n</answer_a>\n"
        f"<answer_b>\n{b.get('text', '')}{_render_calls(b.get('tool_calls', ()))}\n</answer_b>"
    )
    return CompletionRequest(
        messages=(Message(role="system", content=system), Message(role="user", content=user)),
        tools=(),
        max_output_tokens=16,
    )


def parse_verdict(text: str, *, candidate_first: bool) -> str:
    """``candidate`` | ``primary`` | ``tie`` | ``invalid`` from the judge's answer (strict: the
    whole answer, trimmed, must be one ``VERDICT: A|B|TIE`` line)."""
    match = _VERDICT.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        return "invalid"
    letter = match.group(1)
    if letter == "TIE":
        return "tie"
    return "candidate" if (letter == "A") == candidate_first else "primary"
