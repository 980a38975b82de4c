"""Bypasses of the ingestion gate found by a red-team walkthrough: each shape is a rejected record.

Blobs have real sizes: Anthropic thinking signatures ~300-1000 base64 characters, redacted
thinking ``data`` and OpenAI ``encrypted_content`` several KB.
"""

from __future__ import annotations

import base64
import codecs
import gzip
import json
import os
import quopri
import time
import zlib

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


# Item 3: encodings the detector did not open, invisible characters, blobs split across strings.
# Here the encoded content carries a marker (a Fernet blob, a thinking block); the same
# encodings of marker-less random blobs are opaque blobs (test_gate_opaque.py).
THINKING_JSON = json.dumps({"type": "thinking", "thinking": "Let me check.", "signature": SIGNATURE})


def _hex_pairs(text: str, sep: str, prefix: str = "") -> str:
    return sep.join(f"{prefix}{b:02x}" for b in text.encode())


def _invisible(text: str, char: str, every: int = 7) -> str:
    return char.join(text[i : i + every] for i in range(0, len(text), every))


def _split_message(text: str, size: int = 10) -> dict:
    """A record whose user message carries ``text`` split over its parts (empty content), in
    pieces too short to hold the Fernet prefix and a blob."""
    parts = [{"text": text[i : i + size]} for i in range(0, len(text), size)]
    r = record(1)
    r["input"]["messages"].append({"role": "user", "content": "", "parts": parts})
    return r


def _split_messages(text: str, size: int = 10) -> dict:
    """A record whose consecutive user/assistant messages each carry a short piece of ``text``."""
    r = record(1)
    r["input"]["messages"] += [
        {"role": "user" if i % 2 else "assistant", "content": text[j : j + size]}
        for i, j in enumerate(range(0, len(text), size))
    ]
    return r


def _codec(text: str, name: str) -> str:
    return codecs.encode(text, name)


ENCODED = {
    "gzip-then-base64-of-a-thinking-block": with_message(
        1, base64.b64encode(gzip.compress(THINKING_JSON.encode())).decode()
    ),
    "zlib-then-base64-of-a-thinking-block": with_message(
        1, base64.b64encode(zlib.compress(THINKING_JSON.encode())).decode()
    ),
    "utf16-then-base64-of-a-fernet-blob": with_message(1, base64.b64encode(FERNET.encode("utf-16")).decode()),
    "utf16le-then-base64-of-a-thinking-block": with_message(
        1, base64.b64encode(THINKING_JSON.encode("utf-16-le")).decode()
    ),
    "utf16be-then-hex-of-a-fernet-blob": with_message(1, FERNET.encode("utf-16-be").hex()),
    "base32-of-a-fernet-blob": with_message(1, base64.b32encode(FERNET.encode()).decode()),
    "base32-lower-unpadded-of-a-thinking-block": with_message(
        1, base64.b32encode(THINKING_JSON.encode()).decode().lower().rstrip("=")
    ),
    "base85-of-a-fernet-blob": with_message(1, base64.b85encode(FERNET.encode()).decode()),
    "ascii85-of-a-thinking-block": with_message(
        1, base64.a85encode(THINKING_JSON.encode(), adobe=True).decode()
    ),
    "quoted-printable-of-a-thinking-block": with_message(
        1, quopri.encodestring(THINKING_JSON.encode(), quotetabs=True).decode()
    ),
    "quoted-printable-every-byte-of-a-fernet-blob": with_message(
        1, "".join(f"={b:02X}" for b in FERNET.encode())
    ),
    "rot13-of-a-fernet-blob": with_message(1, _codec(FERNET, "rot13")),
    "rot13-of-a-thinking-block": with_message(1, _codec(THINKING_JSON, "rot13")),
    "reversed-fernet-blob": with_message(1, FERNET[::-1]),
    "reversed-thinking-block": with_message(1, THINKING_JSON[::-1]),
    "x-escapes-of-a-fernet-blob": with_message(1, _hex_pairs(FERNET[:200], "", "\\x")),
    "octal-escapes-of-a-fernet-blob": with_message(1, "".join(f"\\{b:03o}" for b in FERNET[:200].encode())),
    "colon-hex-of-a-fernet-blob": with_message(1, _hex_pairs(FERNET[:200], ":")),
    "spaced-hex-of-a-thinking-block": with_message(1, _hex_pairs(THINKING_JSON, " ")),
    "c-array-hex-of-a-fernet-blob": with_message(1, "{" + _hex_pairs(FERNET[:200], ", ", "0x") + "}"),
    "u-escape-in-the-fernet-prefix": with_message(1, "\\u0067AAAAA" + FERNET[6:]),
    "u-escapes-throughout": with_message(1, "".join(f"\\u{ord(c):04x}" for c in FERNET[:200])),
    "percent-u-escapes": with_message(1, "".join(f"%u{ord(c):04X}" for c in FERNET[:200])),
    "html-character-references": with_message(1, "".join(f"&#x{ord(c):x};" for c in FERNET[:200])),
    "zero-width-spaces-in-a-fernet-blob": with_message(1, _invisible(FERNET, "\u200b")),
    "word-joiners-in-a-fernet-blob": with_message(1, _invisible(FERNET, "\u2060", 3)),
    "soft-hyphen-after-the-fernet-prefix": with_message(1, FERNET[:6] + "\u00ad" + FERNET[6:]),
    "bidi-marks-in-a-fernet-blob": with_message(1, _invisible(FERNET, "\u200e\u202e")),
    "combining-marks-in-a-fernet-blob": with_message(1, _invisible(FERNET, "\u0301")),
    "tag-characters-spelling-a-fernet-blob": with_message(
        1, "nothing to see" + "".join(chr(0xE0000 + ord(c)) for c in FERNET[:200])
    ),
    "fernet-blob-split-across-list-items": in_arguments([FERNET[i : i + 10] for i in range(0, 400, 10)]),
    "fernet-blob-split-across-message-parts": _split_message(FERNET[:400]),
    "fernet-blob-split-across-messages": _split_messages(FERNET[:400]),
    "base64-thinking-block-split-across-list-items": in_arguments(
        _invisible(base64.b64encode(THINKING_JSON.encode()).decode(), " ", 9).split()
    ),
}
MARKER_KINDS = {
    "fernet_blob",
    "fernet_token",
    "openai_encrypted_content",
    "anthropic_thinking_signature",
    "anthropic_thinking_block",
    "anthropic_redacted_thinking",
}


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_encoded_invisible_and_split_reasoning_is_rejected(case):
    value = ENCODED[case]
    (verdict,) = gate_check([value]).verdicts
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
    assert {f.kind for f in find_encrypted_reasoning(value)} & MARKER_KINDS
    assert not any(secret[:40] in verdict.detail for secret in SECRETS)


