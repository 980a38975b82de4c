"""The training-data ingestion gate and the encrypted-reasoning detector. Pure Python, no Django.

What the reinforcement-learning completion server accepts is decided here:

* :func:`find_encrypted_reasoning` -- every place in a JSON value that carries provider
  reasoning we must never train on or let out: OpenAI ``encrypted_content`` (Responses
  ``reasoning`` items, also inside recorded ``response.output_item.*`` stream events), Fernet-like
  ``gAAAAA…`` blobs, Anthropic ``thinking`` blocks with a ``signature``, ``redacted_thinking``
  blocks with ``data``, recorded Anthropic stream events (``signature_delta`` and
  ``thinking_delta`` deltas, a ``content_block_start`` opening a thinking block) -- however
  nested, as JSON objects, in JSON text, in server-sent-event or JSON-lines text, or as marker
  text (a JSON fragment, a Python/SDK repr such as ``ThinkingBlock(signature='…', …)``; the
  signature or ``data`` counts wherever it stands in a string that names thinking, before or
  after, at any distance). Object keys and ``type`` values are matched in canonical form
  (:func:`~routing.transcripts.gate.markers.canonical`: normalised as strings are, see below, casefolded, and with every
  separator and other non-alphanumeric character removed), so ``Encrypted_Content``,
  ``encryptedContent``, ``encrypted-content``, ``encrypted\\u200b_content``, full-width
  letters, ``"type": "Redacted_Thinking"``, ``"redacted_thinking "``, ``"redacted-thinking"``,
  ``"redactedThinking"`` and ``" thinking"`` all count; the two-word marker texts
  (``encrypted_content``, ``redacted_thinking``, ``signature_delta``) match with any case and
  up to two separators between their words. Keys are matched exactly in that form, so
  ``thinking_budget`` or ``thinking_enabled`` (``thinkingbudget``) are not ``thinking``.

  Every string is read normalised (:func:`~routing.transcripts.gate.markers.normalised`: NFKD, tag characters as the ASCII they
  spell, everything else outside ASCII and every control character dropped), so zero-width,
  format or combining characters inside a blob do not split it. The detector looks through
  these layers, recursively (up to :data:`MAX_DECODE_DEPTH` decodings deep, at most
  :data:`MAX_DECODES_PER_VALUE` decodings per scanned value; a value that would need more is
  itself a finding, ``decode_depth_exceeded`` or ``decode_budget_exceeded``: refused, never let
  through unscanned):

  - JSON text, server-sent events and JSON lines;
  - base64 (standard and URL-safe, glued to a word, wrapped in lines), base32, base85 (ascii85,
    RFC 1924, Z85; runs of at least :data:`MIN_BASE85_RUN` characters), hex (plain, or pairs
    split by a repeated mark: ``67:41:…``, ``67 41 …``, ``0x67, 0x41``), whose bytes may be
    UTF-8, UTF-16/32 or gzip/zlib/bzip2/xz/lzma-compressed text (at most
    :data:`MAX_INFLATED_BYTES` inflated, concatenated streams included; a decompression bomb
    inflating to more is itself a finding, ``inflate_limit_exceeded``: refused unread);
  - ``\\xHH``/octal, ``\\uHHHH``/``%uHHHH`` escapes, HTML character references, percent and
    quoted-printable encoding;
  - rot13 and reversed text (when transformed marker words or the Fernet prefix show);
  - runs split into equal chunks by whitespace or one repeated punctuation mark, and runs
    split across adjacent strings of a list, or the ``content``/``text`` of adjacent objects in
    a list (messages, message parts): read joined.

  The walk is iterative, so deep nesting cannot blow the stack, and every text search is
  linear in the text's length.
* :func:`strip_encrypted_reasoning` -- a copy of a value with every finding removed (used by
  the transcript writer, which must never store reasoning).
* :func:`gate_check` -- validate a batch of training records: per record, accepted or rejected
  with reasons (:class:`RejectReason`), and counts per reason.

  The gate (only the gate: not :func:`strip_encrypted_reasoning`, not the transcript writer,
  which keep user content as is) also refuses a record holding an *opaque blob*
  (``contains_opaque_blob``; finding kind ``opaque_blob``): a run of an encoding the detector
  reads (base64 standard or URL-safe, wrapped in lines, hex, base32, base85; at any decoding
  depth) whose bytes are not text -- not UTF-8/16/32, not compressed text, which are decoded
  and scanned instead -- are at least :data:`MIN_OPAQUE_BYTES` (96) long and look random (byte
  entropy near a random sample's of the same length, the encoded characters spread evenly
  over the encoding's alphabet: :func:`opaque_blob`). A bare Anthropic ``signature`` or
  ``redacted_thinking`` ``data`` with no marker word near it is one. An opaque blob cannot be
  scanned, so it is refused, as a value too deeply encoded already is. Deliberately refused as
  well: base64 images (a PNG icon is compressed binary), RS256/PS256 JWTs and signed URLs
  (their 256-byte signatures), long random API keys or secrets. Not blobs: hex digests (SHA-1,
  SHA-256, SHA-512: at most 64 bytes), UUIDs, HS256/ES256 JWTs, lists of digests or UUIDs one a
  line (equal chunks that are each an identifier are not joined into a blob), long numbers,
  DNA sequences, words and code (their characters are not spread over the alphabet), tables of
  numbers (``0x0, 0x1, …``: chunks of unequal widths). Limits: a list of equal-length unpadded
  base64 digests one a line (SHA-384) reads as one wrapped blob and is refused; so is any
  random string of 128+ base64 characters, a random test fixture included. A record whose
  encrypted reasoning is found by its markers is reported under that reason only.
  Calibration (100% detection at 96-4,096 bytes in all seven encodings, 0 false positives in
  the legit corpus and 1 file in 15,113 of a site-packages tree; timing):
  ``bench/gate_calibration.py``.

A training record (one line of the training export) is a JSON object with at least
``record_id`` (non-empty string, at most 200 characters), ``user_id`` (a unit id: the one
rule of :func:`muse_experiments.experiments.validation.unit_id_problem`, refused rather than normalised, so
``"alice "`` or ``"alice\u200b"`` cannot slip past ``alice``'s opt-out), optional
``session_id`` (same rule) and
``provenance`` (``"native"`` for Avocado; anything else is an external provider). The gate
never echoes record content in its verdicts (a rejected record may carry a secret).

Sources for the markers: https://platform.openai.com/docs/guides/reasoning#encrypted-reasoning-items ,
https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#thinking-redaction ,
Fernet token format https://github.com/fernet/spec/blob/master/Spec.md (version byte 0x80, so
its base64 starts ``gAAAAA`` while the timestamp's high bytes are zero).
"

Modules, each one step of the detector: :mod:`~routing.transcripts.gate.markers` (limits, marker
texts, canonical keys, findings), :mod:`~routing.transcripts.gate.decoding` (the bytes behind an
encoding), :mod:`~routing.transcripts.gate.layers` (escapes, quoted-printable, rot13, reversal),
:mod:`~routing.transcripts.gate.opaque` (character statistics and opaque blobs),
:mod:`~routing.transcripts.gate.runs` (runs of an encoding's alphabet, also split or joined),
:mod:`~routing.transcripts.gate.detector` (the walk: find and strip), and
:mod:`~routing.transcripts.gate.records` (the training-record gate).
"""

