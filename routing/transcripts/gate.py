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
  after, at any distance), including inside JSON-encoded, base64-encoded, hex-encoded and
  percent-encoded strings (recursively, up to
  :data:`MAX_DECODE_DEPTH` decodings, at most :data:`MAX_DECODES_PER_VALUE` decodings per
  scanned value; a value that would need more is itself a finding, ``decode_depth_exceeded``
  or ``decode_budget_exceeded``: refused, never let through unscanned). Keys and marker values match case-insensitively (``Encrypted_Content``,
  ``"type": "Redacted_Thinking"``). The walk is iterative, so deep nesting cannot blow the
  stack, and every text search is linear in the text's length.
* :func:`strip_encrypted_reasoning` -- a copy of a value with every finding removed (used by
  the transcript writer, which must never store reasoning).
* :func:`gate_check` -- validate a batch of training records: per record, accepted or rejected
  with reasons (:class:`RejectReason`), and counts per reason.

A training record (one line of the training export) is a JSON object with at least
``record_id`` (non-empty string, at most 200 characters), ``user_id`` (a unit id: the one
rule of :func:`muse_experiments.validation.unit_id_problem`, refused rather than normalised, so
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
import json
import re
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from muse_experiments.validation import unit_id_problem

#: How many nested decodings (JSON-in-string, base64-in-string) the detector follows.
MAX_DECODE_DEPTH = 6
#: Largest record (bytes of its compact JSON) the gate accepts; bigger ones are rejected unscanned.
MAX_RECORD_BYTES = 8 * 1024 * 1024
#: Shortest run of base64 characters worth decoding (shorter runs cannot hide a blob + marker).
MIN_BASE64_RUN = 24
#: Most decodings (JSON, base64, hex, percent) followed while scanning one value; past this the
#: value is reported as ``decode_budget_exceeded`` (refused, never let through unscanned).
MAX_DECODES_PER_VALUE = 1024

FERNET_RE = re.compile(r"gAAAAA[A-Za-z0-9_\-+/=]{16,}")
BASE64_RUN_RE = re.compile(rf"[A-Za-z0-9+/_-]{{{MIN_BASE64_RUN},}}={{0,2}}")
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
ENCRYPTED_CONTENT_TEXT_RE = re.compile(r"encrypted_?content" + _KEY_THEN_BLOB, re.I)
SIGNATURE_TEXT_RE = re.compile(r"signature" + _KEY_THEN_BLOB, re.I)
DATA_TEXT_RE = re.compile(r"data" + _KEY_THEN_BLOB, re.I)
REDACTED_THINKING_TEXT_RE = re.compile(r"redacted_?thinking", re.I)
THINKING_TYPE_TEXT_RE = re.compile(r"type[\"'\\]*\s*[:=]\s*[\"'\\]*thinking(?:_delta)?\b", re.I)
# Lines of server-sent events (``data: {...}``) or JSON lines: parsed together as one JSON list.
JSON_LINE_RE = re.compile(r"^[ \t]*(?:data:[ \t]*)?([{\[].*?)[ \t]*\r?$", re.M)


def _text_markers(norm: str) -> list[str]:
    """Kinds of reasoning marker text in one (normalised) string: ``encrypted_content: <blob>``;
    ``signature: <blob>`` in a string that mentions ``thinking`` or ``signature_delta``;
    ``data: <blob>`` in one that mentions ``redacted_thinking`` (or ``RedactedThinking``)."""
    low = norm.lower()
    kinds = []
    if "encrypted" in low and ENCRYPTED_CONTENT_TEXT_RE.search(norm):
        kinds.append("openai_encrypted_content")
    if (
        "signature" in low
        and ("thinking" in low or "signature_delta" in low)
        and SIGNATURE_TEXT_RE.search(norm)
    ):
        kinds.append("anthropic_thinking_signature")
    if "redacted" in low and REDACTED_THINKING_TEXT_RE.search(norm) and DATA_TEXT_RE.search(norm):
        kinds.append("anthropic_redacted_thinking")
    if "thinking" in low and THINKING_TYPE_TEXT_RE.search(norm):
        kinds.append("anthropic_thinking_block")
    return kinds


def _json_lines(norm: str) -> tuple[list[Any], bool]:
    """The JSON values of a multi-line text's ``data: {...}`` (server-sent events) and ``{...}``
    lines (JSON lines), and whether a line was nested past the decoder's recursion."""
    values: list[Any] = []
    too_deep = False
    if "\n" in norm:
        for match in JSON_LINE_RE.finditer(norm):
            try:
                values.append(json.loads(match.group(1)))
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
    EXTERNAL_PROVIDER = "external_provider"
    OPTED_OUT = "opted_out"
    DUPLICATE_IN_BATCH = "duplicate_in_batch"


@dataclass(frozen=True)
class Finding:
    """One piece of encrypted reasoning: ``path`` (JSON-pointer-like, with ``<json>``/``<base64>``
    steps for decodings) and ``kind`` (``openai_encrypted_content``, ``fernet_blob``,
    ``fernet_token``, ``anthropic_thinking_signature``, ``anthropic_thinking_block``,
    ``anthropic_redacted_thinking``; or
    ``decode_depth_exceeded`` / ``decode_budget_exceeded`` for a value encoded in more layers,
    or more decodings, than the detector follows).
    Never holds the content itself."""

    path: str
    kind: str


def _structural(node: Mapping[str, Any]) -> str | None:
    """Marker kind when a JSON object is itself a reasoning carrier (keys and the ``type`` value
    compared case-insensitively): a Responses item with ``encrypted_content``; an Anthropic
    ``redacted_thinking`` block; a ``thinking`` block or ``signature_delta`` stream delta with a
    ``signature`` (``anthropic_thinking_signature``); a ``thinking`` block or ``thinking_delta``
    without one (``anthropic_thinking_block``: a recorded stream's ``content_block_start``, whose
    signature follows in a later delta)."""
    keys = "\0".join(map(str, node)).lower()
    if (
        "data" not in keys
        and "signature" not in keys
        and "encrypted_content" not in keys
        and "thinking" not in keys
    ):
        return None  # fast path: no carrier key in any case
    node = {str(k).lower(): v for k, v in node.items()}
    ntype = node.get("type")
    ntype = ntype.lower() if isinstance(ntype, str) else ntype
    if ntype == "redacted_thinking" and "data" in node:
        return "anthropic_redacted_thinking"
    if "signature" in node and (ntype in ("thinking", "signature_delta") or "thinking" in node):
        return "anthropic_thinking_signature"
    if ntype in ("thinking", "thinking_delta") and "thinking" in node:
        return "anthropic_thinking_block"
    if node.get("encrypted_content"):
        return "openai_encrypted_content"
    return None


def _decoded_base64(run: str) -> str | None:
    """The UTF-8 text behind a base64 run, or None if it is not base64 of text.

    Both alphabets (standard and URL-safe) are accepted, and the run may start up to 3
    characters early (base64 glued to a preceding word). A raw Fernet token (version byte 0x80,
    >= 73 bytes, 16-byte blocks) is reported as :data:`FERNET_TOKEN`. At a shifted start its
    timestamp must also be below 2**40 s (its three high bytes zero, as every real token's are):
    one random blob in 256 decodes to a 0x80 byte at a shift, and a clean image must not be
    rejected for that; the extra rule leaves one in 2**40.
    """
    for offset in range(4):
        found = _decode_aligned(run[offset:], shifted=offset > 0)
        if found is not None:
            return found
    return None


def _is_fernet_token(raw: bytes, *, shifted: bool = False) -> bool:
    """Whether bytes have a Fernet token's shape (spec above): version 0x80, 8-byte timestamp,
    16-byte IV, whole 16-byte ciphertext blocks, 32-byte HMAC; ``shifted`` adds the zero high
    timestamp bytes."""
    if len(raw) < 73 or raw[0] != 0x80 or (len(raw) - 57) % 16:
        return False
    return not shifted or raw[1:4] == b"\0\0\0"


def _decode_aligned(run: str, *, shifted: bool) -> str | None:
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if _is_fernet_token(raw, shifted=shifted):
        return FERNET_TOKEN
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _text_or_none(decoded)


def _text_or_none(decoded: str) -> str | None:
    printable = sum(1 for ch in decoded if ch.isprintable() or ch in "\r\n\t")
    return decoded if decoded and printable / len(decoded) > 0.9 else None


def _decoded_hex(run: str) -> str | None:
    """The UTF-8 text behind a hex run (even length, either case), or None; a raw Fernet token
    is reported as :data:`FERNET_TOKEN`."""
    raw = bytes.fromhex(run)
    if _is_fernet_token(raw):
        return FERNET_TOKEN
    try:
        return _text_or_none(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None


def _string_children(text: str, path: str, depth: int) -> tuple[list[Finding], list[tuple[Any, str, int]]]:
    """Findings in one string and the decoded values to scan next (JSON, base64)."""
    findings: list[Finding] = []
    children: list[tuple[Any, str, int]] = []
    norm = unicodedata.normalize("NFKC", text)
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
    runs = [m.group(0) for m in BASE64_RUN_RE.finditer(norm)]
    if len(runs) > 1 and WRAPPED_BASE64_RE.fullmatch(norm):
        # MIME-style base64 wrapped in lines (base64.encodebytes, the base64 CLI): the lines are
        # one encoding, so they are decoded joined as well as one by one
        runs.append("".join(runs))
    for run in runs:
        decoded = _decoded_base64(run)
        if decoded is not None:
            if decoded is FERNET_TOKEN:
                findings.append(Finding(f"{path}/<base64>", "fernet_token"))
            else:
                children.append((decoded, f"{path}/<base64>", depth + 1))
        # Hex digits are base64 characters, so every hex run lies inside a base64 run.
        for hex_match in HEX_RUN_RE.finditer(run) if len(run) >= 32 else ():
            decoded = _decoded_hex(hex_match.group(0))
            if decoded is FERNET_TOKEN:
                findings.append(Finding(f"{path}/<hex>", "fernet_token"))
            elif decoded is not None:
                children.append((decoded, f"{path}/<hex>", depth + 1))
    if "%" in norm and PERCENT_RE.search(norm):
        children.append((urllib.parse.unquote(norm), f"{path}/<percent>", depth + 1))
    if children and depth >= MAX_DECODE_DEPTH:
        # one more layer than the detector follows: refused, never let through unscanned
        return [*findings, Finding(path, "decode_depth_exceeded")], []
    return findings, children


def find_encrypted_reasoning(value: Any, *, path: str = "") -> list[Finding]:
    """Every place in a JSON value (dict/list/str/number/bool/None) that carries encrypted reasoning.

    Returns ``[]`` for a clean value. Iterative; follows JSON-, base64-, hex- and
    percent-encoded strings up to :data:`MAX_DECODE_DEPTH` levels and at most
    :data:`MAX_DECODES_PER_VALUE` decodings in all (beyond that one ``decode_budget_exceeded``
    finding: refused, not guessed). Object keys are scanned like strings.
    """
    findings: list[Finding] = []
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    decodes = 0
    while stack:
        if decodes > MAX_DECODES_PER_VALUE:
            findings.append(Finding(path, "decode_budget_exceeded"))
            break
        node, where, depth = stack.pop()
        if isinstance(node, Mapping):
            kind = _structural(node)
            if kind:
                findings.append(Finding(where, kind))
            for key, child in node.items():
                key_text = str(key)
                if len(key_text) >= MIN_BASE64_RUN or "gAAAAA" in key_text:
                    found, decoded = _string_children(key_text, f"{where}/<key>", depth)
                    findings += found
                    stack += decoded
                    decodes += len(decoded)
                stack.append((child, f"{where}/{key_text}", depth))
        elif isinstance(node, list | tuple):
            stack.extend((child, f"{where}/{i}", depth) for i, child in enumerate(node))
        elif isinstance(node, str):
            found, decoded = _string_children(node, where, depth)
            findings += found
            stack += decoded
            decodes += len(decoded)
    return findings


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
            return [clean(child, depth + 1) for child in node]
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
    """Verdict for one record, and its canonical JSON when it could be serialised."""
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
        findings = find_encrypted_reasoning(record)
    except RecursionError:  # json.loads of a pathological string; refuse rather than guess
        findings = [Finding("", "undecodable")]
    if findings:
        reasons.append(RejectReason.CONTAINS_ENCRYPTED_REASONING)
        kinds = sorted({f.kind for f in findings})
        details.append(f"encrypted reasoning at {len(findings)} place(s): {', '.join(kinds)}")
    provenance = record.get("provenance")
    provider_kind = record.get("provider_kind", "native")
    if isinstance(provenance, str) and (provenance != "native" or provider_kind != "native"):
        reasons.append(RejectReason.EXTERNAL_PROVIDER)
        details.append("served by an external provider")
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
    anywhere, came from an external provider (``provenance != "native"`` or a non-native
    ``provider_kind``), belongs to an opted-out user, or repeats a ``record_id`` seen earlier
    in the same batch. Never raises for bad records; each gets its own verdict.
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
