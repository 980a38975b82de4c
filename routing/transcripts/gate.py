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
  (:func:`_canonical`: normalised as strings are, see below, casefolded, and with every
  separator and other non-alphanumeric character removed), so ``Encrypted_Content``,
  ``encryptedContent``, ``encrypted-content``, ``encrypted\\u200b_content``, full-width
  letters, ``"type": "Redacted_Thinking"``, ``"redacted_thinking "``, ``"redacted-thinking"``,
  ``"redactedThinking"`` and ``" thinking"`` all count; the two-word marker texts
  (``encrypted_content``, ``redacted_thinking``, ``signature_delta``) match with any case and
  up to two separators between their words. Keys are matched exactly in that form, so
  ``thinking_budget`` or ``thinking_enabled`` (``thinkingbudget``) are not ``thinking``.

  Every string is read normalised (:func:`_normalised`: NFKD, tag characters as the ASCII they
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
"""

from __future__ import annotations

import base64
import binascii
import bz2
import functools
import html
import json
import lzma
import math
import quopri
import re
import unicodedata
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from muse_experiments.experiments.validation import unit_id_problem

#: How many nested decodings (JSON-in-string, base64-in-string) the detector follows.
MAX_DECODE_DEPTH = 6
#: Largest record (bytes of its compact JSON) the gate accepts; bigger ones are rejected unscanned.
MAX_RECORD_BYTES = 8 * 1024 * 1024
#: Shortest run of base64 characters worth decoding (shorter runs cannot hide a blob + marker).
MIN_BASE64_RUN = 24
#: Most decodings (JSON, base64, hex, percent) followed while scanning one value; past this the
#: value is reported as ``decode_budget_exceeded`` (refused, never let through unscanned).
MAX_DECODES_PER_VALUE = 1024
#: Most characters of decoded strings scanned for one value: this many plus
#: :data:`DECODED_CHARS_PER_CHAR` per character of the value's own strings. Decoded layers of
#: ordinary text are small (a URL's query, an attachment); text built so that every layer
#: decodes to nearly all of it again (random printable characters: percent, character
#: references and escapes everywhere) cost one scan per layer, 35 scans of 1 MB. Past the budget
#: the value is ``decode_budget_exceeded``, as past :data:`MAX_DECODES_PER_VALUE`.
MAX_DECODED_CHARS = 1_000_000
DECODED_CHARS_PER_CHAR = 4

FERNET_RE = re.compile(r"gAAAAA[A-Za-z0-9_\-+/=]{16,}")
#: Shortest (normalised) string that can carry a marker or a blob: a Fernet prefix and 16 characters.
_MIN_CARRIER = 22
BASE64_RUN_RE = re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{MIN_BASE64_RUN},}}={{0,2}}")
# A whole string of base64 lines (RFC 2045 wraps at 76 characters; any line length accepted).
WRAPPED_BASE64_RE = re.compile(r"\s*(?:[A-Za-z0-9+/_-]+={0,2}[ \t]*\r?\n\s*)+[A-Za-z0-9+/_-]*={0,2}\s*")
# Hex of text: 16+ byte pairs (shorter runs cannot hold a marker + blob); either case.
HEX_RUN_RE = re.compile(r"(?:[0-9A-Fa-f]{2}){16,}")
PERCENT_RE = re.compile(r"%[0-9A-Fa-f]{2}")
FERNET_TOKEN = "<fernet token>"
BLOB = r"[A-Za-z0-9+/_=\-]{16,}"
# Marker text in strings that are not (or not entirely) parseable JSON: a key, then a blob. Each
# is one linear search; the Anthropic ones count when the string names thinking anywhere, before
# or after, at any distance (JSON key order, Python/SDK reprs such as
# ``ThinkingBlock(signature='…', thinking='…')`` or ``RedactedThinkingBlock(data='…', …)``).
_KEY_THEN_BLOB = r"[\"'\\]*\s*[:=]\s*[\"'\\]*" + BLOB
# Between the words of a two-word marker: up to two separators (encrypted_content,
# encryptedContent, encrypted-content, encrypted.content, "redacted thinking").
_SEP = r"[\s_.\-]{0,2}"
ENCRYPTED_CONTENT_TEXT_RE = re.compile(rf"encrypted{_SEP}content" + _KEY_THEN_BLOB, re.I)
SIGNATURE_TEXT_RE = re.compile(r"signature" + _KEY_THEN_BLOB, re.I)
DATA_TEXT_RE = re.compile(r"data" + _KEY_THEN_BLOB, re.I)
REDACTED_THINKING_TEXT_RE = re.compile(rf"redacted{_SEP}thinking", re.I)
SIGNATURE_DELTA_TEXT_RE = re.compile(rf"signature{_SEP}delta", re.I)
# Lines of server-sent events (``data: {...}``) or JSON lines: parsed together as one JSON list.
JSON_LINE_RE = re.compile(r"^[ \t]*+(?:data:[ \t]*+)?([{\[][^\n]*)", re.M)


def _text_markers(norm: str) -> list[str]:
    """Kinds of reasoning marker text in one (normalised) string: ``encrypted_content: <blob>``;
    ``signature: <blob>`` in a string that mentions ``thinking`` or ``signature_delta``;
    ``data: <blob>`` in one that mentions ``redacted_thinking`` (or ``RedactedThinking``). The
    two-word markers match with any case and up to two separators between their words
    (``encryptedContent``, ``encrypted-content``, ``redacted thinking``)."""
    low = norm.lower()
    kinds = []
    if "encrypted" in low and ENCRYPTED_CONTENT_TEXT_RE.search(norm):
        kinds.append("openai_encrypted_content")
    if (
        "signature" in low
        and ("thinking" in low or SIGNATURE_DELTA_TEXT_RE.search(norm))
        and SIGNATURE_TEXT_RE.search(norm)
    ):
        kinds.append("anthropic_thinking_signature")
    if "redacted" in low and REDACTED_THINKING_TEXT_RE.search(norm) and DATA_TEXT_RE.search(norm):
        kinds.append("anthropic_redacted_thinking")
    return kinds


def _json_lines(norm: str) -> tuple[list[Any], bool]:
    """The JSON values of a multi-line text's ``data: {...}`` (server-sent events) and ``{...}``
    lines (JSON lines), and whether a line was nested past the decoder's recursion."""
    values: list[Any] = []
    too_deep = False
    if "\n" in norm:
        for match in JSON_LINE_RE.finditer(norm):
            try:
                values.append(json.loads(match.group(1).rstrip()))
            except ValueError:
                continue
            except RecursionError:
                too_deep = True
    return values, too_deep


class RejectReason(StrEnum):
    """Why the gate refused a record (the metric labels)."""

    INVALID_RECORD = "invalid_record"
    RECORD_TOO_LARGE = "record_too_large"
    CONTAINS_ENCRYPTED_REASONING = "contains_encrypted_reasoning"
    CONTAINS_OPAQUE_BLOB = "contains_opaque_blob"
    EXTERNAL_PROVIDER = "external_provider"
    OPTED_OUT = "opted_out"
    DUPLICATE_IN_BATCH = "duplicate_in_batch"
    SHADOW_CALL = "shadow_call"


@dataclass(frozen=True)
class Finding:
    """One piece of encrypted reasoning: ``path`` (JSON-pointer-like, with ``<json>``/``<base64>``
    steps for decodings) and ``kind`` (``openai_encrypted_content``, ``fernet_blob``,
    ``fernet_token``, ``anthropic_thinking_signature``, ``anthropic_thinking_block``,
    ``anthropic_redacted_thinking``; or
    ``decode_depth_exceeded`` / ``decode_budget_exceeded`` for a value encoded in more layers,
    or more decodings, than the detector follows; ``inflate_limit_exceeded`` for compressed
    bytes inflating past :data:`MAX_INFLATED_BYTES`; or, for the training gate only,
    ``opaque_blob``: random-looking encoded binary that cannot be scanned, :func:`opaque_blob`).
    Never holds the content itself."""

    path: str
    kind: str


#: Canonical forms (:func:`_canonical`) of the keys that can make an object a reasoning carrier.
_CARRIER_KEYS = frozenset(("data", "signature", "encryptedcontent", "thinking"))


def _structural(node: Mapping[str, Any]) -> str | None:
    """Marker kind when a JSON object is itself a reasoning carrier (keys and string ``type``
    values compared in canonical form, :func:`_canonical`: ``encryptedContent``,
    ``encrypted-content``, ``"type": "redacted_thinking "`` or ``"Redacted\\u200bThinking"``
    all count): a Responses item with ``encrypted_content``; an Anthropic ``redacted_thinking``
    block; a ``thinking`` block or ``signature_delta`` stream delta with a ``signature``
    (``anthropic_thinking_signature``); a ``thinking`` block or ``thinking_delta`` without one
    (``anthropic_thinking_block``: a recorded stream's ``content_block_start``, whose signature
    follows in a later delta). Several keys with one canonical form (``type`` and ``Type``)
    all count. Linear in the length of the keys (and of the ``type`` values)."""
    joined = _canonical_form(" ".join(map(str, node)))  # the keys' canonical forms, concatenated
    if not any(key in joined for key in _CARRIER_KEYS):
        return None  # fast path: no carrier key in any form
    by_key: dict[str, list[Any]] = {}
    for key, value in node.items():
        by_key.setdefault(_canonical(str(key)), []).append(value)
    types = {_canonical(t) for t in by_key.get("type", ()) if isinstance(t, str)}
    if "redactedthinking" in types and "data" in by_key:
        return "anthropic_redacted_thinking"
    if "signature" in by_key and (types & {"thinking", "signaturedelta"} or "thinking" in by_key):
        return "anthropic_thinking_signature"
    if types & {"thinking", "thinkingdelta"} and "thinking" in by_key:
        return "anthropic_thinking_block"
    if any(by_key.get("encryptedcontent", ())):
        return "openai_encrypted_content"
    return None


# --------------------------------------------------------------------------------------------
# Normalisation: what every string is read as
# --------------------------------------------------------------------------------------------

_ASCII_CONTROLS_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TAG_CHARACTERS_RE = re.compile("[\U000e0020-\U000e007e]")


def _normalised(text: str) -> str:
    """``text`` as the detector reads it: NFKD (full-width and other compatibility forms become
    ASCII), Unicode tag characters (U+E0020..U+E007E, invisible) read as the ASCII they spell,
    then every other character outside ASCII dropped -- zero-width and other format characters
    (category Cf), combining marks, symbols, letters of other scripts -- and ASCII control
    characters but tab, line feed and carriage return. So no invisible or foreign character
    splits a blob, and every marker is ASCII."""
    if not text.isascii():
        if _TAG_CHARACTERS_RE.search(text):
            text = _TAG_CHARACTERS_RE.sub(lambda m: chr(ord(m.group()) - 0xE0000), text)
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _ASCII_CONTROLS_RE.sub("", text) if _ASCII_CONTROLS_RE.search(text) else text


_NOT_ALPHANUMERIC_RE = re.compile(r"[^0-9a-z]+")


def _canonical(name: str) -> str:
    """The form in which object keys and ``type`` values are matched: casefolded, normalised as
    every string is (:func:`_normalised`: NFKD, zero-width/format and other non-ASCII characters
    dropped), lower-case, and with every character but ASCII letters and digits removed --
    separators (``_``, ``-``, spaces, dots, ...) included. So ``encrypted_content``,
    ``encryptedContent``, ``encrypted-content``, ``encrypted\\u200b_content`` and full-width
    ``ｅｎｃｒｙｐｔｅｄ_ｃｏｎｔｅｎｔ`` are all ``encryptedcontent``; ``" thinking"`` is ``thinking``.
    Linear in the name's length; short names (the usual keys and types) are cached."""
    return _canonical_short(name) if len(name) <= 64 else _canonical_form(name)


def _canonical_form(name: str) -> str:
    return _NOT_ALPHANUMERIC_RE.sub("", _normalised(name.casefold()).lower())


_canonical_short = functools.lru_cache(maxsize=8192)(_canonical_form)


# --------------------------------------------------------------------------------------------
# Bytes behind an encoding
# --------------------------------------------------------------------------------------------

#: Most bytes inflated from one compressed run of bytes (gzip, zlib, bzip2, xz, lzma; all its
#: concatenated streams together); a larger one stays unread (and opaque).
MAX_INFLATED_BYTES = 1024 * 1024


_LINE_BREAKS = str.maketrans("", "", "\r\n\t")
_ASCII_UNPRINTABLE_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _text_or_none(decoded: str) -> str | None:
    """``decoded`` when more than 90% of its characters are printable (or line breaks, tabs)."""
    if not decoded:
        return None
    if decoded.isascii():
        unprintable = len(_ASCII_UNPRINTABLE_RE.findall(decoded))
    elif decoded.translate(_LINE_BREAKS).isprintable():
        unprintable = 0
    else:
        unprintable = sum(1 for ch in decoded if not (ch.isprintable() or ch in "\r\n\t"))
    return decoded if unprintable < 0.1 * len(decoded) else None


def _bytes_text(raw: bytes, *, inflate: bool = True) -> str | None:
    """The text behind decoded bytes, or None when they are binary: UTF-8; UTF-16 or UTF-32
    (a byte-order mark, or NUL bytes in the high half of most code units); gzip-, zlib-,
    bzip2-, xz- or lzma-compressed text (at most :data:`MAX_INFLATED_BYTES` inflated:
    :func:`_inflated`)."""
    try:
        text = _text_or_none(raw.decode("utf-8"))
    except UnicodeDecodeError:
        text = None
    if text is not None:
        return text
    if len(raw) >= 4 and (raw.count(0) * 3 >= len(raw) or raw[:2] in (b"\xff\xfe", b"\xfe\xff")):
        for codec in _wide_codecs(raw):
            try:
                text = _text_or_none(raw.decode(codec))
            except UnicodeDecodeError:
                continue
            if text is not None:
                return text
    if inflate and (inflated := _inflated(raw)) is not None:
        return INFLATE_LIMIT if inflated is _TOO_LARGE else _bytes_text(inflated, inflate=False)
    return None


def _wide_codecs(raw: bytes) -> tuple[str, ...]:
    """UTF-16/32 codecs worth trying on ``raw``, by its byte-order mark or where its NULs are."""
    if raw[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return ("utf-32",)
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return ("utf-16",)
    if raw[1::4].count(0) + raw[2::4].count(0) + raw[3::4].count(0) > len(raw) // 2:
        return ("utf-32-le", "utf-16-le")
    if raw[0::4].count(0) + raw[1::4].count(0) + raw[2::4].count(0) > len(raw) // 2:
        return ("utf-32-be", "utf-16-be")
    return ("utf-16-le",) if raw[1::2].count(0) >= raw[0::2].count(0) else ("utf-16-be",)


#: Most compressed streams (gzip members, bz2 or xz streams) read one after another from one
#: run of bytes; the inflated output of all of them together is bounded by MAX_INFLATED_BYTES.
MAX_COMPRESSED_STREAMS = 64


def _decompressor(raw: bytes) -> Any:
    """A fresh decompressor for the compressed stream ``raw`` starts with (gzip, zlib, bzip2, xz,
    legacy ``.lzma``: by their headers), or None."""
    if raw[:2] == b"\x1f\x8b" or (len(raw) > 1 and raw[0] & 0x0F == 8 and int.from_bytes(raw[:2]) % 31 == 0):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # either header
    if raw[:3] == b"BZh" and raw[3:4] in b"123456789" and raw[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return bz2.BZ2Decompressor()
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMADecompressor(lzma.FORMAT_XZ)
    if len(raw) >= 13 and raw[0] < 225:
        # legacy .lzma (lzma.FORMAT_ALONE): a properties byte, then a dictionary size of 2**n or
        # 3 * 2**n bytes (as encoders write it; one random 4-byte value in ~10**8 is one)
        size = int.from_bytes(raw[1:5], "little")
        odd = size // 3 if size % 3 == 0 else size
        if 4096 <= size <= 1 << 30 and odd & (odd - 1) == 0:
            return lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    return None


def _inflate_stream(stream: Any, raw: bytes, room: int) -> Any:
    """At most ``room`` bytes inflated from the start of ``raw``, whether the stream ended, and
    the bytes after its end; None when it is corrupt, :data:`_TOO_LARGE` when it inflates to
    more than ``room`` bytes."""
    try:
        out = stream.decompress(raw, room)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return None
    if isinstance(stream, bz2.BZ2Decompressor | lzma.LZMADecompressor):
        more = not stream.eof and not stream.needs_input  # output held back past ``room``
    else:
        more = bool(stream.unconsumed_tail) or (not stream.eof and len(out) >= room)
    if more or len(out) > room:
        return _TOO_LARGE
    return out, stream.eof, stream.unused_data if stream.eof else b""


#: What :func:`_bytes_text` reads compressed bytes that inflate past :data:`MAX_INFLATED_BYTES` as
#: (compared by identity): scanning it is an ``inflate_limit_exceeded`` finding -- refused, never
#: let through unscanned (a secret behind 64 MB of zeros compresses to a few hundred bytes).
INFLATE_LIMIT = "<inflate limit exceeded>"
#: :func:`_inflated`'s answer for such bytes (a unique object, compared by identity).
_TOO_LARGE: Any = object()


def _inflated(raw: bytes) -> Any:
    """The inflated bytes of a gzip, zlib, bzip2, xz or legacy ``.lzma`` stream (possibly
    truncated), or None when not compressed or corrupt, or :data:`_TOO_LARGE` (by identity)
    when inflating to more than :data:`MAX_INFLATED_BYTES` (whatever the format, every
    decompressor is called with that output limit, so a decompression bomb costs at most that
    much memory; it is refused, not read).
    Compressed streams following it (concatenated gzip members, bzip2 or xz streams; at most
    :data:`MAX_COMPRESSED_STREAMS`, within the same output limit in all) are inflated after
    it, as ``gunzip`` does; other bytes after it are kept as they are (read with the text)."""
    out = b""
    rest = raw
    for count in range(MAX_COMPRESSED_STREAMS + 1):
        stream = _decompressor(rest) if count < MAX_COMPRESSED_STREAMS else None
        inflated = None if stream is None else _inflate_stream(stream, rest, MAX_INFLATED_BYTES - len(out))
        if inflated is _TOO_LARGE:
            return _TOO_LARGE
        if inflated is None:
            if count == 0:
                return None
            if len(out) + len(rest) > MAX_INFLATED_BYTES:
                return _TOO_LARGE
            return out + rest  # trailing bytes that are no further stream: read as they are
        chunk, ended, rest = inflated
        out += chunk
        rest = rest.lstrip(b"\0") if ended else rest
        if not ended or not rest:  # truncated; or the end (xz pads streams with NULs)
            return out
        if len(out) >= MAX_INFLATED_BYTES:
            return _TOO_LARGE
    return None


def _is_fernet_token(raw: bytes, *, shifted: bool = False) -> bool:
    """Whether bytes have a Fernet token's shape (spec above): version 0x80, 8-byte timestamp,
    16-byte IV, whole 16-byte ciphertext blocks, 32-byte HMAC; ``shifted`` adds the zero high
    timestamp bytes."""
    if len(raw) < 73 or raw[0] != 0x80 or (len(raw) - 57) % 16:
        return False
    return not shifted or raw[1:4] == b"\0\0\0"


def _decoded_base64(run: str) -> str | None:
    """The text behind a base64 run, or None if it is not base64 of text.

    Both alphabets (standard and URL-safe) are accepted, and the run may start up to 3
    characters early (base64 glued to a preceding word). The bytes may be UTF-8, UTF-16/32 or
    compressed text (:func:`_bytes_text`). A raw Fernet token (version byte 0x80, >= 73 bytes,
    16-byte blocks) is reported as :data:`FERNET_TOKEN`. At a shifted start its timestamp must
    also be below 2**40 s (its three high bytes zero, as every real token's are): one random
    blob in 256 decodes to a 0x80 byte at a shift, and a clean image must not be rejected for
    that; the extra rule leaves one in 2**40.
    """
    for offset in range(4):
        found = _decode_aligned(run[offset:], shifted=offset > 0)
        if found is not None:
            return found
    return None


def _decode_aligned(run: str, *, shifted: bool) -> str | None:
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if _is_fernet_token(raw, shifted=shifted):
        return FERNET_TOKEN
    return _bytes_text(raw)


def _decoded_hex(run: str) -> str | None:
    """The text behind a hex run (even length, either case; :func:`_bytes_text`), or None; a
    raw Fernet token is reported as :data:`FERNET_TOKEN`."""
    raw = bytes.fromhex(run)
    if _is_fernet_token(raw):
        return FERNET_TOKEN
    return _bytes_text(raw)


_BASE32_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
#: How many characters of a base32/base85 run are decoded first: when they are not text, the
#: rest is not decoded (those decoders are pure Python, and binary is judged as such anyway).
_PREFIX_CHARS = 1600


def _decoded_base32(run: str) -> str | None:
    """The text behind a base32 run (RFC 4648, either case, padding optional, up to 7
    characters glued in front), or None."""
    body = run.rstrip("=").upper()
    for offset in range(8):
        text = _base32_text(body[offset : offset + _PREFIX_CHARS])
        if text is not None:
            return text if len(body) - offset <= _PREFIX_CHARS else _base32_text(body[offset:])
    return None


def _base32_text(body: str) -> str | None:
    body = body[: len(body) - (1 if len(body) % 8 in (1, 3, 6) else 0)]
    if len(body) < 8:
        return None
    try:
        return _bytes_text(base64.b32decode(body + "=" * (-len(body) % 8)))
    except (binascii.Error, ValueError):
        return None


_Z85_TO_BASE85 = str.maketrans(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~",
)
#: The base85 alphabets: Adobe ascii85 (``!``..``u``; ``base64.a85encode``), RFC 1924 /
#: git / ``base64.b85encode``, and ZeroMQ Z85; with each, its decoder and the shares of
#: (upper-case, lower-case, digit, other) characters a random string in it shows.
_BASE85_ALPHABETS = (
    (re.compile(r"(?<![!-u])[!-u]{100,}"), base64.a85decode, (26 / 85, 21 / 85, 10 / 85, 28 / 85)),
    (
        re.compile(r"(?<![0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~])[0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{100,}"),
        base64.b85decode,
        (26 / 85, 26 / 85, 10 / 85, 23 / 85),
    ),
    (
        re.compile(r"(?<![0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#])[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{100,}"),
        lambda text: base64.b85decode(text.translate(_Z85_TO_BASE85)),
        (26 / 85, 26 / 85, 10 / 85, 23 / 85),
    ),
)


def _decoded_base85(run: str, decode) -> str | None:
    """The text behind a base85 run (by ``decode``; up to 4 characters glued in front), or None."""
    for offset in range(5):
        body = run[offset:]
        for text in (body[:_PREFIX_CHARS], body) if len(body) > _PREFIX_CHARS else (body,):
            try:
                found = _bytes_text(decode(text[: len(text) - len(text) % 5]))
            except (ValueError, binascii.Error):
                found = None
            if found is None:
                break
        else:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Text layers: escapes, quoted-printable, rot13, reversal
# --------------------------------------------------------------------------------------------

_BYTE_ESCAPES_RE = re.compile(r"(?:\\x[0-9A-Fa-f]{2}|\\[0-3][0-7]{2})+")
_CHAR_ESCAPES_RE = re.compile(r"\\u[0-9A-Fa-f]{4}|%u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}")
_ESCAPE_MARKS = ("\\x", "\\u", "\\U", "%u", "\\0", "\\1", "\\2", "\\3")
_QUOTED_PRINTABLE_RE = re.compile(r"=[0-9A-F]{2}")
_SOFT_LINE_BREAK_RE = re.compile(r"=\r?\n")
_ENTITY_RE = re.compile(r"&#(?:[xX][0-9A-Fa-f]+|[0-9]+);?")
_ROT13 = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
)
_MARKER_WORDS = ("encrypted", "signature", "thinking", "redacted")
#: Seen in a text, these say it is rot13'd, reversed, or both: the marker words (lower-case) and
#: the Fernet prefix (case kept) transformed so.
_TRANSFORMS = (
    ("rot13", lambda t: t.translate(_ROT13)),
    ("reversed", lambda t: t[::-1]),
    ("rot13-reversed", lambda t: t[::-1].translate(_ROT13)),
)
_TRANSFORM_SIGNS = {
    name: (transform("gAAAAA"), tuple(transform(word) for word in _MARKER_WORDS))
    for name, transform in _TRANSFORMS
}


def _unescaped(text: str) -> str:
    """``text`` with ``\\xHH``/octal byte escapes (a run of them as UTF-8 text, or as hex when
    they are binary), ``\\uHHHH``, ``%uHHHH`` and ``\\UHHHHHHHH`` escapes decoded."""

    def byte_run(match: re.Match[str]) -> str:
        codes = re.findall(r"\\x([0-9A-Fa-f]{2})|\\([0-7]{3})", match.group())
        raw = bytes(int(h, 16) if h else int(o, 8) for h, o in codes)
        return _bytes_text(raw, inflate=False) or raw.hex()

    text = _BYTE_ESCAPES_RE.sub(byte_run, text)
    return _CHAR_ESCAPES_RE.sub(lambda m: chr(int(m.group()[2:], 16)), text)


def _soft_line_breaks(norm: str) -> bool:
    """Whether a text has quoted-printable soft line breaks: ``=`` ending a line of at least 60
    characters (the encoding wraps at 76)."""
    for match in _SOFT_LINE_BREAK_RE.finditer(norm):
        if match.start() - (norm.rfind("\n", 0, match.start()) + 1) >= 60:
            return True
    return False


def _text_layers(norm: str, path: str) -> list[tuple[str, str]]:
    """``(layer, text)`` for each textual encoding ``norm`` shows: backslash/``%u`` escapes,
    HTML character references, quoted-printable (soft line breaks after long lines, or at least
    5% of the text in ``=XX`` escapes: not ``x=10`` in code), and rot13/reversal (only when the
    transformed marker words or Fernet prefix appear, and not twice in a row)."""
    layers = []
    if any(mark in norm for mark in _ESCAPE_MARKS) and (
        _BYTE_ESCAPES_RE.search(norm) or _CHAR_ESCAPES_RE.search(norm)
    ):
        layers.append(("escapes", _unescaped(norm)))
    if "&#" in norm and _ENTITY_RE.search(norm):
        layers.append(("entities", html.unescape(norm)))
    if "=" in norm:
        escapes = len(_QUOTED_PRINTABLE_RE.findall(norm))
        dense = escapes >= 4 and escapes * 3 * 20 >= len(norm)  # at least 5% of the text escaped
        if dense or (escapes and _soft_line_breaks(norm)):
            raw = quopri.decodestring(norm.encode())
            text = _bytes_text(raw)
            if text is not None or escapes * 3 * 2 >= len(norm):  # binary: as hex when mostly escapes
                layers.append(("quoted-printable", text if text is not None else raw.hex()))
    low = norm.lower()
    last = path.rsplit("/", 1)[-1]
    for name, transform in _TRANSFORMS:
        prefix, words = _TRANSFORM_SIGNS[name]
        if last != f"<{name}>" and (prefix in norm or any(word in low for word in words)):
            layers.append((name, transform(norm)))
    return layers


# --------------------------------------------------------------------------------------------
# Runs: base64-alphabet characters, also where a text splits them
# --------------------------------------------------------------------------------------------

_RUN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-="
#: Fewest characters a chunked or joined run must have to be looked at.
_MIN_JOINED = 48
# Tokens split by whitespace: equal-length chunks (base64 wrapped at 64 or 76, hex dumps). This
# and the next pattern are possessive and cannot start inside a token: linear on any input.
_SPACED_RE = re.compile(r"(?<![A-Za-z0-9+/_=\-])[A-Za-z0-9+/_\-]++={0,2}(?:\s++[A-Za-z0-9+/_\-]++={0,2}){2,}")
# Tokens split by one repeated punctuation mark, whitespace allowed after it: 67:41:41,
# 0x67, 0x41, ..., %67%41 (not + / _ - =, which are base64 characters).
_PUNCTUATED_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:0[xX])?[A-Za-z0-9]++(?P<sep>[^A-Za-z0-9\s+/=_\-])\s*+"
    r"(?:0[xX])?[A-Za-z0-9]++(?:(?P=sep)\s*+(?:0[xX])?[A-Za-z0-9]++){2,}+"
)
_PUNCTUATED_TOKEN_RE = re.compile(r"(?:0[xX])?([A-Za-z0-9]+)")
# Identifiers that end a join: UUIDs, hex digests (abbreviated git SHA, MD5, SHA-1, SHA-256,
# SHA-512) and labelled hashes (sha512-..., sha256=...).
_IDENTIFIER_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{7,12}|[0-9a-fA-F]{32}|[0-9a-fA-F]{40}|[0-9a-fA-F]{64}|[0-9a-fA-F]{128}"
    r"|(?:sha(?:1|224|256|384|512)|md5)[-=:][A-Za-z0-9+/_=\-]+",
    re.I,
)