from .decoding import INFLATE_LIMIT, MAX_INFLATED_BYTES
from .detector import MIN_BYTE_ARRAY, REMOVED, find_encrypted_reasoning, strip_encrypted_reasoning
from .markers import (
    MAX_DECODE_DEPTH,
    MAX_DECODED_CHARS,
    MAX_DECODES_PER_VALUE,
    MAX_RECORD_BYTES,
    MIN_BASE64_RUN,
    Finding,
    RejectReason,
)
from .opaque import MIN_OPAQUE_BYTES, opaque_blob
from .records import GateReport, RecordVerdict, check_record, gate_check, record_json
from .runs import MIN_BASE85_RUN

__all__ = [
    "INFLATE_LIMIT",
    "MAX_DECODED_CHARS",
    "MAX_DECODES_PER_VALUE",
    "MAX_DECODE_DEPTH",
    "MAX_INFLATED_BYTES",
    "MAX_RECORD_BYTES",
    "MIN_BASE64_RUN",
    "MIN_BASE85_RUN",
    "MIN_BYTE_ARRAY",
    "MIN_OPAQUE_BYTES",
    "REMOVED",
    "Finding",
    "GateReport",
    "RecordVerdict",
    "RejectReason",
    "check_record",
    "find_encrypted_reasoning",
    "gate_check",
    "opaque_blob",
    "record_json",
    "strip_encrypted_reasoning",
]
