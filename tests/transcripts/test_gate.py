"""The ingestion gate: every record of a tricky-case corpus is rejected, clean Avocado records pass unchanged."""

from __future__ import annotations

import base64
import copy
import json
import os
import struct
import urllib.parse

import pytest

from routing.transcripts.gate import (
    MAX_DECODE_DEPTH,
    MAX_DECODES_PER_VALUE,
    RejectReason,
    find_encrypted_reasoning,
    gate_check,
    record_json,
    strip_encrypted_reasoning,
)

BLOB = "gAAAAABo" + base64.urlsafe_b64encode(os.urandom(120)).decode().rstrip("=")
SIGNATURE = "EqQBCkYIBxgCKkD" + base64.b64encode(os.urandom(90)).decode()
REDACTED = "EmwKAhgBEgy" + base64.b64encode(os.urandom(60)).decode()
OPAQUE = base64.b64encode(os.urandom(90)).decode()  # an encrypted_content blob without the Fernet prefix


def reasoning_item() -> dict:
    return {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": BLOB}


def opaque_item() -> dict:
    return {"type": "reasoning", "encrypted_content": OPAQUE}


def thinking_block(text: str = "") -> dict:
    return {"type": "thinking", "thinking": text, "signature": SIGNATURE}


def redacted_block() -> dict:
    return {"type": "redacted_thinking", "data": REDACTED}


def b64(text: str, *, urlsafe: bool = False, pad: bool = True) -> str:
    enc = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(text.encode()).decode()
    return enc if pad else enc.rstrip("=")


def fernet_bytes_b64() -> str:
    """A real-format Fernet token (0x80, non-zero timestamp so its text does not start gAAAAA)."""
    token = (
        b"\x80" + struct.pack(">Q", 0x7F00_0000_0000_0000) + os.urandom(16) + os.urandom(32) + os.urandom(32)
    )
    return base64.b64encode(token).decode()


def record(i: int, **overrides) -> dict:
    """A clean native training record as the export writes it."""
    base = {
        "record_id": f"rec-{i}",
        "session_id": f"s-{i}",
        "turn": 1,
        "user_id": f"u-{i}",
        "provenance": "native",
        "provider_kind": "native",
        "served_model": "avocado/8f1c",
        "model_version": "avocado-v15",
        "experiment": "exp",
        "variant": "control",
        "created_at": "2026-01-02T03:04:05.678901+00:00",
        "input": {
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Fix bug #{i} — naïve café 😀 日本語"},
            ],
            "tools": [
                {"name": "search", "description": "", "parameters": {"type": "object", "properties": {}}}
            ],
        },
        "output": {"text": "Done.", "tool_calls": [], "finish_reason": "stop"},
        "usage": {"input_tokens": 120, "output_tokens": 7, "vendor": {"prompt_tokens": 120}},
    }
    base.update(overrides)
    return base


def with_message(i: int, content) -> dict:
    r = record(i)
    r["input"]["messages"].append({"role": "tool", "tool_call_id": "call_1", "content": content})
    return r