_SAME_LENGTH_RE = re.compile(r"(.)\1+", re.S)


def _equal_chunks(tokens: list[str]) -> list[tuple[str, bool, bool]]:
    """Stretches of at least two tokens of one length, plus a shorter last one, joined (with
    whether the stretch is all of ``tokens``, and whether it is a list of identifiers:
    :func:`_identifier_list`), at least :data:`_MIN_JOINED` characters long.
    (Found by a regex over the tokens' lengths written as characters: no Python loop per token.)"""
    lengths = "".join(map(chr, map(len, tokens)))
    out = []
    for match in _SAME_LENGTH_RE.finditer(lengths):
        i, j = match.span()
        size = len(tokens[i])
        end = j + 1 if j < len(tokens) and len(tokens[j]) < size else j
        if end - i >= 3 and size * (j - i) >= _MIN_JOINED:
            listed = size >= _MIN_IDENTIFIER and _identifier_list(tokens[i:end])
            out.append(("".join(tokens[i:end]), i == 0 and end == len(tokens), listed))
    return out


def _chunked_runs(norm: str) -> list[tuple[str, tuple[int, int] | None, bool]]:
    """Runs a text splits into chunks, joined: equal chunks split by whitespace (wrapped base64,
    spaced hex) and chunks split by one repeated punctuation mark (``67:41:…``, ``0x67, 0x41``),
    a longer first chunk cut to the others' length (a word glued to the first). Each with the
    span of the text it is all of (whitespace-split chunks only), else None, and whether its
    chunks cannot be one opaque blob: a list of identifiers (:func:`_identifier_list`), or
    punctuated tokens of unequal lengths (``0x0, 0x1, …, 0x10``: a table of numbers, while a
    dump has one width, ``0x67, 0x41``)."""
    runs: list[tuple[str, tuple[int, int] | None, bool]] = []
    for match in _SPACED_RE.finditer(norm):
        if match.end() - match.start() >= _MIN_JOINED:
            runs += [
                (joined, match.span() if whole else None, not_blob)
                for joined, whole, not_blob in _equal_chunks(match.group().split())
            ]
    for match in _PUNCTUATED_RE.finditer(norm):
        if match.end() - match.start() >= _MIN_JOINED:
            tokens = _PUNCTUATED_TOKEN_RE.findall(match.group())
            size = sorted(map(len, tokens))[len(tokens) // 2]
            tokens[0] = tokens[0][-size:]
            unequal = len(tokens[-1]) > size or any(len(t) != size for t in tokens[1:-1])
            runs.append(
                ("".join(tokens), None, unequal or (size >= _MIN_IDENTIFIER and _identifier_list(tokens)))
            )
    return runs


# Where a list is read joined: its strings, and these keys of its objects (message ``content``,
# message part ``text``; keys in canonical form, :func:`_canonical`: ``Content``, ``text_`` too).
_JOINED_KEYS = frozenset(("content", "text"))


def _list_runs(items: list[Any] | tuple[Any, ...]) -> list[tuple[str, list[tuple[int, Any]]]]:
    """Runs that continue from one item of a list into the next, joined, with the ``(index,
    key)`` of each item they take from (key None for a string item): in the list's strings, and
    in the ``content``/``text`` strings of its objects (a blob split over messages or parts).
    An item that is a whole run carries the run on; an empty one is skipped; an identifier
    (UUID, hex digest, labelled hash) or ``=`` padding ends it."""
    columns: dict[Any, list[tuple[int, Any, str]]] = {}
    for i, item in enumerate(items):
        if isinstance(item, str):
            columns.setdefault(None, []).append((i, None, item))
        elif isinstance(item, Mapping):
            for key, value in item.items():
                if isinstance(value, str) and (canonical := _canonical(str(key))) in _JOINED_KEYS:
                    columns.setdefault(canonical, []).append((i, key, value))
    return [run for column in columns.values() if len(column) > 1 for run in _column_runs(column)]


def _column_runs(column: list[tuple[int, Any, str]]) -> list[tuple[str, list[tuple[int, Any]]]]:
    """:func:`_list_runs` for one column: the ``(index, key, string)`` items of a list under one
    (canonical) key."""
    out: list[tuple[str, list[tuple[int, Any]]]] = []
    parts: list[str] = []
    members: list[tuple[int, Any]] = []
    for i, key, value in [*column, (-1, None, "\0")]:  # a last item that ends every run
        text = _normalised(value).strip() if i >= 0 else "."
        if not text:
            continue
        lead = len(text) - len(text.lstrip(_RUN_CHARS))
        trail = len(text) - len(text.rstrip(_RUN_CHARS))
        identifier = bool(lead or trail) and _IDENTIFIER_RE.fullmatch(text) is not None
        carried = bool(parts) and not identifier
        if carried and lead:
            parts.append(text[:lead])
            members.append((i, key))
        if carried and lead == len(text) and not text.endswith("="):
            continue
        if len(members) > 1 and sum(map(len, parts)) >= MIN_BASE64_RUN:
            out.append(("".join(parts), members))
        parts, members = [], []
        if trail and not text.endswith("=") and not identifier:
            parts.append(text[len(text) - trail :])
            members.append((i, key))
    return out


def _scan_run(
    run: str,
    path: str,
    depth: int,
    findings: list[Finding],
    children: list[tuple[Any, str, int]],
    *,
    joined: bool = False,
    opaque: bool = False,
) -> bool:
    """Decode one run of base64-alphabet characters: base64 (either alphabet), hex runs inside
    it, base32. Text found is queued in ``children``; a Fernet token is a finding, and so is a
    Fernet blob in a ``joined`` run (one the string-level search did not see whole). With
    ``opaque``, an encoding whose bytes are not text and look random (:func:`opaque_blob`) is an
    ``opaque_blob`` finding. Returns whether something readable (text or a token) was behind
    the whole run."""
    readable = False
    if joined and "gAAAAA" in run and FERNET_RE.search(run):
        findings.append(Finding(path, "fernet_blob"))
    if len(run) >= MIN_BASE64_RUN:
        decoded = _decoded_base64(run)
        if decoded is FERNET_TOKEN:
            findings.append(Finding(f"{path}/<base64>", "fernet_token"))
        elif decoded is not None:
            children.append((decoded, f"{path}/<base64>", depth + 1))
        readable = decoded is not None
        body = run.rstrip("=")
        base32 = not readable and set(body.upper()) <= _BASE32_CHARS
        if base32:
            decoded = _decoded_base32(body)
            if decoded is not None:
                children.append((decoded, f"{path}/<base32>", depth + 1))
                readable = True
        if opaque and not readable and len(body) >= _MIN_OPAQUE_CHARS["base64"]:
            for encoding in ("base64", "base32") if base32 else ("base64",):
                if _opaque_run(body, encoding):
                    findings.append(Finding(f"{path}/<{encoding}>", "opaque_blob"))
                    break
    # Hex digits are base64 characters, so every hex run lies inside a base64 run.
    for hex_match in HEX_RUN_RE.finditer(run) if len(run) >= 32 else ():
        hex_run = hex_match.group(0)
        decoded = _decoded_hex(hex_run)
        if decoded is None and len(hex_run) > 32:  # glued to a word ending in a hex letter
            decoded = _decoded_hex(hex_run[1:-1])
        if decoded is FERNET_TOKEN:
            findings.append(Finding(f"{path}/<hex>", "fernet_token"))
        elif decoded is not None:
            children.append((decoded, f"{path}/<hex>", depth + 1))
        elif opaque and len(hex_run) >= _MIN_OPAQUE_CHARS["hex"] and _opaque_run(hex_run, "hex"):
            findings.append(Finding(f"{path}/<hex>", "opaque_blob"))
        readable = readable or (decoded is not None and len(hex_run) >= len(run.rstrip("=")) - 1)
    return readable


#: Shortest base85 run decoded (80 bytes): shorter ones are too often code to be worth it.
MIN_BASE85_RUN = 100


def _scan_base85(
    norm: str,
    path: str,
    depth: int,
    findings: list[Finding],
    children: list[tuple[Any, str, int]],
    *,
    opaque: bool = False,
) -> bool:
    """Decode the runs of base85 alphabets (ascii85, RFC 1924, Z85) of at least
    :data:`MIN_BASE85_RUN` characters that hold a character outside base64, have an entropy
    within 1 bit of a random string's and at least 12% punctuation (base85 of text has ~20%;
    in 65 MB of Python, JavaScript and docs 137 runs in 3,020 qualify, none is text): text found
    is queued in ``children``; with ``opaque``, a run of random-looking bytes
    (:func:`opaque_blob`) is an ``opaque_blob`` finding. Returns whether a run holding ``%``
    was read (text or a blob): then the text's percent layer is base85 mangled, not a URL."""
    percent = False
    tokens = [token for token in norm.split() if len(token) >= MIN_BASE85_RUN]
    for pattern, decode, _ in _BASE85_ALPHABETS if tokens else ():
        for match in (m for token in tokens for m in pattern.finditer(token)):
            run = match.group()
            if len(run) < MIN_BASE85_RUN or not run.strip(_RUN_CHARS):
                continue
            classes = Counter(run.translate(_CHAR_CLASSES))
            if (
                len(run) - classes["U"] - classes["L"] - classes["D"] >= 0.12 * len(run)
                and _entropy(run) >= _random_entropy(min(len(run), 4096), 85) - 1.0
            ):
                if (decoded := _decoded_base85(run, decode)) is not None:
                    children.append((decoded, f"{path}/<base85>", depth + 1))
                    percent = percent or "%" in run
                elif opaque and _opaque_base85(run, decode):
                    findings.append(Finding(f"{path}/<base85>", "opaque_blob"))
                    percent = percent or "%" in run
    return percent


# --------------------------------------------------------------------------------------------
# Character statistics
# --------------------------------------------------------------------------------------------

_CHAR_CLASSES = str.maketrans(
    {
        **dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "U"),
        **dict.fromkeys("abcdefghijklmnopqrstuvwxyz", "L"),
        **dict.fromkeys("0123456789", "D"),
    }
)