def test_clean_text_in_the_new_layers_passes():
    """The same layers over clean text: decoded, scanned, accepted."""
    note = "A plain note about the release: nothing hidden, version 1.2.3, see the changelog."
    clean = [
        base64.b64encode(gzip.compress(note.encode())).decode(),
        base64.b64encode(note.encode("utf-16")).decode(),
        base64.b32encode(note.encode()).decode(),
        base64.b85encode((note * 2).encode()).decode(),
        quopri.encodestring(note.encode(), quotetabs=True).decode(),
        _codec(note, "rot13"),
        note[::-1],
        _hex_pairs(note, ":"),
        "".join(f"\\u{ord(c):04x}" for c in note),
        _invisible(note, "\u200b"),
        "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001f600 \u0645\u0631\u062d\u0628\u0627",
    ]
    for text in clean:
        assert find_encrypted_reasoning(text) == [], text
        assert gate_check([with_message(1, text)]).verdicts[0].accepted


def test_text_whose_every_decoding_layer_is_nearly_all_of_it_is_refused_past_the_budget():
    """Random printable characters decode (percent, character references, escapes, base85 …) to
    nearly themselves layer after layer: past MAX_DECODED_CHARS + 4 characters per character of
    the value's own text the value is refused rather than scanned on."""
    import random as _random

    from routing.transcripts.gate import find_encrypted_reasoning

    rng = _random.Random(1)
    text = "".join(chr(rng.randrange(33, 118)) for _ in range(400_000))
    assert "decode_budget_exceeded" in {f.kind for f in find_encrypted_reasoning(text)}
    # ordinary text with a large base64 attachment of text stays within it, and is clean
    prose = "The quick brown fox jumps over the lazy dog; see https://example.org/a?b=c%20d. " * 4000
    attachment = base64.b64encode(prose.encode()).decode()
    assert find_encrypted_reasoning({"content": prose, "attachment": attachment}) == []
