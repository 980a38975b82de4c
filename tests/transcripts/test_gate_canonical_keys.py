"""Bypasses of the ingestion gate through the spelling of keys and ``type`` values, and through
bzip2/xz/lzma compression: each shape is a rejected record (``contains_encrypted_reasoning``).

The gate matched object keys and ``type`` values exactly (apart from case) while it normalises
strings; keys and types are now matched in canonical form (normalised, casefolded, separators
removed). Blobs have real sizes and shapes; a short blob variant as well, which the opaque-blob
rule alone would not refuse.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import lzma
import os
import time
import tracemalloc

import pytest

from routing.transcripts.gate import (
    MAX_INFLATED_BYTES,
    RejectReason,
    find_encrypted_reasoning,
    gate_check,
    strip_encrypted_reasoning,
)
from tests.transcripts.test_gate import record, with_message

# Real shapes: an Anthropic redacted_thinking ``data`` / thinking ``signature`` (protobuf-ish
# base64, several hundred bytes), a short one (too short to be an opaque blob), a Responses
# ``encrypted_content`` that is not Fernet, and Fernet tokens.
REDACTED = "EmwKAhgBEgwx" + base64.b64encode(os.urandom(1200)).decode()
REDACTED_SHORT = "EmwKAhgBEgwxMjM0NTY3ODkwYWJjZGVm"
SIGNATURE = "EqQBCkYIBxgCKkD" + base64.b64encode(os.urandom(330)).decode()
SIGNATURE_SHORT = "EqQBCkYIBxgCKkDcVuZ7Fx2sQ0Rt"
NOT_FERNET = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8w"  # bytes 1..48
NOT_FERNET_LONG = "rs_enc_v1." + base64.b64encode(os.urandom(2000)).decode()
FERNET_SHORT = "gAAAAABoXyZ0cW3sMqv1RkT9bN2x"
FERNET = "gAAAAABo" + base64.urlsafe_b64encode(os.urandom(900)).decode().rstrip("=")
SECRETS = (REDACTED, REDACTED_SHORT, SIGNATURE, SIGNATURE_SHORT, NOT_FERNET, NOT_FERNET_LONG, FERNET)


def in_content(block: dict) -> dict:
    """A record whose assistant output content holds ``block`` (a content block list)."""
    return record(1, output={"content": [block, {"type": "text", "text": "The answer is 4."}]})


def redacted(type_value: str, data: str = REDACTED) -> dict:
    return in_content({"type": type_value, "data": data})


def reasoning_item(key: str, blob: str = NOT_FERNET) -> dict:
    item = {"type": "reasoning", "id": "rs_68c1a2", "summary": [], key: blob}
    return record(1, input={"messages": [item, {"role": "user", "content": "and now?"}]})


def compressed(compress, payload: dict) -> dict:
    blob = base64.b64encode(compress(json.dumps(payload).encode())).decode()
    return with_message(1, blob)


_XZ = lzma.compress
_LZMA_ALONE = lambda raw: lzma.compress(raw, format=lzma.FORMAT_ALONE)  # noqa: E731

SHAPES = {
    # redacted_thinking type spellings
    "redacted-thinking-trailing-space": (redacted("redacted_thinking "), "anthropic_redacted_thinking"),
    "redacted-thinking-trailing-space-short": (
        redacted("redacted_thinking ", REDACTED_SHORT),
        "anthropic_redacted_thinking",
    ),
    "redacted-thinking-zero-width": (redacted("redacted\u200b_thinking"), "anthropic_redacted_thinking"),
    "redacted-thinking-zero-width-short": (
        redacted("redacted\u200b_thinking", REDACTED_SHORT),
        "anthropic_redacted_thinking",
    ),
    "redacted-thinking-hyphen": (
        redacted("redacted-thinking", REDACTED_SHORT),
        "anthropic_redacted_thinking",
    ),
    "redacted-thinking-camel": (redacted("redactedThinking", REDACTED_SHORT), "anthropic_redacted_thinking"),
    "redacted-thinking-data-key-spelled": (
        in_content({"type": "Redacted_Thinking", "Data ": REDACTED_SHORT}),
        "anthropic_redacted_thinking",
    ),
    # thinking blocks
    "thinking-leading-space": (
        in_content({"type": " thinking", "thinking": "2 + 2 = 4.", "signature": SIGNATURE}),
        "anthropic_thinking_signature",
    ),
    "thinking-leading-space-short": (
        in_content({"type": " thinking", "thinking": "2 + 2 = 4.", "signature": SIGNATURE_SHORT}),
        "anthropic_thinking_signature",
    ),
    "thinking-keys-spelled": (
        in_content({"type": "thinking", "Thinking\u200b": "2 + 2 = 4.", "signature_": SIGNATURE_SHORT}),
        "anthropic_thinking_signature",
    ),
    "signature-delta-spelled": (
        record(
            1,
            output={
                "events": [
                    {
                        "type": "content_block_delta",
                        "delta": {"type": "signature-delta", "Signature": SIGNATURE_SHORT},
                    }
                ]
            },
        ),
        "anthropic_thinking_signature",
    ),
    "thinking-delta-spelled": (
        record(
            1,
            output={
                "events": [
                    {"type": "content_block_delta", "delta": {"type": "thinkingDelta", "thinking ": "Hmm."}}
                ]
            },
        ),
        "anthropic_thinking_block",
    ),
    "content-block-start-thinking-spelled": (
        record(
            1,
            output={
                "events": [
                    {"type": "content_block_start", "content_block": {"type": "Thinking ", "thinking": ""}}
                ]
            },
        ),
        "anthropic_thinking_block",
    ),
    # encrypted_content key spellings (blob not Fernet)
    "encrypted-content-camel": (reasoning_item("encryptedContent"), "openai_encrypted_content"),
    "encrypted-content-hyphen": (reasoning_item("encrypted-content"), "openai_encrypted_content"),
    "encrypted-content-zero-width": (reasoning_item("encrypted\u200b_content"), "openai_encrypted_content"),
    "encrypted-content-fullwidth": (
        reasoning_item(
            "\uff45\uff4e\uff43\uff52\uff59\uff50\uff54\uff45\uff44_\uff43\uff4f\uff4e\uff54\uff45\uff4e\uff54"
        ),
        "openai_encrypted_content",
    ),
    "encrypted-content-dotted-long-blob": (
        reasoning_item("Encrypted.Content", NOT_FERNET_LONG),
        "openai_encrypted_content",
    ),
    "encrypted-content-spelled-in-json-text": (
        with_message(1, json.dumps({"type": "reasoning", "encryptedContent": NOT_FERNET})),
        "openai_encrypted_content",
    ),
    "encrypted-content-spelled-marker-text": (
        with_message(1, f"ReasoningItem(id='rs_1', encrypted-content='{NOT_FERNET}')"),
        "openai_encrypted_content",
    ),
    "output-item-done-spelled": (
        with_message(
            1,
            "event: response.output_item.done\ndata: "
            + json.dumps(
                {
                    "type": "response.output_item.done",
                    "item": {"type": "reasoning", "EncryptedContent": NOT_FERNET},
                }
            )
            + "\n\n",
        ),
        "openai_encrypted_content",
    ),
    # compressed then base64
    "bz2-of-encrypted-content": (
        compressed(bz2.compress, {"encrypted_content": FERNET_SHORT}),
        "fernet_blob",
    ),
    "bz2-of-encrypted-content-long": (compressed(bz2.compress, {"encrypted_content": FERNET}), "fernet_blob"),
    "xz-of-encrypted-content": (compressed(_XZ, {"encrypted_content": FERNET_SHORT}), "fernet_blob"),
    "xz-of-encrypted-content-long": (compressed(_XZ, {"encrypted_content": FERNET}), "fernet_blob"),
    "lzma-alone-of-encrypted-content": (
        compressed(_LZMA_ALONE, {"encrypted_content": FERNET_SHORT}),
        "fernet_blob",
    ),
    "xz-of-spelled-redacted-block": (
        compressed(_XZ, {"type": "redacted-thinking", "data": REDACTED_SHORT}),
        "anthropic_redacted_thinking",
    ),
    "gzip-members-benign-then-reasoning": (
        with_message(
            1,
            base64.b64encode(
                gzip.compress(b"just a note, nothing to see here. " * 3)
                + gzip.compress(json.dumps({"encrypted_content": FERNET_SHORT}).encode())
            ).decode(),
        ),
        "fernet_blob",
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_spelled_keys_types_and_compressed_reasoning_are_rejected(case):
    value, kind = SHAPES[case]
    (verdict,) = gate_check([value]).verdicts
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,), verdict.detail
    # found by its markers, not only as an opaque blob: the transcript writer strips it too
    assert kind in {f.kind for f in find_encrypted_reasoning(value)}
    stripped, removed = strip_encrypted_reasoning(value)
    assert removed and find_encrypted_reasoning(stripped) == []
    assert not any(secret[:24] in verdict.detail for secret in SECRETS)


LEGIT = {
    "thinking-config-keys": record(
        1,
        extra={
            "thinking_budget": 2048,
            "thinking_enabled": True,
            "thinkingBudget": 1024,
            "data": [1, 2, 3],
            "signature_required": False,
        },
    ),
    "thinking-request-config": record(1, extra={"thinking": {"type": "enabled", "budget_tokens": 2048}}),
    "content-and-encryption-fields": record(
        1,
        extra={
            "content": "Encrypted content is stored with AES-GCM.",
            "encrypted": True,
            "content_type": "text",
        },
    ),
    "text-block-about-redacted-thinking": in_content(
        {"type": "text", "text": "A redacted-thinking block carries data; an encrypted-content item too."}
    ),
    "type-named-like-a-marker-but-no-carrier-key": in_content(
        {"type": "redacted thinking note", "note": "hi"}
    ),
    "redacted-type-without-data": in_content({"type": "redacted_thinking ", "text": "nothing here"}),
    "dataset-record-with-data-key": record(
        1, extra={"type": "dataset", "data": {"rows": 3}, "signature_count": 2}
    ),
    "encrypted-content-empty": reasoning_item("encryptedContent", ""),
    "bz2-of-clean-text": with_message(
        1, base64.b64encode(bz2.compress(b"The capital of France is Paris. " * 4)).decode()
    ),
    "xz-of-clean-json": with_message(
        1,
        base64.b64encode(
            lzma.compress(json.dumps({"content": "hello", "thinking_budget": 10}).encode())
        ).decode(),
    ),
}


@pytest.mark.parametrize("case", sorted(LEGIT))
def test_near_misses_still_pass(case):
    value = LEGIT[case]
    assert find_encrypted_reasoning(value) == []
    (verdict,) = gate_check([value]).verdicts
    assert verdict.accepted, verdict.detail


@pytest.mark.parametrize(
    "compress",
    [gzip.compress, bz2.compress, _XZ, _LZMA_ALONE],
    ids=["gzip", "bz2", "xz", "lzma-alone"],
)
def test_decompression_bombs_stay_bounded_and_are_refused(compress):
    """64 MB of zeros then a reasoning item compress to a few hundred bytes (bz2) to a few KB:
    every decompressor inflates at most MAX_INFLATED_BYTES, so memory stays bounded, and a
    stream inflating to more is refused unread (``inflate_limit_exceeded``), not accepted."""
    payload = b"\0" * (64 * 1024 * 1024) + json.dumps({"encrypted_content": FERNET_SHORT}).encode()
    blob = base64.b64encode(compress(payload)).decode()
    assert len(blob) < 128 * 1024  # really a bomb
    value = with_message(1, blob)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        (verdict,) = gate_check([value]).verdicts
        findings = find_encrypted_reasoning(value)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
    assert "inflate_limit_exceeded" in {f.kind for f in findings}
    assert peak < 16 * MAX_INFLATED_BYTES
    assert elapsed < 10


def test_canonical_matching_stays_linear():
    """Many keys and long spelled keys/types: one pass over them. Four times the input takes well
    under the 16 times a quadratic scan would (best of three runs of each size, so a loaded
    machine's pauses do not decide it)."""

    def inputs(n: int) -> tuple[dict, dict]:
        wide = {f"encrypted_{i}_content_x": "v" for i in range(n)}
        long_key = {"\u200b".join("encrypted_content") * (n // 2): "v", "type": " thinking" * (2 * n)}
        return wide, long_key

    def best_of_three(n: int) -> float:
        wide, long_key = inputs(n)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            assert find_encrypted_reasoning(wide) == []
            assert find_encrypted_reasoning(long_key) == []
            times.append(time.perf_counter() - start)
        return min(times)

    assert best_of_three(40_000) / best_of_three(10_000) < 8
