"""Text layers the detector looks through: ``\\xHH``/octal and ``\\uHHHH``/``%uHHHH`` escapes,
HTML character references, quoted-printable, and rot13 or reversed text (when transformed
marker words or the Fernet prefix show): :func:`text_layers`."""

from __future__ import annotations

import html
import quopri
import re

from .decoding import bytes_text

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
        return bytes_text(raw, inflate=False) or raw.hex()

    text = _BYTE_ESCAPES_RE.sub(byte_run, text)
    return _CHAR_ESCAPES_RE.sub(lambda m: chr(int(m.group()[2:], 16)), text)


def _soft_line_breaks(norm: str) -> bool:
    """Whether a text has quoted-printable soft line breaks: ``=`` ending a line of at least 60
    characters (the encoding wraps at 76)."""
    for match in _SOFT_LINE_BREAK_RE.finditer(norm):
        if match.start() - (norm.rfind("\n", 0, match.start()) + 1) >= 60:
            return True
    return False


def text_layers(norm: str, path: str) -> list[tuple[str, str]]:
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
            text = bytes_text(raw)
            if text is not None or escapes * 3 * 2 >= len(norm):  # binary: as hex when mostly escapes
                layers.append(("quoted-printable", text if text is not None else raw.hex()))
    low = norm.lower()
    last = path.rsplit("/", 1)[-1]
    for name, transform in _TRANSFORMS:
        prefix, words = _TRANSFORM_SIGNS[name]
        if last != f"<{name}>" and (prefix in norm or any(word in low for word in words)):
            layers.append((name, transform(norm)))
    return layers
