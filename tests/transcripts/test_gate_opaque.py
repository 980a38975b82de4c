"""The training gate's opaque-blob rule: bare encoded binary with no marker word is refused.

Real values throughout (random bytes, real encodings); calibration figures live in
``bench/gate_calibration.py``."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import string
import uuid
import zlib

import pytest

from routing.simulated import FakeUpstreams
from routing.transcripts.gate import (
    MIN_OPAQUE_BYTES,
    RejectReason,
    find_encrypted_reasoning,
    gate_check,
    strip_encrypted_reasoning,
)
from tests.transcripts.conftest import scoped_client
from tests.transcripts.test_gate import record, with_message

OPAQUE = RejectReason.CONTAINS_OPAQUE_BLOB


def signature_like(n: int = 300) -> bytes:
    """Bytes shaped like an Anthropic thinking signature: a protobuf field tag, then ciphertext."""
    return b"\x12" + os.urandom(n - 1)


ENCODINGS = {
    "base64": lambda b: base64.b64encode(b).decode(),
    "base64url": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
    "base64 wrapped at 76": lambda b: base64.encodebytes(b).decode(),
    "base64 wrapped at 64": lambda b: "\n".join(
        base64.b64encode(b).decode()[i : i + 64] for i in range(0, len(base64.b64encode(b)), 64)
    ),
    "hex": lambda b: b.hex(),
    "HEX": lambda b: b.hex().upper(),
    "base32": lambda b: base64.b32encode(b).decode(),
    "base85": lambda b: base64.b85encode(b).decode(),
    "ascii85": lambda b: base64.a85encode(b).decode(),
}


def verdict_for(content):
    return gate_check([with_message(1, content)]).verdicts[0]


def test_a_bare_signature_in_a_native_record_is_refused_and_never_echoed():
    blob = base64.b64encode(signature_like()).decode()
    verdict = verdict_for(blob)
    assert verdict.reasons == (OPAQUE,)
    assert "opaque" in verdict.detail
    assert blob not in verdict.detail and blob[:16] not in verdict.detail
    # no marker word anywhere: the marker-based detector alone lets it through
    assert find_encrypted_reasoning(with_message(1, blob)) == []


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("size", [MIN_OPAQUE_BYTES, 200, 1500])
def test_the_blob_in_every_encoding_is_refused(encoding, size):
    text = ENCODINGS[encoding](signature_like(size))
    assert verdict_for(text).reasons == (OPAQUE,)
    assert verdict_for(f"Here you go:\n{text.strip()}\n-- hope it helps.").reasons == (OPAQUE,)
    assert verdict_for(f"Here you go: {text.strip()} -- hope it helps.").reasons == (OPAQUE,)


def test_the_blob_in_a_message_part_a_user_message_and_json_text_is_refused():
    blob = base64.urlsafe_b64encode(signature_like(400)).decode()
    part = record(1)
    part["input"]["messages"].append({"role": "user", "content": [{"type": "text", "text": blob}]})
    as_json = with_message(2, json.dumps({"result": {"value": blob}}))
    output = record(3, output={"text": f"The token is {blob}", "tool_calls": [], "finish_reason": "stop"})
    report = gate_check([part, as_json, output])
    assert [v.reasons for v in report.verdicts] == [(OPAQUE,)] * 3
    assert report.counts["contains_opaque_blob"] == 3


def test_the_simulated_upstreams_canary_signatures_are_refused_bare():
    fake = FakeUpstreams()
    for prefix in ("EqQB", "EmwK"):  # thinking signature, redacted_thinking data
        for _ in range(20):
            assert verdict_for(fake.issue_blob(prefix, "claude-x")).reasons == (OPAQUE,)


def test_a_marked_reasoning_carrier_keeps_its_own_reason_only():
    blob = base64.b64encode(signature_like()).decode()
    verdict = verdict_for(json.dumps({"type": "thinking", "thinking": "", "signature": blob}))
    assert verdict.reasons == (RejectReason.CONTAINS_ENCRYPTED_REASONING,)


def test_blobs_below_the_threshold_pass():
    for n in (16, 32, 48, 64, MIN_OPAQUE_BYTES - 4):
        raw = os.urandom(n)
        for text in (base64.b64encode(raw).decode(), raw.hex()):
            assert verdict_for(text).accepted, (n, text)


def legit_corpus() -> dict[str, str]:
    rng = random.Random(7)
    uuids = [str(uuid.UUID(bytes=rng.randbytes(16), version=4)) for _ in range(30)]
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(10)]
    sha1s = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(10)]
    text = ("Avocado is the native model; the gate keeps provider reasoning out of training. " * 30).encode()
    jwt = ".".join(
        base64.urlsafe_b64encode(part).decode().rstrip("=")
        for part in (
            b'{"alg":"HS256","typ":"JWT"}',
            b'{"sub":"1234567890","iat":1516239022}',
            rng.randbytes(32),
        )
    )
    return {
        "prose": "The experiment routes a share of traffic to each variant and compares outcomes. " * 40,
        "python": "\n".join(
            f"def f{i}(x, *, y={i}):\n    return {{'k': x + y, 'v': [x] * {i}}}" for i in range(40)
        ),
        "minified js": ";".join(
            f"var a{i}=function(t,e){{return t&&e?t[e]:{rng.randrange(999)}}}" for i in range(60)
        ),
        "json": json.dumps([{"id": u, "score": rng.random()} for u in uuids]),
        "url": "https://example.com/search?q=naive+bayes&page=2&utm_source=mail&sid="
        + uuids[0]
        + "&x=%2Fpath%3Fa",
        "uuid": uuids[0],
        "uuids one a line": "\n".join(uuids),
        "uuids comma list": ", ".join(uuids),
        "sha-256": digests[0],
        "sha-256 digests one a line": "\n".join(digests),
        "sha-256 digests space list": " ".join(digests),
        "sha-1 digests and git log": "\n".join(f"commit {d}\n    fix #{i}" for i, d in enumerate(sha1s)),
        "sha-512": hashlib.sha512(b"x").hexdigest(),
        "jwt hs256": jwt,
        "base64 of text": base64.b64encode(text).decode(),
        "base64 of text wrapped": base64.encodebytes(text).decode(),
        "base64url of text": base64.urlsafe_b64encode(text).decode(),
        "hex of text": text.hex(),
        "base32 of text": base64.b32encode(text).decode(),
        "base85 of text": base64.b85encode(text).decode(),
        "base64 of compressed text": base64.b64encode(zlib.compress(text)).decode(),
        "markdown table": "| a | b |\n|---|---|\n"
        + "\n".join(f"| {i} | {rng.random():.6f} |" for i in range(40)),
        "long number": "".join(rng.choice(string.digits) for _ in range(500)),
        "dna": "".join(rng.choice("ACGT") for _ in range(3000)),
        "protein": "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(1200)),
    }


@pytest.mark.parametrize("name", sorted(legit_corpus()))
def test_the_legit_corpus_passes(name):
    verdict = verdict_for(legit_corpus()[name])
    assert verdict.accepted, (name, verdict.detail)


def test_a_whole_batch_of_legit_records_is_accepted_unchanged():
    records = [with_message(i, text) for i, text in enumerate(legit_corpus().values())]
    report = gate_check(records)
    assert report.counts["accepted"] == len(records)
    assert [r for _, r, _ in report.accepted] == records


def test_the_transcript_writers_strip_keeps_an_opaque_blob():
    value = {"content": base64.b64encode(signature_like()).decode()}
    assert strip_encrypted_reasoning(value) == (value, 0)


@pytest.mark.django_db
def test_ingest_refuses_an_opaque_blob_and_stores_nothing_of_it():
    from routing.transcripts.models import TrainingRecord

    blob = base64.b64encode(signature_like(500)).decode()
    body = (
        scoped_client("training:ingest")
        .post(
            "/api/v1/training/ingest",
            {"records": [record(1), with_message(2, blob), with_message(3, blob.encode().hex())]},
            format="json",
        )
        .json()
    )
    assert body["accepted"] == 1 and body["rejected"] == 2
    assert body["rejected_by_reason"] == {"contains_opaque_blob": 2}
    assert blob[:40] not in json.dumps(body)
    assert list(TrainingRecord.objects.values_list("record_id", flat=True)) == ["rec-1"]


def test_a_signature_serialised_as_a_byte_array_is_refused():
    """Node's ``Buffer.toJSON()`` and Python's ``list(bytes)`` carry bytes as a list of integers."""
    buffer = {"type": "Buffer", "data": list(signature_like())}
    verdict = gate_check([record(1, extra=buffer)]).verdicts[0]
    assert verdict.reasons == (OPAQUE,)
    assert gate_check([record(1, extra=list(signature_like()))]).verdicts[0].reasons == (OPAQUE,)


def test_encrypted_reasoning_serialised_as_a_byte_array_is_found_and_stripped():
    item = json.dumps({"type": "reasoning", "encrypted_content": "gAAAAAB" + "x" * 120}).encode()
    value = {"messages": [{"role": "tool", "content": "ok"}], "payload": list(item)}
    assert "openai_encrypted_content" in {f.kind for f in find_encrypted_reasoning(value)}
    cleaned, removed = strip_encrypted_reasoning(value)
    assert removed >= 1 and cleaned.get("payload") != list(item)
    assert cleaned["messages"] == value["messages"]


@pytest.mark.parametrize(
    "numbers",
    [
        list(range(120)),  # a counter
        [7] * 200,
        list(os.urandom(80)),  # random, but under the opaque threshold
        [1000 + i for i in range(200)],  # token ids
        list(b"plain text bytes of a tool's output, nothing hidden here at all"),
    ],
)
def test_ordinary_integer_lists_pass(numbers):
    assert gate_check([record(1, extra=numbers)]).verdicts[0].accepted
