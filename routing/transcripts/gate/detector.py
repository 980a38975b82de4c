"""The walk of the encrypted-reasoning detector over a JSON value (iterative, bounded by
:data:`MAX_DECODE_DEPTH`, :data:`MAX_DECODES_PER_VALUE` and :data:`MAX_DECODED_CHARS`):
:func:`find_encrypted_reasoning` and :func:`strip_encrypted_reasoning`. See
:mod:`routing.transcripts.gate` for what counts."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .decoding import INFLATE_LIMIT, bytes_text
from .layers import text_layers
from .markers import (
    BASE64_RUN_RE,
    DECODED_CHARS_PER_CHAR,
    FERNET_RE,
    MAX_DECODE_DEPTH,
    MAX_DECODED_CHARS,
    MAX_DECODES_PER_VALUE,
    MIN_BASE64_RUN,
    MIN_CARRIER,
    PERCENT_RE,
    WRAPPED_BASE64_RE,
    Finding,
    json_lines,
    normalised,
    structural,
    text_markers,
)
from .opaque import OPAQUE_SAMPLE_BYTES, identifier_list, opaque_blob, opaque_run
from .runs import MIN_BASE85_RUN, MIN_JOINED, chunked_runs, list_runs, scan_base85, scan_run, wrapped_lines


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
    norm = normalised(text)
    if len(norm) < MIN_CARRIER:
        return findings, children
    if "gAAAAA" in norm and FERNET_RE.search(norm):
        findings.append(Finding(path, "fernet_blob"))
    findings += [Finding(path, kind) for kind in text_markers(norm)]
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
        lines, too_deep = json_lines(norm)
        if lines:
            children.append((lines, f"{path}/<json-lines>", depth + 1))
        if too_deep:
            findings.append(Finding(path, "decode_depth_exceeded"))
    children += [(decoded, f"{path}/<{layer}>", depth + 1) for layer, decoded in text_layers(norm, path)]
    # Runs split into chunks are read joined; when such a run is one readable encoding, its
    # chunks are not decoded one by one as well.
    covered: list[tuple[int, int]] = []
    for joined, span, not_blob in chunked_runs(norm) if len(norm) >= MIN_JOINED else ():
        scanned = scan_run(
            joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque and not not_blob
        )
        if scanned and span:
            covered.append(span)
    runs = list(BASE64_RUN_RE.finditer(norm))
    if not covered and len(runs) > 1 and WRAPPED_BASE64_RE.fullmatch(norm):
        # base64 wrapped in lines of any length (base64.encodebytes, the base64 CLI)
        tokens = [m.group() for m in runs]
        not_blob = identifier_list(tokens)
        joined = "".join(tokens)
        if scan_run(
            joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque and not not_blob
        ):
            covered.append((0, len(norm)))
    for match in runs:
        if not any(start <= match.start() and match.end() <= end for start, end in covered):
            before = len(findings)
            scan_run(match.group(), path, depth, findings, children, opaque=opaque)
            if opaque and any(f.kind == "opaque_blob" for f in findings[before:]):
                opaque = False  # one opaque blob refuses the record: the others need no statistics
    if opaque and len(runs) > 1:
        for joined in wrapped_lines(norm, runs):
            if opaque_run(joined.rstrip("="), "base64"):
                findings.append(Finding(f"{path}/<joined>/<base64>", "opaque_blob"))
    base85_percent = len(norm) >= MIN_BASE85_RUN and scan_base85(
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
    """Findings in the runs that continue across a list's items (:func:`list_runs`), and the
    decoded values to scan next. A list of at least :data:`MIN_BYTE_ARRAY` integers from 0 to 255
    is bytes (a byte array serialised to JSON: Node's ``Buffer.toJSON()``, a Python
    ``list(bytes)``): its text is scanned next, and with ``opaque`` random-looking bytes are an
    ``opaque_blob`` (:func:`opaque_blob`, judged on their hex)."""
    findings: list[Finding] = []
    children: list[tuple[Any, str, int]] = []
    raw = _byte_array(items)
    if raw is not None:
        text = bytes_text(raw)
        if text is not None:
            children.append((text, f"{path}/<bytes>", depth + 1))
        elif opaque and opaque_blob(raw, raw[:OPAQUE_SAMPLE_BYTES].hex(), 16):
            findings.append(Finding(f"{path}/<bytes>", "opaque_blob"))
    for joined, _ in list_runs(items):
        scan_run(joined, f"{path}/<joined>", depth, findings, children, joined=True, opaque=opaque)
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
            kind = structural(node)
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
            if structural(node):
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
            if raw is not None and (text := bytes_text(raw)) is not None and find_encrypted_reasoning(text):
                removed += 1
                return REMOVED  # a byte array whose text carries reasoning
            split = {
                member
                for joined, members in list_runs(node)
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
