"""What the encrypted-reasoning detector looks for and reads strings as: its limits, the marker
texts (Fernet tokens, ``encrypted_content``/``signature``/``data`` next to a blob, thinking
events), the reasoning-carrier objects (:func:`structural`), the :class:`Finding` it reports and
the :class:`RejectReason` the gate gives; every string normalised (:func:`normalised`) and every
key compared in canonical form (:func:`canonical`). See :mod:`routing.transcripts.gate`."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

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
MIN_CARRIER = 22
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


def text_markers(norm: str) -> list[str]:
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


def json_lines(norm: str) -> tuple[list[Any], bool]:
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


#: Canonical forms (:func:`canonical`) of the keys that can make an object a reasoning carrier.
_CARRIER_KEYS = frozenset(("data", "signature", "encryptedcontent", "thinking"))


def structural(node: Mapping[str, Any]) -> str | None:
    """Marker kind when a JSON object is itself a reasoning carrier (keys and string ``type``
    values compared in canonical form, :func:`canonical`: ``encryptedContent``,
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
        by_key.setdefault(canonical(str(key)), []).append(value)
    types = {canonical(t) for t in by_key.get("type", ()) if isinstance(t, str)}
    if "redactedthinking" in types and "data" in by_key:
        return "anthropic_redacted_thinking"
    if "signature" in by_key and (types & {"thinking", "signaturedelta"} or "thinking" in by_key):
        return "anthropic_thinking_signature"
    if types & {"thinking", "thinkingdelta"} and "thinking" in by_key:
        return "anthropic_thinking_block"
    if any(by_key.get("encryptedcontent", ())):
        return "openai_encrypted_content"
    return None


_ASCII_CONTROLS_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TAG_CHARACTERS_RE = re.compile("[\U000e0020-\U000e007e]")


def normalised(text: str) -> str:
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


def canonical(name: str) -> str:
    """The form in which object keys and ``type`` values are matched: casefolded, normalised as
    every string is (:func:`normalised`: NFKD, zero-width/format and other non-ASCII characters
    dropped), lower-case, and with every character but ASCII letters and digits removed --
    separators (``_``, ``-``, spaces, dots, ...) included. So ``encrypted_content``,
    ``encryptedContent``, ``encrypted-content``, ``encrypted\\u200b_content`` and full-width
    ``ｅｎｃｒｙｐｔｅｄ_ｃｏｎｔｅｎｔ`` are all ``encryptedcontent``; ``" thinking"`` is ``thinking``.
    Linear in the name's length; short names (the usual keys and types) are cached."""
    return _canonical_short(name) if len(name) <= 64 else _canonical_form(name)


def _canonical_form(name: str) -> str:
    return _NOT_ALPHANUMERIC_RE.sub("", normalised(name.casefold()).lower())


_canonical_short = functools.lru_cache(maxsize=8192)(_canonical_form)
