"""Text at the storage boundary: NUL characters (U+0000), which PostgreSQL cannot store.

PostgreSQL refuses U+0000 in ``text`` and ``jsonb`` values (``unsupported Unicode escape
sequence``; SQLite stores it), so every writer goes through this module:

* **client input** with a NUL is refused before anything is stored: :func:`nul_path` names the
  first offending field (``attributes.plan``, ``messages[2].content``), and the API answers 400
  naming it (``BoundedJSONParser`` for every JSON body; drop-ins also for the JSON they decode,
  such as tool-call ``arguments`` strings).
* **provider output** with a NUL is delivered to the client unchanged (it travels as JSON, where
  it is ``\\u0000``) and *stored* with each NUL replaced by :data:`NUL_ESCAPE`, U+2400 SYMBOL FOR
  NULL (``␀``), by :func:`storable`, in dict keys as well as values. The call, its tokens and cost
  are recorded as for any other answer.

Pure Python: no Django import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

NUL = "\x00"
#: What a NUL in provider output becomes in the database: U+2400 SYMBOL FOR NULL.
NUL_ESCAPE = "\u2400"


def nul_path(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (value or object key) holding a NUL, else ``None``.

    Objects add ``.key`` (no dot at the root), arrays ``[i]``; a NUL in a key names the key's path.
    Iterative, so deeply nested input cannot exhaust the stack.
    """
    return _find(value, path, _json_text(value), _json_has_nul, _has_nul)


def surrogate_path(value: Any, path: str = "") -> str | None:
    """Like :func:`nul_path`, for a lone UTF-16 surrogate (U+D800..U+DFFF, e.g. ``"\\udfff"`` in
    JSON): it has no UTF-8 encoding, so neither database can store it. Surrogates in the path are
    shown as ``\\udfff`` escapes."""
    return _find(value, path, _json_text(value), _SURROGATE.search, _SURROGATE.search)


def unstorable_paths(value: Any, path: str = "") -> tuple[str | None, str | None]:
    """``(nul_path(value, path), surrogate_path(value, path))`` from one JSON text of ``value``
    (client input is checked for both)."""
    text = _json_text(value)
    return (
        _find(value, path, text, _json_has_nul, _has_nul),
        _find(value, path, text, _SURROGATE.search, _SURROGATE.search),
    )


#: How JSON text writes a NUL (always escaped).
_JSON_NUL = "\\u0000"


def _has_nul(text: str) -> bool:
    return NUL in text


def _json_has_nul(text: str) -> bool:
    return _JSON_NUL in text


def _find(
    value: Any, path: str, text: str | None, hit: Callable[[str], Any], bad: Callable[[str], Any]
) -> str | None:
    """:func:`_first_path` of ``value``, unless its JSON ``text`` shows no ``hit`` (no walk then)."""
    if text is not None and not hit(text):
        return None
    return _first_path(value, path, bad)


def _json_text(value: Any) -> str | None:
    """``value`` as JSON text (``ensure_ascii=False``), else None (not JSON-like, or too deep).

    The clean case's fast path: ``json``'s C encoder writes the text at once, where the walk
    below builds every node's path in Python (about half the CPU for a call's records payload;
    bench/README.md, "Measured outside bench/"). Only a value whose text shows no NUL escape (or no surrogate)
    skips the walk; any hit, even a false one such as the six characters ``\\u0000`` in a
    string, is settled by the walk.
    """
    if isinstance(value, str):
        return None
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _printable(path: str) -> str:
    return path.replace(NUL, "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _first_path(value: Any, path: str, bad: Callable[[str], Any]) -> str | None:
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if bad(item):
                return _printable(where) or "(body)"
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                child_path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and bad(key):
                    return _printable(child_path)
                children.append((child, child_path))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(item)]))
    return None


def storable(value: Any) -> Any:
    """``value`` (str, or JSON-like dicts/lists) with every NUL replaced by :data:`NUL_ESCAPE`.

    Returns the same object when it holds no NUL (no copy on the hot path).
    """
    if isinstance(value, str):
        return value.replace(NUL, NUL_ESCAPE) if NUL in value else value
    if nul_path(value) is None:
        return value
    if isinstance(value, dict):
        return {storable(k) if isinstance(k, str) else k: storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(storable(v) for v in value)
    return value
