"""Runs of an encoding's alphabet, also where a text splits them: equal chunks split by
whitespace or one repeated mark (:func:`chunked_runs`), base64 wrapped in lines
(:func:`wrapped_lines`), runs continued across a list's strings or its objects'
``content``/``text`` (:func:`list_runs`); each run decoded and scanned (:func:`scan_run`,
:func:`scan_base85`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .decoding import (
    BASE32_CHARS,
    BASE85_ALPHABETS,
    decoded_base32,
    decoded_base64,
    decoded_base85,
    decoded_hex,
)
from .markers import FERNET_RE, FERNET_TOKEN, HEX_RUN_RE, MIN_BASE64_RUN, Finding, canonical, normalised
from .opaque import (
    CHAR_CLASSES,
    IDENTIFIER_RE,
    MIN_IDENTIFIER,
    MIN_OPAQUE_CHARS,
    entropy,
    identifier_list,
    opaque_base85,
    opaque_run,
    random_entropy,
)

_RUN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-="
#: Fewest characters a chunked or joined run must have to be looked at.
MIN_JOINED = 48
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

_SAME_LENGTH_RE = re.compile(r"(.)\1+", re.S)


def _equal_chunks(tokens: list[str]) -> list[tuple[str, bool, bool]]:
    """Stretches of at least two tokens of one length, plus a shorter last one, joined (with
    whether the stretch is all of ``tokens``, and whether it is a list of identifiers:
    :func:`identifier_list`), at least :data:`MIN_JOINED` characters long.
    (Found by a regex over the tokens' lengths written as characters: no Python loop per token.)"""
    lengths = "".join(map(chr, map(len, tokens)))
    out = []
    for match in _SAME_LENGTH_RE.finditer(lengths):
        i, j = match.span()
        size = len(tokens[i])
        end = j + 1 if j < len(tokens) and len(tokens[j]) < size else j
        if end - i >= 3 and size * (j - i) >= MIN_JOINED:
            listed = size >= MIN_IDENTIFIER and identifier_list(tokens[i:end])
            out.append(("".join(tokens[i:end]), i == 0 and end == len(tokens), listed))
    return out


def chunked_runs(norm: str) -> list[tuple[str, tuple[int, int] | None, bool]]:
    """Runs a text splits into chunks, joined: equal chunks split by whitespace (wrapped base64,
    spaced hex) and chunks split by one repeated punctuation mark (``67:41:…``, ``0x67, 0x41``),
    a longer first chunk cut to the others' length (a word glued to the first). Each with the
    span of the text it is all of (whitespace-split chunks only), else None, and whether its
    chunks cannot be one opaque blob: a list of identifiers (:func:`identifier_list`), or
    punctuated tokens of unequal lengths (``0x0, 0x1, …, 0x10``: a table of numbers, while a
    dump has one width, ``0x67, 0x41``)."""
    runs: list[tuple[str, tuple[int, int] | None, bool]] = []
    for match in _SPACED_RE.finditer(norm):
        if match.end() - match.start() >= MIN_JOINED:
            runs += [
                (joined, match.span() if whole else None, not_blob)
                for joined, whole, not_blob in _equal_chunks(match.group().split())
            ]
    for match in _PUNCTUATED_RE.finditer(norm):
        if match.end() - match.start() >= MIN_JOINED:
            tokens = _PUNCTUATED_TOKEN_RE.findall(match.group())
            size = sorted(map(len, tokens))[len(tokens) // 2]
            tokens[0] = tokens[0][-size:]
            unequal = len(tokens[-1]) > size or any(len(t) != size for t in tokens[1:-1])
            runs.append(
                ("".join(tokens), None, unequal or (size >= MIN_IDENTIFIER and identifier_list(tokens)))
            )
    return runs


# Where a list is read joined: its strings, and these keys of its objects (message ``content``,
# message part ``text``; keys in canonical form, :func:`canonical`: ``Content``, ``text_`` too).
_JOINED_KEYS = frozenset(("content", "text"))


def list_runs(items: list[Any] | tuple[Any, ...]) -> list[tuple[str, list[tuple[int, Any]]]]:
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
                if isinstance(value, str) and (name := canonical(str(key))) in _JOINED_KEYS:
                    columns.setdefault(name, []).append((i, key, value))
    return [run for column in columns.values() if len(column) > 1 for run in _column_runs(column)]


def _column_runs(column: list[tuple[int, Any, str]]) -> list[tuple[str, list[tuple[int, Any]]]]:
    """:func:`list_runs` for one column: the ``(index, key, string)`` items of a list under one
    (canonical) key."""
    out: list[tuple[str, list[tuple[int, Any]]]] = []
    parts: list[str] = []
    members: list[tuple[int, Any]] = []
    for i, key, value in [*column, (-1, None, "\0")]:  # a last item that ends every run
        text = normalised(value).strip() if i >= 0 else "."
        if not text:
            continue
        lead = len(text) - len(text.lstrip(_RUN_CHARS))
        trail = len(text) - len(text.rstrip(_RUN_CHARS))
        identifier = bool(lead or trail) and IDENTIFIER_RE.fullmatch(text) is not None
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


def scan_run(
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
        decoded = decoded_base64(run)
        if decoded is FERNET_TOKEN:
            findings.append(Finding(f"{path}/<base64>", "fernet_token"))
        elif decoded is not None:
            children.append((decoded, f"{path}/<base64>", depth + 1))
        readable = decoded is not None
        body = run.rstrip("=")
        base32 = not readable and set(body.upper()) <= BASE32_CHARS
        if base32:
            decoded = decoded_base32(body)
            if decoded is not None:
                children.append((decoded, f"{path}/<base32>", depth + 1))
                readable = True
        if opaque and not readable and len(body) >= MIN_OPAQUE_CHARS["base64"]:
            for encoding in ("base64", "base32") if base32 else ("base64",):
                if opaque_run(body, encoding):
                    findings.append(Finding(f"{path}/<{encoding}>", "opaque_blob"))
                    break
    # Hex digits are base64 characters, so every hex run lies inside a base64 run.
    for hex_match in HEX_RUN_RE.finditer(run) if len(run) >= 32 else ():
        hex_run = hex_match.group(0)
        decoded = decoded_hex(hex_run)
        if decoded is None and len(hex_run) > 32:  # glued to a word ending in a hex letter
            decoded = decoded_hex(hex_run[1:-1])
        if decoded is FERNET_TOKEN:
            findings.append(Finding(f"{path}/<hex>", "fernet_token"))
        elif decoded is not None:
            children.append((decoded, f"{path}/<hex>", depth + 1))
        elif opaque and len(hex_run) >= MIN_OPAQUE_CHARS["hex"] and opaque_run(hex_run, "hex"):
            findings.append(Finding(f"{path}/<hex>", "opaque_blob"))
        readable = readable or (decoded is not None and len(hex_run) >= len(run.rstrip("=")) - 1)
    return readable


#: Shortest base85 run decoded (80 bytes): shorter ones are too often code to be worth it.
MIN_BASE85_RUN = 100


def scan_base85(
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
    for pattern, decode, _ in BASE85_ALPHABETS if tokens else ():
        for match in (m for token in tokens for m in pattern.finditer(token)):
            run = match.group()
            if len(run) < MIN_BASE85_RUN or not run.strip(_RUN_CHARS):
                continue
            classes = Counter(run.translate(CHAR_CLASSES))
            if (
                len(run) - classes["U"] - classes["L"] - classes["D"] >= 0.12 * len(run)
                and entropy(run) >= random_entropy(min(len(run), 4096), 85) - 1.0
            ):
                if (decoded := decoded_base85(run, decode)) is not None:
                    children.append((decoded, f"{path}/<base85>", depth + 1))
                    percent = percent or "%" in run
                elif opaque and opaque_base85(run, decode):
                    findings.append(Finding(f"{path}/<base85>", "opaque_blob"))
                    percent = percent or "%" in run
    return percent


#: Shortest line of a wrapped blob (:func:`wrapped_lines`); encoders wrap at 60, 64 or 76.
_MIN_WRAP = 60


def wrapped_lines(norm: str, runs: list[re.Match[str]]) -> list[str]:
    """Base64 wrapped in lines inside other text, joined: consecutive runs (``runs``: the
    :data:`BASE64_RUN_RE` matches of ``norm``) each alone on its line, separated by one line
    break, all but the last of one length of at least :data:`_MIN_WRAP` characters, unpadded,
    and the last no longer, at least :data:`MIN_OPAQUE_BYTES` decoded bytes in all (two lines
    included, which :func:`chunked_runs` needs three of), not a list of identifiers
    (:func:`identifier_list`). Linear in the number of runs."""
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
            and sum(map(len, tokens)) >= MIN_OPAQUE_CHARS["base64"]
            and not identifier_list(tokens)
        ):
            out.append("".join(tokens))
        group = [match] if match is not None and len(match.group()) >= _MIN_WRAP else []
    return out