# Each case: a record that must be rejected for carrying encrypted reasoning.
TRICKY = {
    "responses-item-top-level": lambda: record(1, reasoning=reasoning_item()),
    "responses-item-in-input": lambda: record(
        2, input={"messages": [reasoning_item(), {"role": "user", "content": "hi"}]}
    ),
    "deeply-nested": lambda: record(3, output={"a": [{"b": [{"c": {"d": [[[reasoning_item()]]]}}]}]}),
    "fernet-blob-in-plain-text": lambda: with_message(4, f"the model said {BLOB} earlier"),
    "encrypted-content-empty-summary-key-only": lambda: record(5, extra={"encrypted_content": BLOB}),
    "anthropic-thinking-with-signature": lambda: record(
        6, output={"content": [thinking_block("Considering."), {"type": "text", "text": "hi"}]}
    ),
    "anthropic-thinking-empty-text": lambda: record(7, output={"content": [thinking_block("")]}),
    "anthropic-thinking-untyped": lambda: record(8, output={"thinking": "x", "signature": SIGNATURE}),
    "anthropic-redacted-thinking": lambda: record(9, output={"content": [redacted_block()]}),
    "json-in-string": lambda: with_message(10, json.dumps({"output": [reasoning_item()]})),
    "json-in-json-in-string": lambda: with_message(
        11, json.dumps(json.dumps({"content": [redacted_block()]}))
    ),
    "base64-json-thinking": lambda: with_message(12, b64(json.dumps(thinking_block("")))),
    "base64-urlsafe-unpadded": lambda: with_message(
        13, b64(json.dumps(reasoning_item()), urlsafe=True, pad=False)
    ),
    "base64-of-blob-glued-to-text": lambda: with_message(14, "blob:" + b64(BLOB)),
    "base64-glued-to-word": lambda: with_message(15, "xyz" + b64(json.dumps(redacted_block()))),
    "base64-of-base64-of-json": lambda: with_message(16, b64(b64(json.dumps(thinking_block("t"))))),
    "base64-inside-json-in-string": lambda: with_message(
        17, json.dumps({"payload": b64(json.dumps(reasoning_item()))})
    ),
    "raw-fernet-token-bytes": lambda: with_message(18, fernet_bytes_b64()),
    "blob-as-object-key": lambda: record(19, output={BLOB: "x"}),
    "fullwidth-unicode-blob": lambda: with_message(20, "ｇＡＡＡＡＡ" + BLOB[6:]),
    "unicode-around-blob": lambda: with_message(21, f"日本語😀{BLOB}café"),
    "prose-with-unparseable-json-fragment": lambda: with_message(
        22, 'log line: {"type": "reasoning", "encrypted_content": "' + BLOB[:40] + '" (truncated'
    ),
    "escaped-json-fragment": lambda: with_message(
        23, 'error body: {\\"type\\": \\"redacted_thinking\\", \\"data\\": \\"' + REDACTED + '\\"}'
    ),
    "signature-in-thinking-prose": lambda: with_message(
        24, "thinking block was {'type': 'thinking', 'thinking': '', 'signature': '" + SIGNATURE + "'}"
    ),
    "tool-call-arguments": lambda: record(
        25,
        output={"text": "", "tool_calls": [{"id": "c", "name": "n", "arguments": {"x": [thinking_block()]}}]},
    ),
    "huge-record-with-blob-at-the-end": lambda: with_message(26, "clean words " * 200_000 + BLOB),
    "deep-nesting-500": lambda: record(27, output=_nest(500, reasoning_item())),
    # Disguises: key/marker case, hex and percent layers (alone and mixed with base64/JSON).
    "key-case-changed": lambda: record(28, output={"type": "reasoning", "Encrypted_Content": OPAQUE}),
    "key-upper-case": lambda: record(29, output=[{"TYPE": "REASONING", "ENCRYPTED_CONTENT": OPAQUE}]),
    "redacted-thinking-type-case": lambda: record(30, output={"Type": "Redacted_Thinking", "Data": OPAQUE}),
    "thinking-signature-key-case": lambda: record(
        31, output={"type": "Thinking", "thinking": "", "Signature": OPAQUE}
    ),
    "key-case-in-prose": lambda: with_message(32, 'body: {"Encrypted_Content": "' + OPAQUE + '"'),
    "hex-of-json": lambda: with_message(33, json.dumps(opaque_item()).encode().hex()),
    "hex-upper-case": lambda: with_message(34, "dump " + json.dumps(opaque_item()).encode().hex().upper()),
    "hex-of-base64-of-json": lambda: with_message(35, b64(json.dumps(opaque_item())).encode().hex()),
    "base64-of-hex-of-json": lambda: with_message(36, b64(json.dumps(opaque_item()).encode().hex())),
    "hex-in-json-in-string": lambda: with_message(
        37, json.dumps({"blob": json.dumps({"content": [redacted_block()]}).encode().hex()})
    ),
    "percent-encoded-json": lambda: with_message(38, "q=" + urllib.parse.quote(json.dumps(opaque_item()))),
    "raw-fernet-token-hex": lambda: with_message(39, base64.b64decode(fernet_bytes_b64()).hex()),
}


def _nest(depth: int, leaf):
    node = leaf
    for _ in range(depth):
        node = {"n": [node]}
    return node


@pytest.mark.parametrize("case", sorted(TRICKY))
def test_every_tricky_record_is_rejected_for_encrypted_reasoning(case):
    report = gate_check([TRICKY[case]()])
    (verdict,) = report.verdicts
    assert not verdict.accepted
    assert RejectReason.CONTAINS_ENCRYPTED_REASONING in verdict.reasons
    assert report.accepted == ()
    # The verdict explains without echoing the secret.
    assert BLOB not in verdict.detail and SIGNATURE not in verdict.detail and REDACTED not in verdict.detail
    assert OPAQUE not in verdict.detail


