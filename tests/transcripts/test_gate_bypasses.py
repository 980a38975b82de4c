"""Bypasses of the ingestion gate found by a red-team walkthrough: each shape is a rejected record.

Blobs have real sizes: Anthropic thinking signatures ~300-1000 base64 characters, redacted
thinking ``data`` and OpenAI ``encrypted_content`` several KB.
"""

from __future__ import annotations

import base64
import json
import os
import time

import pytest

from routing.transcripts.gate import RejectReason, find_encrypted_reasoning, gate_check
from tests.transcripts.test_gate import record, with_message

SIGNATURE = "EqQBCkYIBxgCKkD" + base64.b64encode(os.urandom(330)).decode()
REDACTED = "EmwKAhgBEgy" + base64.b64encode(os.urandom(1500)).decode()
FERNET = "gAAAAABo" + base64.urlsafe_b64encode(os.urandom(900)).decode().rstrip("=")
SECRETS = (SIGNATURE, REDACTED, FERNET)


def sse(event: str, data: dict) -> str:
    """One server-sent event as an SDK or proxy log records it."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


SIGNATURE_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "signature_delta", "signature": SIGNATURE},
}
THINKING_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "thinking", "thinking": ""},
}
THINKING_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "thinking_delta", "thinking": "Hmm."},
}
REDACTED_START = {  # the block's keys in the order a logger sorted them: data before type
    "type": "content_block_start",
    "index": 1,
    "content_block": {"data": REDACTED, "type": "redacted_thinking"},
}
REASONING_ITEM_DONE = {
    "type": "response.output_item.done",
    "output_index": 0,
    "sequence_number": 3,
    "item": {"type": "reasoning", "id": "rs_68c1", "summary": [], "encrypted_content": FERNET},
}


def in_arguments(value) -> dict:
    """A record whose output tool call carries ``value`` in its (free-form) arguments."""
    call = {"id": "call_1", "name": "log", "arguments": {"event": value}}
    return record(1, output={"text": "", "tool_calls": [call], "finish_reason": "tool_calls"})


# Item 1: recorded stream events; item 2: SDK reprs and marker order/distance in text.
SHAPES = {
    "anthropic-signature-delta-in-tool-arguments": (
        in_arguments(SIGNATURE_DELTA),
        "anthropic_thinking_signature",
    ),
    "anthropic-signature-delta-json-text": (
        with_message(1, json.dumps(SIGNATURE_DELTA)),
        "anthropic_thinking_signature",
    ),
    "anthropic-signature-delta-sse": (
        with_message(1, sse("content_block_delta", SIGNATURE_DELTA)),
        "anthropic_thinking_signature",
    ),
    "anthropic-thinking-block-start-in-tool-arguments": (
        in_arguments(THINKING_START),
        "anthropic_thinking_block",
    ),
    "anthropic-thinking-block-start-sse": (
        with_message(1, sse("content_block_start", THINKING_START)),
        "anthropic_thinking_block",
    ),
    "anthropic-thinking-delta-sse": (
        with_message(1, sse("content_block_delta", THINKING_DELTA)),
        "anthropic_thinking_block",
    ),
    "anthropic-redacted-thinking-block-start-sse": (
        with_message(1, sse("content_block_start", REDACTED_START)),
        "anthropic_redacted_thinking",
    ),
    "sdk-repr-redacted-thinking-block-start-event": (
        with_message(
            1,
            f"RawContentBlockStartEvent(content_block=RedactedThinkingBlock(data='{REDACTED}', "
            "type='redacted_thinking'), index=1, type='content_block_start')",
        ),
        "anthropic_redacted_thinking",
    ),
    "sdk-repr-redacted-thinking-block": (
        with_message(1, f"RedactedThinkingBlock(data='{REDACTED}', type='redacted_thinking')"),
        "anthropic_redacted_thinking",
    ),
    "signature-before-thinking": (
        with_message(1, f"{{'signature': '{SIGNATURE}', 'thinking': 'x', 'type': 'thinking'}}"),
        "anthropic_thinking_signature",
    ),
    "signature-3000-characters-after-thinking": (
        with_message(1, "thinking: " + "step " * 600 + f"signature: {SIGNATURE}"),
        "anthropic_thinking_signature",
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_stream_events_reprs_and_far_apart_markers_are_rejected(case):
    value, kind = SHAPES[case]
    (verdict,) = gate_check([value]).verdicts
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
    assert kind in {f.kind for f in find_encrypted_reasoning(value)}
    assert kind in verdict.detail
    assert not any(secret[:40] in verdict.detail for secret in SECRETS)


def test_shapes_the_old_detector_already_caught_stay_rejected():
    """Regression tests (the old detector caught these): ``response.output_item.done`` carrying
    a reasoning item, as an object and as SSE text; an SDK ``ThinkingBlock`` repr, whose class
    name puts "Thinking" before the signature."""
    repr_text = f"[ThinkingBlock(signature='{SIGNATURE}', thinking='Let me check.', type='thinking')]"
    (verdict,) = gate_check([with_message(1, repr_text)]).verdicts
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
    assert "anthropic_thinking_signature" in verdict.detail
    for value in (
        in_arguments(REASONING_ITEM_DONE),
        with_message(1, sse("response.output_item.done", REASONING_ITEM_DONE)),
    ):
        (verdict,) = gate_check([value]).verdicts
        assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
        assert "openai_encrypted_content" in verdict.detail


def test_text_that_mentions_thinking_and_signatures_without_a_blob_is_clean():
    clean = [
        "The thinking block carries a signature; redacted_thinking blocks carry data.",
        "signature: none, thinking: later, data: n/a, redacted_thinking: no",
        json.dumps({"type": "thinking_config", "budget_tokens": 1024}),
        json.dumps({"thinking": {"type": "enabled", "budget_tokens": 2048}, "data": [1, 2]}),
    ]
    for text in clean:
        assert find_encrypted_reasoning(text) == [], text
        assert gate_check([with_message(1, text)]).verdicts[0].accepted


def test_repeated_marker_words_are_scanned_in_linear_time():
    """2 MB of ``thinking`` took 15 s (a 2,000-character lazy gap after every occurrence);
    the search is now one pass per marker."""
    text = "thinking redacted_thinking signature data " * 50_000
    start = time.perf_counter()
    assert find_encrypted_reasoning(text) == []
    assert time.perf_counter() - start < 5