@functools.lru_cache(maxsize=4096)
def _random_entropy(n: int, k: int) -> float:
    """Expected Shannon entropy (bits per character, of the character counts) of ``n``
    characters drawn uniformly from ``k``: exact (a sum over the binomial distribution of one
    character's count) up to 4,096 characters, then the Miller-Madow approximation."""
    if n > 4096:
        return math.log2(k) - (k - 1) / (2 * n * math.log(2))
    p = 1.0 / k
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    total = 0.0
    for count in range(1, n + 1):
        log_pmf = (
            log_n - math.lgamma(count + 1) - math.lgamma(n - count + 1) + count * log_p + (n - count) * log_q
        )
        if log_pmf < -40 and count > n * p:
            break
        total += math.exp(log_pmf) * (count / n) * math.log2(count / n)
    return -k * total


def _entropy(text: str) -> float:
    """Shannon entropy of ``text``'s character counts, bits per character."""
    n = len(text)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(text).values()) / n


# --------------------------------------------------------------------------------------------
# Opaque blobs: encoded binary that is not text and looks random (the training gate only)
# --------------------------------------------------------------------------------------------

#: Fewest bytes an encoded run must decode to before it can be an opaque blob (calibrated in
#: ``bench/gate_calibration.py``: the shortest Anthropic signatures seen are longer; SHA-512
#: digests, 64 bytes, and HS256/ES256 JWT signatures, 32/64 bytes, are shorter).
MIN_OPAQUE_BYTES = 96
#: Most decoded bytes of one run whose statistics are computed (a prefix: bounded work per run).
OPAQUE_SAMPLE_BYTES = 4096
#: How far (bits per byte) below a random string's expected byte entropy, at the same length
#: (:func:`_random_entropy`, which is biased low for short samples), an opaque blob may be.
#: Lenient: it only excludes plainly structured binary (the characters' test below is the
#: sharp one); a 96-byte blob repeating a 32-byte digest, the fake upstream's canary, is ~1.3
#: bits below.
OPAQUE_BYTE_MARGIN = 2.0
#: How many standard deviations of a random string's character entropy the encoded run may be
#: below its expected value (excludes runs of words, digits, DNA, URLs, ...). The standard
#: deviation is ``sqrt((k - 1) / 2) / (n ln 2)`` bits for ``n`` characters of a ``k``-letter
#: alphabet (checked by simulation: 0.067 for 128 base64 characters, 0.021 for 192 hex ones).
OPAQUE_CHAR_SIGMAS = 6.0
#: ... but at least this many bits per character (a long blob with a short structured header,
#: a PNG's or a protobuf's, sits a little below; runs of words, digits or DNA sit 0.5+ below).
OPAQUE_CHAR_MIN_MARGIN = 0.15
#: The alphabet size of each encoding and the run length (characters) of MIN_OPAQUE_BYTES.
_ALPHABET_SIZES = {"base64": 64, "hex": 16, "base32": 32, "base85": 85}
_MIN_OPAQUE_CHARS = {
    "base64": -(-MIN_OPAQUE_BYTES * 4 // 3),
    "hex": 2 * MIN_OPAQUE_BYTES,
    "base32": -(-MIN_OPAQUE_BYTES * 8 // 5),
    "base85": -(-MIN_OPAQUE_BYTES * 5 // 4),
}
#: Shortest token that counts as an identifier in a list (:func:`_identifier_list`).
_MIN_IDENTIFIER = 24


def _byte_entropy(raw: bytes) -> float:
    """Shannon entropy of ``raw``'s byte counts, bits per byte."""
    n = len(raw)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(raw).values()) / n


def opaque_blob(raw: bytes, chars: str, alphabet: int) -> bool:
    """Whether decoded bytes are an opaque blob: binary that cannot be scanned and looks random.

    ``raw``: the decoded bytes (at most :data:`OPAQUE_SAMPLE_BYTES` are looked at); ``chars``:
    the encoded characters they came from (the same prefix; padding and line breaks removed);
    ``alphabet``: the encoding's alphabet size (64 base64, 16 hex, 32 base32, 85 base85).
    True when all of: at least :data:`MIN_OPAQUE_BYTES` bytes; not text (:func:`_bytes_text`:
    UTF-8, UTF-16/32, compressed text -- those the detector decodes and scans instead); the
    byte entropy (bits per byte) at least :func:`_random_entropy` ``(n, 256)`` minus
    :data:`OPAQUE_BYTE_MARGIN` (6.24 expected at 96 bytes, 7.94 at 4,096); and the characters'
    entropy at least ``_random_entropy(len(chars), alphabet)`` minus
    :data:`OPAQUE_CHAR_SIGMAS` standard deviations (0.40 bits for 128 base64 characters, 0.12
    for 192 hex ones), or :data:`OPAQUE_CHAR_MIN_MARGIN` if more; and the entropy of the
    differences between successive bytes as high as the bytes' own must be (not a counter).
    Linear in the sample's length."""
    raw, chars = raw[:OPAQUE_SAMPLE_BYTES], chars[: OPAQUE_SAMPLE_BYTES * 2]
    n = len(chars)
    if len(raw) < MIN_OPAQUE_BYTES or not n:
        return False
    if _byte_entropy(raw) < _random_entropy(len(raw), 256) - OPAQUE_BYTE_MARGIN:
        return False
    sigma = math.sqrt((alphabet - 1) / 2) / (n * math.log(2))
    margin = max(OPAQUE_CHAR_SIGMAS * sigma, OPAQUE_CHAR_MIN_MARGIN)
    if _entropy(chars) < _random_entropy(n, alphabet) - margin:
        return False
    if _bytes_text(raw) is not None:
        return False
    # Counts cannot see order: a table of counting numbers (0x10, 0x11, ...) has every byte value
    # once. Random bytes differ from one to the next by random amounts too.
    deltas = bytes((b - a) & 0xFF for a, b in zip(raw, raw[1:], strict=False))
    return _byte_entropy(deltas) >= _random_entropy(len(deltas), 256) - OPAQUE_BYTE_MARGIN


def _opaque_run(body: str, encoding: str) -> bool:
    """Whether a run (base64 of either alphabet, hex or base32; padding stripped) decodes to an
    opaque blob (:func:`opaque_blob`); only a prefix of :data:`OPAQUE_SAMPLE_BYTES` is decoded."""
    if encoding == "base64":
        chars = body[: OPAQUE_SAMPLE_BYTES // 3 * 4].replace("-", "+").replace("_", "/")
        chars = chars[: len(chars) - 1] if len(chars) % 4 == 1 else chars
        try:
            raw = base64.b64decode(chars + "=" * (-len(chars) % 4), validate=True)
        except (binascii.Error, ValueError):
            return False
    elif encoding == "hex":
        chars = body[: 2 * OPAQUE_SAMPLE_BYTES]
        chars = chars[: len(chars) - len(chars) % 2]
        raw = bytes.fromhex(chars)
    else:  # base32 (pure-Python decoder: a shorter prefix)
        chars = body[:_PREFIX_CHARS].upper()
        chars = chars[: len(chars) - 1] if len(chars) % 8 in (1, 3, 6) else chars
        try:
            raw = base64.b32decode(chars + "=" * (-len(chars) % 8))
        except (binascii.Error, ValueError):
            return False
    return opaque_blob(raw, chars, _ALPHABET_SIZES[encoding])


def _opaque_base85(run: str, decode) -> bool:
    """Whether a base85 run (decoded by ``decode``, up to 4 characters glued in front; a prefix of
    :data:`_PREFIX_CHARS` characters) is an opaque blob (:func:`opaque_blob`)."""
    for offset in range(5):
        chars = run[offset : offset + _PREFIX_CHARS]
        chars = chars[: len(chars) - len(chars) % 5]
        try:
            raw = decode(chars)
        except (ValueError, binascii.Error):
            continue
        return opaque_blob(raw, chars, _ALPHABET_SIZES["base85"])
    return False


#: Shortest line of a wrapped blob (:func:`_wrapped_lines`); encoders wrap at 60, 64 or 76.
_MIN_WRAP = 60


def _wrapped_lines(norm: str, runs: list[re.Match[str]]) -> list[str]:
    """Base64 wrapped in lines inside other text, joined: consecutive runs (``runs``: the
    :data:`BASE64_RUN_RE` matches of ``norm``) each alone on its line, separated by one line
    break, all but the last of one length of at least :data:`_MIN_WRAP` characters, unpadded,
    and the last no longer, at least :data:`MIN_OPAQUE_BYTES` decoded bytes in all (two lines
    included, which :func:`_chunked_runs` needs three of), not a list of identifiers
    (:func:`_identifier_list`). Linear in the number of runs."""
    out: list[str] = []
    group: list[re.Match[str]] = []
    for match in [*runs, None]:
        if match is not None and group:
            prev = group[-1]
            gap = norm[prev.end() : match.start()]
            width = len(group[0].group())
            if (
                gap.strip(" \t") in ("\n", "\r\n")
                and len(prev.group()) == width
                and not prev.group().endswith("=")
                and len(match.group()) <= width
                and norm[match.end() : match.end() + 1] in ("", "\n", "\r", " ")
            ):
                group.append(match)
                continue
        tokens = [m.group() for m in group]
        if (
            len(tokens) > 1
            and sum(map(len, tokens)) >= _MIN_OPAQUE_CHARS["base64"]
            and not _identifier_list(tokens)
        ):
            out.append("".join(tokens))
        group = [match] if match is not None and len(match.group()) >= _MIN_WRAP else []
    return out


def _identifier_list(tokens: list[str]) -> bool:
    """Whether every token is an identifier of at least :data:`_MIN_IDENTIFIER` characters (a
    UUID, a hex digest, a labelled hash: :data:`_IDENTIFIER_RE`): a list of SHA-256 digests or
    UUIDs, one a line, is random-looking but is no blob."""
    return all(len(t) >= _MIN_IDENTIFIER and _IDENTIFIER_RE.fullmatch(t) for t in tokens)


def _string_children(
    text: str, path: str, depth: int, opaque: bool = False, quiet: list[str] | None = None
) -> tuple[list[Finding], list[tuple[Any, str, int]]]:
    """Findings in one string and the decoded values to scan next (JSON, base64, ...); with
    ``opaque``, also its opaque blobs (:func:`opaque_blob`), and the paths of decoded values
    not to look for opaque blobs in appended to ``quiet`` (a percent layer over base85: garbage)."""
    findings: list[Finding] = []
    children: list[tuple[Any, str, int]] = []
    if text is INFLATE_LIMIT:  # compressed bytes too large to inflate: cannot be scanned
        return [Finding(path, "inflate_limit_exceeded")], children
    norm = _normalised(text)
    if len(norm) < _MIN_CARRIER:
        return findings, children
    if "gAAAAA" in norm and FERNET_RE.search(norm):
        findings.append(Finding(path, "fernet_blob"))
    findings += [Finding(path, kind) for kind in _text_markers(norm)]
    stripped = norm.strip()
    parsed = False
    if stripped[:1] in ("{", "[", '"') and len(stripped) > 1:
        try:
            children.append((json.loads(stripped), f"{path}/<json>", depth + 1))
            parsed = True
        except ValueError:
            pass
        except RecursionError:  # JSON nested past the decoder's recursion: cannot be scanned
            findings.append(Finding(path, "decode_depth_exceeded"))
            parsed = True
    if not parsed:
        lines, too_deep = _json_lines(norm)
        if lines:
            children.append((lines, f"{path}/<json-lines>", depth + 1))
        if too_deep:
            findings.append(Finding(path, "decode_depth_exceeded"))
    children += [(decoded, f"{path}/<{layer}>", depth + 1) for layer, decoded in _text_layers(norm, path)]
    # Runs split into chunks are read joined; when such a run is one readable encoding, its
    # chunks are not decoded one by one as well.
    covered: list[tuple[int, int]] = []
    for joined, span, not_blob in _chunked_runs(norm) if len(norm) >= _MIN_JOINED else ():
        scanned = _scan_run(
            joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque and not not_blob
        )
        if scanned and span:
            covered.append(span)
    runs = list(BASE64_RUN_RE.finditer(norm))
    if not covered and len(runs) > 1 and WRAPPED_BASE64_RE.fullmatch(norm):
        # base64 wrapped in lines of any length (base64.encodebytes, the base64 CLI)
        tokens = [m.group() for m in runs]
        not_blob = _identifier_list(tokens)
        joined = "".join(tokens)
        if _scan_run(
            joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque and not not_blob
        ):
            covered.append((0, len(norm)))
    for match in runs:
        if not any(start <= match.start() and match.end() <= end for start, end in covered):
            before = len(findings)
            _scan_run(match.group(), path, depth, findings, children, opaque=opaque)
            if opaque and any(f.kind == "opaque_blob" for f in findings[before:]):
                opaque = False  # one opaque blob refuses the record: the others need no statistics
    if opaque and len(runs) > 1:
        for joined in _wrapped_lines(norm, runs):
            if _opaque_run(joined.rstrip("="), "base64"):
                findings.append(Finding(f"{path}/<joined>/<base64>", "opaque_blob"))
    base85_percent = len(norm) >= MIN_BASE85_RUN and _scan_base85(
        norm, path, depth, findings, children, opaque=opaque
    )
    if "%" in norm and PERCENT_RE.search(norm):
        children.append((urllib.parse.unquote(norm), f"{path}/<percent>", depth + 1))
        if base85_percent and quiet is not None:
            quiet.append(f"{path}/<percent>")
    if children and depth >= MAX_DECODE_DEPTH:
        # one more layer than the detector follows: refused, never let through unscanned
        return [*findings, Finding(path, "decode_depth_exceeded")], []
    return findings, children


#: Fewest integers a list must hold to be read as bytes (:func:`_list_children`).
MIN_BYTE_ARRAY = 16


def _byte_array(items: list[Any] | tuple[Any, ...]) -> bytes | None:
    """``items`` as bytes when it is a list of at least :data:`MIN_BYTE_ARRAY` integers (not
    booleans) from 0 to 255, else None."""
    if len(items) < MIN_BYTE_ARRAY or not all(type(i) is int and 0 <= i <= 255 for i in items):
        return None
    return bytes(items)


def _list_children(
    items: list[Any] | tuple[Any, ...], path: str, depth: int, opaque: bool = False
) -> tuple[list[Finding], list[tuple[Any, str, int]]]:
    """Findings in the runs that continue across a list's items (:func:`_list_runs`), and the
    decoded values to scan next. A list of at least :data:`MIN_BYTE_ARRAY` integers from 0 to 255
    is bytes (a byte array serialised to JSON: Node's ``Buffer.toJSON()``, a Python
    ``list(bytes)``): its text is scanned next, and with ``opaque`` random-looking bytes are an
    ``opaque_blob`` (:func:`opaque_blob`, judged on their hex)."""
    findings: list[Finding] = []
    children: list[tuple[Any, str, int]] = []
    raw = _byte_array(items)
    if raw is not None:
        text = _bytes_text(raw)
        if text is not None:
            children.append((text, f"{path}/<bytes>", depth + 1))
        elif opaque and opaque_blob(raw, raw[:OPAQUE_SAMPLE_BYTES].hex(), 16):
            findings.append(Finding(f"{path}/<bytes>", "opaque_blob"))
    for joined, _ in _list_runs(items):
        _scan_run(joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque)
    if children and depth >= MAX_DECODE_DEPTH:
        return [*findings, Finding(path, "decode_depth_exceeded")], []
    return findings, children


def find_encrypted_reasoning(value: Any, *, path: str = "", opaque_blobs: bool = False) -> list[Finding]:
    """Every place in a JSON value (dict/list/str/number/bool/None) that carries encrypted reasoning.

    Returns ``[]`` for a clean value. Iterative; follows JSON-, base64-, hex- and
    percent-encoded strings up to :data:`MAX_DECODE_DEPTH` levels and at most
    :data:`MAX_DECODES_PER_VALUE` decodings, of at most :data:`MAX_DECODED_CHARS` characters plus
    :data:`DECODED_CHARS_PER_CHAR` per character of the value's own strings, in all (beyond that
    one ``decode_budget_exceeded`` finding: refused, not guessed). Object keys are scanned like strings.

    ``opaque_blobs`` (the training gate's setting; off for :func:`strip_encrypted_reasoning`,
    which keeps user content as is): also report every run of an encoding whose bytes are not
    text but random-looking binary of at least :data:`MIN_OPAQUE_BYTES` bytes, at any decoding
    depth, as an ``opaque_blob`` finding (:func:`opaque_blob`). Costs no decode budget.
    """
    findings: list[Finding] = []
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    decodes = 0
    own_chars = decoded_chars = 0  # characters of the value's strings, of decoded strings
    quiet: list[str] = []  # decoded values (and below) not to look for opaque blobs in
    while stack:
        if decodes > MAX_DECODES_PER_VALUE or decoded_chars > (
            MAX_DECODED_CHARS + DECODED_CHARS_PER_CHAR * own_chars
        ):
            findings.append(Finding(path, "decode_budget_exceeded"))
            break
        node, where, depth = stack.pop()
        if isinstance(node, str):
            if depth:
                decoded_chars += len(node)
            else:
                own_chars += len(node)
        opaque = opaque_blobs and not (quiet and where.startswith(tuple(quiet)))
        if isinstance(node, Mapping):
            kind = _structural(node)
            if kind:
                findings.append(Finding(where, kind))
            for key, child in node.items():
                key_text = str(key)
                if len(key_text) >= MIN_BASE64_RUN or "gAAAAA" in key_text or not key_text.isascii():
                    found, decoded = _string_children(key_text, f"{where}/<key>", depth, opaque, quiet)
                    findings += found
                    stack += decoded
                    decodes += len(decoded)
                stack.append((child, f"{where}/{key_text}", depth))
        elif isinstance(node, list | tuple):
            stack.extend((child, f"{where}/{i}", depth) for i, child in enumerate(node))
            if len(node) > 1:
                found, decoded = _list_children(node, where, depth, opaque)
                findings += found
                stack += decoded
                decodes += len(decoded)
        elif isinstance(node, str):
            found, decoded = _string_children(node, where, depth, opaque, quiet)
            findings += found
            stack += decoded
            decodes += len(decoded)
    return list(dict.fromkeys(findings))


REMOVED = "[removed: encrypted reasoning]"


def strip_encrypted_reasoning(value: Any) -> tuple[Any, int]:
    """A copy of ``value`` with every encrypted-reasoning carrier removed, and how many were removed.

    Reasoning objects (``thinking``/``redacted_thinking`` blocks, objects with
    ``encrypted_content``) are replaced by ``{"type": "removed"}``; strings carrying a blob
    (directly or encoded) are replaced by :data:`REMOVED`. A clean value is returned unchanged
    (same object) with 0. Values nested deeper than 200 levels are replaced wholesale when dirty.
    """
    if not find_encrypted_reasoning(value):
        return value, 0
    removed = 0

    def clean(node: Any, depth: int) -> Any:
        nonlocal removed
        if depth > 200:
            removed += 1
            return REMOVED
        if isinstance(node, Mapping):
            if _structural(node):
                removed += 1
                return {"type": "removed"}
            out = {}
            for key, child in node.items():
                if find_encrypted_reasoning(str(key)):
                    removed += 1
                    continue
                out[key] = clean(child, depth + 1)
            return out
        if isinstance(node, list | tuple):
            raw = _byte_array(node)
            if raw is not None and (text := _bytes_text(raw)) is not None and find_encrypted_reasoning(text):
                removed += 1
                return REMOVED  # a byte array whose text carries reasoning
            split = {
                member
                for joined, members in _list_runs(node)
                if find_encrypted_reasoning(joined)
                for member in members
            }
            out = []
            for i, child in enumerate(node):
                if (i, None) in split:
                    removed += 1
                    out.append(REMOVED)
                    continue
                keys = {key for index, key in split if index == i}
                if keys:  # an object whose content/text holds part of a split blob
                    removed += len(keys)
                    child = {k: REMOVED if k in keys else v for k, v in child.items()}
                out.append(clean(child, depth + 1))
            return out
        if isinstance(node, str) and find_encrypted_reasoning(node):
            removed += 1
            return REMOVED
        return node

    return clean(value, 0), removed


@dataclass(frozen=True)
class RecordVerdict:
    """The gate's answer for record number ``index`` (0-based position in the batch).

    ``record_id`` is the record's id when it has a valid one; ``reasons`` empty means accepted;
    ``detail`` is a short human explanation that never contains record content.
    """

    index: int
    record_id: str | None
    reasons: tuple[str, ...] = ()
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class GateReport:
    """Result of :func:`gate_check`: one verdict per record in batch order, and the accepted
    records (the very objects passed in, unchanged) with their compact JSON text."""

    verdicts: tuple[RecordVerdict, ...]
    accepted: tuple[tuple[RecordVerdict, Mapping[str, Any], str], ...] = field(default=())

    @property
    def rejected(self) -> tuple[RecordVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.accepted)

    @property
    def counts(self) -> dict[str, int]:
        """``{"received", "accepted", "rejected", <reason>: n, ...}``; a record with several
        reasons counts once under each."""
        reasons = Counter(r for v in self.verdicts for r in v.reasons)
        return {
            "received": len(self.verdicts),
            "accepted": len(self.accepted),
            "rejected": len(self.rejected),
            **dict(sorted(reasons.items())),
        }


def record_json(record: Mapping[str, Any]) -> str:
    """The canonical stored form of a record: compact JSON, keys in the order received, UTF-8."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_record(
    index: int,
    record: Any,
    *,
    opted_out_users: Container[str] = frozenset(),
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> tuple[RecordVerdict, str | None]:
    """Verdict for one record, and its canonical JSON when it could be serialised (the rules of
    :func:`gate_check` but the in-batch duplicate check)."""
    if not isinstance(record, Mapping):
        return RecordVerdict(
            index,
            None,
            (RejectReason.INVALID_RECORD,),
            f"record must be a JSON object, not {type(record).__name__}",
        ), None
    rid = record.get("record_id")
    record_id = rid if isinstance(rid, str) and 0 < len(rid) <= 200 else None
    problems = []
    if record_id is None:
        problems.append("record_id must be a non-empty string of at most 200 characters")
    for name, required in (("user_id", True), ("session_id", False)):
        unit = record.get(name)
        if unit is None and not required:
            continue
        if not isinstance(unit, str):
            problems.append(f"{name} must be a string")
        elif problem := unit_id_problem(unit):
            problems.append(f"{name}: {problem}")
    if not isinstance(record.get("provenance"), str):
        problems.append("provenance must be a string ('native' or an external provider)")
    try:
        text = record_json(record)
    except (TypeError, ValueError, RecursionError):
        reasons = [RejectReason.INVALID_RECORD]
        if find_encrypted_reasoning(record):  # iterative: works where serialisation gave up
            reasons.append(RejectReason.CONTAINS_ENCRYPTED_REASONING)
        return RecordVerdict(index, record_id, tuple(reasons), "record is not serialisable JSON"), None
    if len(text.encode()) > max_record_bytes:
        return RecordVerdict(
            index, record_id, (RejectReason.RECORD_TOO_LARGE,), f"record exceeds {max_record_bytes} bytes"
        ), None
    reasons: list[str] = []
    details: list[str] = []
    if problems:
        reasons.append(RejectReason.INVALID_RECORD)
        details += problems
    try:
        findings = find_encrypted_reasoning(record, opaque_blobs=True)
    except RecursionError:  # json.loads of a pathological string; refuse rather than guess
        findings = [Finding("", "undecodable")]
    opaque = [f for f in findings if f.kind == "opaque_blob"]
    findings = [f for f in findings if f.kind != "opaque_blob"]
    if findings:
        reasons.append(RejectReason.CONTAINS_ENCRYPTED_REASONING)
        kinds = sorted({f.kind for f in findings})
        details.append(f"encrypted reasoning at {len(findings)} place(s): {', '.join(kinds)}")
    if opaque and not findings:  # the blob of a marked reasoning carrier is opaque too: one reason
        reasons.append(RejectReason.CONTAINS_OPAQUE_BLOB)
        details.append(f"opaque encoded blob (unscannable binary) at {len(opaque)} place(s)")
    provenance = record.get("provenance")
    provider_kind = record.get("provider_kind", "native")
    if isinstance(provenance, str) and (provenance != "native" or provider_kind != "native"):
        reasons.append(RejectReason.EXTERNAL_PROVIDER)
        details.append("served by an external provider")
    if record.get("shadow") is not None and record.get("shadow") is not False:
        # a shadow test's answer (routing.shadow) was never served to anyone: never trained on
        reasons.append(RejectReason.SHADOW_CALL)
        details.append("a shadow test's answer, never served")
    user = record.get("user_id")
    if isinstance(user, str) and user in opted_out_users:
        reasons.append(RejectReason.OPTED_OUT)
        details.append("user opted out of training")
    return RecordVerdict(index, record_id, tuple(reasons), "; ".join(details)), text


def gate_check(
    records: Iterable[Any],
    *,
    opted_out_users: Container[str] = frozenset(),
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> GateReport:
    """Validate a batch of training records.

    ``opted_out_users``: user ids whose records are refused (the caller looks them up).
    A record is rejected when it is not a valid record object (:attr:`RejectReason.INVALID_RECORD`),
    is larger than ``max_record_bytes`` (compact JSON, bytes), carries encrypted reasoning
    anywhere, contains an opaque blob (:attr:`RejectReason.CONTAINS_OPAQUE_BLOB`: a run of
    base64, base64url, wrapped base64, hex, base32 or base85 that decodes to at least
    :data:`MIN_OPAQUE_BYTES` bytes of random-looking binary, not text: :func:`opaque_blob`; such
    as a bare Anthropic signature with no marker near it -- an opaque blob cannot be scanned,
    so it is refused, as a value too deeply encoded already is; reported only when the record
    has no encrypted-reasoning finding, whose blobs are opaque too), came from an external provider
    (``provenance != "native"`` or a non-native ``provider_kind``), belongs to an opted-out
    user, is a shadow test's answer (``shadow`` present and not ``false``:
    :attr:`RejectReason.SHADOW_CALL`), or repeats a ``record_id`` seen earlier in the same batch. Never raises for bad
    records; each gets its own verdict.
    """
    verdicts: list[RecordVerdict] = []
    accepted: list[tuple[RecordVerdict, Mapping[str, Any], str]] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        verdict, text = check_record(
            index, record, opted_out_users=opted_out_users, max_record_bytes=max_record_bytes
        )
        if verdict.record_id is not None:
            if verdict.record_id in seen:
                verdict = RecordVerdict(
                    index,
                    verdict.record_id,
                    (*verdict.reasons, RejectReason.DUPLICATE_IN_BATCH),
                    "; ".join(filter(None, [verdict.detail, "record_id repeated in this batch"])),
                )
            seen.add(verdict.record_id)
        verdicts.append(verdict)
        if verdict.accepted and text is not None:
            accepted.append((verdict, record, text))
    return GateReport(verdicts=tuple(verdicts), accepted=tuple(accepted))