def test_the_undisguised_forms_of_the_disguises_are_caught_too():
    """The controls for the disguise cases: plain and base64 forms (caught before the fix)."""
    for value in (opaque_item(), json.dumps(opaque_item()), b64(json.dumps(opaque_item()))):
        assert {f.kind for f in find_encrypted_reasoning(value)} == {"openai_encrypted_content"}
    hexed = find_encrypted_reasoning(json.dumps(opaque_item()).encode().hex())
    assert ("/<hex>/<json>", "openai_encrypted_content") in [(f.path, f.kind) for f in hexed]
    pct = find_encrypted_reasoning(urllib.parse.quote(json.dumps(opaque_item())))
    assert ("/<percent>/<json>", "openai_encrypted_content") in [(f.path, f.kind) for f in pct]


def test_a_blob_that_only_looks_like_a_fernet_token_at_a_shifted_start_is_clean():
    """One random base64 blob in 256 decodes to a 0x80 byte when read from its 2nd-4th
    character; that alone must not reject a clean record (an image, say). This blob is built so
    that it does, with a timestamp no real token has (CI caught the random form of this)."""
    lookalike = b"\x80" + b"\x7f" * 8 + bytes(range(80))  # 89 bytes: a token's length
    text = "Q" + base64.b64encode(lookalike).decode()  # read from its 2nd character
    assert find_encrypted_reasoning(text) == []
    assert gate_check([with_message(1, text)]).verdicts[0].accepted


def test_a_raw_fernet_token_glued_to_a_word_is_caught_at_a_shifted_start():
    """A real token (timestamp's high bytes zero) whose text does not start ``gAAAAA`` (the
    timestamp's 5th byte is 0xF0), glued to a word so its base64 starts 3 characters late."""
    token = b"\x80" + struct.pack(">Q", 0xF0_0000_0000) + bytes(range(16)) + bytes(64)
    text = base64.b64encode(token).decode()
    assert "gAAAAA" not in text
    assert [(f.path, f.kind) for f in find_encrypted_reasoning("xyz" + text)] == [
        ("/<base64>", "fernet_token")
    ]


def test_clean_hex_and_percent_text_is_not_a_finding():
    clean = {
        "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "model": "8f1c" * 8,
        "hex_text": b"hello world, a plain hex dump of text".hex(),
        "url": "https://example.com/search?q=caf%C3%A9%20au%20lait",
        "Type": "Reasoning",
        "Signature": "no thinking here",
    }
    assert find_encrypted_reasoning(clean) == []
    assert gate_check([record(1, extra=clean)]).verdicts[0].accepted


def test_decoding_work_per_value_is_bounded():
    """Past MAX_DECODES_PER_VALUE decodings a value is refused (decode_budget_exceeded), never
    let through unscanned; below it clean encoded text passes."""
    encoded = [b64(f"plain note number {i}") for i in range(MAX_DECODES_PER_VALUE + 10)]
    findings = find_encrypted_reasoning({"notes": encoded})
    assert [f.kind for f in findings] == ["decode_budget_exceeded"]
    assert find_encrypted_reasoning({"notes": encoded[:100]}) == []
    verdict = gate_check([record(1, notes=encoded)]).verdicts[0]
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)
    assert "decode_budget_exceeded" in verdict.detail


def _wrapped(text: str, layers: int, how: str) -> str:
    for _ in range(layers):
        text = {"base64": b64, "hex": lambda t: t.encode().hex(), "percent": urllib.parse.quote}[how](text)
    return text


@pytest.mark.parametrize("how", ["base64", "hex", "percent"])
def test_reasoning_wrapped_in_more_layers_than_the_detector_follows_is_refused(how):
    """Up to MAX_DECODE_DEPTH layers the blob itself is found; one layer more used to be accepted
    (a new-user walkthrough ingested a thinking block under 7 base64 layers). Now the layer the
    detector would not open is the finding, and the record is rejected."""
    thinking = json.dumps(thinking_block("Let me think"))
    inside = find_encrypted_reasoning(_wrapped(thinking, MAX_DECODE_DEPTH - 1, how))
    assert "anthropic_thinking_signature" in {f.kind for f in inside}
    for layers in (MAX_DECODE_DEPTH + 1, MAX_DECODE_DEPTH + 3):
        kinds = {f.kind for f in find_encrypted_reasoning(_wrapped(thinking, layers, how))}
        assert "decode_depth_exceeded" in kinds, (how, layers)
        verdict = gate_check([with_message(1, _wrapped(thinking, layers, how))]).verdicts[0]
        assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)


def test_clean_text_in_many_layers_is_refused_but_in_a_few_is_not():
    """The price of refusing what cannot be scanned: clean text under more layers than the
    detector follows is refused too; under a few it passes."""
    note = "a plain note about the release, nothing hidden"
    assert find_encrypted_reasoning(_wrapped(note, 3, "base64")) == []
    assert gate_check([with_message(1, _wrapped(note, 3, "base64"))]).verdicts[0].accepted
    assert [f.kind for f in find_encrypted_reasoning(_wrapped(note, MAX_DECODE_DEPTH + 2, "base64"))] == [
        "decode_depth_exceeded"
    ]


BAD_UNIT_IDS = {
    "trailing-space": "alice ",
    "leading-space": " alice",
    "zero-width-space": "alice\u200b",
    "nul": "alice\x00",
    "bom": "\ufeffalice",
    "not-nfc": "alice\u0301",
    "too-long": "a" * 201,
}


@pytest.mark.parametrize("field", ["user_id", "session_id"])
@pytest.mark.parametrize("case", sorted(BAD_UNIT_IDS))
def test_id_variants_are_refused_by_the_one_unit_id_rule(field, case):
    report = gate_check([record(1, **{field: BAD_UNIT_IDS[case]})], opted_out_users={"alice"})
    (verdict,) = report.verdicts
    assert verdict.reasons == (RejectReason.INVALID_RECORD,)
    assert verdict.detail.startswith(f"{field}: ")
    assert report.accepted == ()


def test_the_opted_out_id_itself_is_refused_and_others_pass():
    report = gate_check(
        [record(1, user_id="alice"), record(2, user_id="bob"), record(3, session_id=None)],
        opted_out_users={"alice"},
    )
    assert [v.reasons for v in report.verdicts] == [
        (RejectReason.OPTED_OUT,),
        (),
        (),
    ]
    assert [v.record_id for v, _, _ in report.accepted] == ["rec-2", "rec-3"]
    bad = gate_check([record(4, session_id=7)]).verdicts[0]
    assert bad.reasons == (RejectReason.INVALID_RECORD,) and bad.detail == "session_id must be a string"


def test_a_mixed_batch_keeps_only_clean_records_with_per_record_reasons():
    clean = [record(i) for i in range(100, 105)]
    batch = [
        clean[0],
        TRICKY["json-in-string"](),
        clean[1],
        record(200, provenance="external", provider_kind="azure_openai"),
        clean[2],
        record(201, user_id="opted-out-user"),
        "not a record",
        clean[3],
        {**record(202), "record_id": ""},
        clean[4],
        dict(clean[4]),
        TRICKY["base64-json-thinking"](),
    ]
    report = gate_check(batch, opted_out_users={"opted-out-user"})
    assert [v.index for v in report.verdicts if v.accepted] == [0, 2, 4, 7, 9]
    reasons = {v.index: v.reasons for v in report.rejected}
    assert reasons == {
        1: ("contains_encrypted_reasoning",),
        3: ("external_provider",),
        5: ("opted_out",),
        6: ("invalid_record",),
        8: ("invalid_record",),
        10: ("duplicate_in_batch",),
        11: ("contains_encrypted_reasoning",),
    }
    assert report.counts == {
        "received": 12,
        "accepted": 5,
        "rejected": 7,
        "contains_encrypted_reasoning": 2,
        "duplicate_in_batch": 1,
        "external_provider": 1,
        "invalid_record": 2,
        "opted_out": 1,
    }


def test_an_external_record_that_also_carries_reasoning_gets_both_reasons():
    r = record(1, provenance="external", provider_kind="anthropic", output={"content": [thinking_block()]})
    (verdict,) = gate_check([r]).verdicts
    assert set(verdict.reasons) == {"contains_encrypted_reasoning", "external_provider"}


@pytest.mark.parametrize(
    "value, detail",
    [
        (["a", "list"], "record must be a JSON object, not list"),
        ("text", "record must be a JSON object, not str"),
        (42, "record must be a JSON object, not int"),
        (None, "record must be a JSON object, not NoneType"),
        (
            {"user_id": "u", "provenance": "native"},
            "record_id must be a non-empty string of at most 200 characters",
        ),
        ({"record_id": "r", "provenance": "native"}, "user_id must be a string"),
        (
            {"record_id": "r", "user_id": "u"},
            "provenance must be a string ('native' or an external provider)",
        ),
        ({"record_id": "x" * 201, "user_id": "u", "provenance": "native"}, "record_id must be a non-empty"),
    ],
)
def test_non_records_get_a_clear_per_record_error(value, detail):
    (verdict,) = gate_check([value]).verdicts
    assert verdict.reasons == ("invalid_record",)
    assert verdict.detail.startswith(detail)


def test_records_over_the_size_limit_are_rejected_unscanned():
    big = with_message(1, "x" * 5000)
    (verdict,) = gate_check([big], max_record_bytes=4096).verdicts
    assert verdict.reasons == ("record_too_large",)
    assert verdict.record_id == "rec-1"


def test_clean_avocado_records_are_accepted_unchanged_and_byte_equal():
    clean = [
        record(1),
        with_message(
            2, "The field is called encrypted_content in the OpenAI docs; thinking blocks have a signature."
        ),
        with_message(3, b64("just some clean text that happens to be base64 encoded, nothing else")),
        with_message(4, base64.b64encode(b"plain text " * 30).decode()),  # base64 of text: read, clean
        with_message(5, json.dumps({"nested": {"json": ["string", 1, 2.5, None, True]}})),
        record(
            6,
            output={
                "text": "",
                "tool_calls": [{"id": "call_1", "name": "search", "arguments": {"q": "ünï"}}],
                "finish_reason": "tool_calls",
            },
        ),
        record(7, usage={"input_tokens": 0, "ratio": 0.1 + 0.2, "big": 2**62}),
    ]
    originals = copy.deepcopy(clean)
    report = gate_check(clean)
    assert [v.accepted for v in report.verdicts] == [True] * len(clean)
    for (verdict, accepted, text), original in zip(report.accepted, originals, strict=True):
        assert accepted is clean[verdict.index]  # the very object, untouched
        assert accepted == original
        assert text == json.dumps(original, ensure_ascii=False, separators=(",", ":"))
        assert json.loads(text) == original
        assert list(json.loads(text)) == list(original)  # key order kept


def test_strip_removes_every_carrier_and_leaves_clean_values_alone():
    clean = record(1)
    assert strip_encrypted_reasoning(clean) == (clean, 0)
    dirty = {
        "a": [reasoning_item(), "ok", {"inner": thinking_block()}],
        "b": f"prefix {BLOB}",
        "c": {"encrypted_content": BLOB, "keep": 1},
        "d": json.dumps(redacted_block()),
    }
    stripped, removed = strip_encrypted_reasoning(dirty)
    assert removed == 5
    assert find_encrypted_reasoning(stripped) == []
    assert stripped["a"][1] == "ok"
    rendered = json.dumps(stripped)
    for secret in (BLOB, SIGNATURE, REDACTED):
        assert secret not in rendered


def test_record_json_is_the_canonical_compact_form():
    assert record_json({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'


def test_json_in_a_string_nested_past_the_decoders_recursion_is_refused_not_skipped():
    """A thinking block inside 1,200 levels of JSON text: json.loads gives up (RecursionError),
    which used to be swallowed, leaving the value unscanned and the record accepted."""
    text = "[" * 1200 + json.dumps(thinking_block("x")) + "]" * 1200
    assert "decode_depth_exceeded" in {f.kind for f in find_encrypted_reasoning(text)}
    assert not gate_check([with_message(1, text)]).verdicts[0].accepted


def test_base64_wrapped_in_lines_is_decoded_as_one_encoding():
    """base64.encodebytes (and the base64 CLI) wrap at 76 characters; decoded line by line the
    marker is split and was missed (found by a helper's second walkthrough)."""
    wrapped = base64.encodebytes(
        json.dumps({"content": [thinking_block("I should check")]}).encode()
    ).decode()
    assert wrapped.count("\n") > 1
    assert "anthropic_thinking_signature" in {f.kind for f in find_encrypted_reasoning(wrapped)}
    assert not gate_check([with_message(1, wrapped)]).verdicts[0].accepted
    clean = base64.encodebytes(("a plain note about the release, nothing hidden. " * 5).encode()).decode()
    assert find_encrypted_reasoning(clean) == []
    assert gate_check([with_message(2, clean)]).verdicts[0].accepted
