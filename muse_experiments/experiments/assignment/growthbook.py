"""GrowthBook SDK-compatible assignment primitives (pure Python, stdlib only).

Everything here re-implements, function for function, the deterministic parts of
the GrowthBook SDKs so that a unit bucketed by Muse lands in exactly the bucket
GrowthBook (and any GrowthBook SDK) would put it in:

* hashing, bucket ranges, variation choice, namespaces:
  ``packages/sdk-js/src/util.ts`` (JS SDK) and ``growthbook/core.py``
  (``growthbook/growthbook-python``);
* targeting conditions: ``packages/sdk-js/src/mongrule.ts`` (JS SDK) and the
  ``evalCondition`` family of ``growthbook/core.py``.

Conformance is checked against GrowthBook's published SDK test cases
(``packages/sdk-js/test/cases.json``), vendored in ``tests/data/growthbook_cases.json``.

Non-ASCII ids
-------------
GrowthBook's reference SDK is JavaScript, whose FNV-1a loop does
``hval ^= str.charCodeAt(i)``: it hashes **UTF-16 code units**, not bytes and not
code points. :func:`fnv1a32` does the same: the string is encoded as UTF-16
(``surrogatepass``, so lone surrogates coming from JSON survive), every 16-bit code
unit is XORed into the state as a whole number and the state multiplied by the FNV
prime. Consequences:

* an ASCII string hashes exactly like its bytes (code unit == byte value);
* a BMP character such as ``"é"`` (U+00E9) is one code unit, 0x00E9, XORed in whole
  (a UTF-8 byte hash would XOR 0xC3 then 0xA9 instead);
* an astral character such as ``"😀"`` (U+1F600) is two code units, the surrogates
  0xD83D and 0xDE00, each XORed in and multiplied in turn.

This module imports nothing outside the standard library.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "FNV_OFFSET_BASIS",
    "FNV_PRIME",
    "choose_variation",
    "eval_condition",
    "fnv1a32",
    "fnv1a32_continue",
    "get_bucket_ranges",
    "get_equal_weights",
    "hash",
    "in_namespace",
    "in_range",
    "padded_version_string",
    "utf16_code_units",
]

FNV_OFFSET_BASIS = 0x811C9DC5
FNV_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF

VariationRange = tuple[float, float]


# --------------------------------------------------------------------------- hashing


def utf16_code_units(s: str) -> tuple[int, ...]:
    """Return the UTF-16 code units of ``s``, i.e. JavaScript's ``s.charCodeAt(i)`` for every ``i``.

    Shape: ``len(result) == len(s) + number of astral (> U+FFFF) characters``.
    Lone surrogates are kept as themselves (``surrogatepass``), as JS does.
    """
    if s.isascii():
        return tuple(s.encode("ascii"))
    data = s.encode("utf-16-le", "surrogatepass")
    return tuple(data[i] | (data[i + 1] << 8) for i in range(0, len(data), 2))


def fnv1a32_continue(state: int, s: str) -> int:
    """Feed ``s`` (as UTF-16 code units) into an FNV-1a 32-bit ``state`` and return the new state.

    FNV-1a is sequential, so ``fnv1a32(a + b) == fnv1a32_continue(fnv1a32(a), b)``; the engine
    uses this to pre-hash constant seed prefixes once.
    """
    h = state
    if s.isascii():
        for c in s.encode("ascii"):
            h = (h ^ c) * FNV_PRIME & _MASK32
        return h
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (h ^ (data[i] | (data[i + 1] << 8))) * FNV_PRIME & _MASK32
    return h


def fnv1a32(s: str) -> int:
    """FNV-1a 32-bit hash of ``s`` over UTF-16 code units -> int in ``[0, 2**32)``.

    Source: ``hashFnv32a`` in GrowthBook ``packages/sdk-js/src/util.ts`` (the shift-add sequence
    there is multiplication by the FNV prime 0x01000193 modulo 2**32).
    """
    return fnv1a32_continue(FNV_OFFSET_BASIS, s)


def hash(seed: str, value: str, version: int) -> float | None:  # noqa: A001 - GrowthBook's name
    """GrowthBook's deterministic hash of ``value`` salted with ``seed`` -> float in ``[0, 1)``.

    * ``version == 2`` (unbiased, recommended): ``(fnv(str(fnv(seed + value))) % 10000) / 10000``,
      a multiple of 0.0001;
    * ``version == 1`` (legacy, used by namespaces): ``(fnv(value + seed) % 1000) / 1000``,
      a multiple of 0.001;
    * any other version: ``None`` (GrowthBook: "unknown hash version").

    Source: ``hash`` in ``packages/sdk-js/src/util.ts`` / ``gbhash`` in ``growthbook/core.py``.
    """
    if version == 2:
        return (fnv1a32(str(fnv1a32(seed + value))) % 10000) / 10000
    if version == 1:
        return (fnv1a32(value + seed) % 1000) / 1000
    return None


# --------------------------------------------------------------------------- buckets


def get_equal_weights(num_variations: int) -> list[float]:
    """``num_variations`` equal weights ``1/n`` (empty list when ``n < 1``).

    Source: ``getEqualWeights`` in ``packages/sdk-js/src/util.ts``.
    """
    if num_variations < 1:
        return []
    return [1 / num_variations] * num_variations


def _valid_weights(weights: Any, num_variations: int) -> bool:
    """GrowthBook's weight check (right length, sum in [0.99, 1.01]), hardened like the Python SDK
    4.x: every weight must also be a finite, non-negative real number (booleans excluded), so a
    malformed payload can never yield inverted ranges."""
    if not isinstance(weights, Sequence) or isinstance(weights, str) or len(weights) != num_variations:
        return False
    try:
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
                return False
        return 0.99 <= math.fsum(weights) <= 1.01
    except (OverflowError, TypeError):
        return False


def get_bucket_ranges(
    num_variations: int, coverage: float | None = 1, weights: Sequence[float] | None = None
) -> list[VariationRange]:
    """Bucket ranges ``[(start_i, start_i + coverage * w_i)]`` for ``num_variations`` variations.

    ``start_i`` is the cumulative weight of the variations before ``i``, so a unit keeps its
    variation when coverage grows (ranges only widen towards the next start).

    Invalid input behaves as GrowthBook does, without raising: ``coverage`` is clamped to
    ``[0, 1]`` (``None``/NaN count as 1, like JS ``undefined``); ``weights`` that are missing, of the
    wrong length, or do not sum to 1 within ±0.01 are replaced by equal weights.

    Source: ``getBucketRanges`` in ``packages/sdk-js/src/util.ts`` / ``getBucketRanges`` in
    ``growthbook/core.py``.
    """
    if (
        coverage is None
        or isinstance(coverage, bool)
        or not isinstance(coverage, int | float)
        or math.isnan(coverage)
    ):
        coverage = 1.0
    coverage = min(max(float(coverage), 0.0), 1.0)
    w = list(weights) if _valid_weights(weights, num_variations) else get_equal_weights(num_variations)
    cumulative = 0.0
    ranges: list[VariationRange] = []
    for wi in w:
        start = cumulative
        cumulative += wi
        ranges.append((start, start + coverage * wi))
    return ranges


def in_range(n: float, rng: Sequence[float]) -> bool:
    """``rng[0] <= n < rng[1]`` (half-open). Source: ``inRange`` in ``util.ts``."""
    return rng[0] <= n < rng[1]


def choose_variation(n: float, ranges: Sequence[Sequence[float]]) -> int:
    """Index of the first range containing ``n`` (half-open ``[start, end)``), or ``-1`` if none does.

    Source: ``chooseVariation`` in ``packages/sdk-js/src/util.ts``.
    """
    for i, r in enumerate(ranges):
        if r[0] <= n < r[1]:
            return i
    return -1


def in_namespace(user_id: str, namespace: Sequence[Any]) -> bool:
    """Whether ``user_id`` falls into ``namespace = (namespace_id, start, end)``.

    Computes ``n = hash("__" + namespace_id, user_id, 1)`` and returns ``start <= n < end``.
    Experiments sharing a namespace id with disjoint ranges are therefore mutually exclusive,
    and different namespace ids are independent.

    Source: ``inNamespace`` in ``packages/sdk-js/src/util.ts``.
    """
    n = hash("__" + namespace[0], user_id, 1)
    if n is None:
        return False
    return namespace[1] <= n < namespace[2]


# --------------------------------------------------------------------------- JS value semantics
#
# GrowthBook conditions are evaluated by JavaScript in the reference SDK, with JS's coercions
# (``"8" > 5`` is true, ``null < 10`` is true, ``value + "" === "10"``...). The helpers below model
# the JSON-representable subset of JS values: None=null, bool, int/float=number, str, list=array,
# Mapping=object.


def _js_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "array"
    if isinstance(v, Mapping):
        return "object"
    return "unknown"


def _js_number_to_string(value: float) -> str:
    """``String(number)`` as ECMAScript's Number::toString formats it."""
    if isinstance(value, int) and abs(value) < 10**21:
        return str(value)
    try:
        x = float(value)
    except OverflowError:
        return "Infinity" if value > 0 else "-Infinity"
    if math.isnan(x):
        return "NaN"
    if x == 0:
        return "0"
    if x < 0:
        return "-" + _js_number_to_string(-x)
    if math.isinf(x):
        return "Infinity"
    mantissa, _, exp = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    padded = (whole + fraction).lstrip("0")
    digits = padded.rstrip("0")
    k = len(digits)
    n = int(exp or "0") - len(fraction) + len(padded)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    m = digits[0] + ("." + digits[1:] if k > 1 else "")
    return m + "e" + ("+" if n > 0 else "-") + str(abs(n - 1))


def _js_to_string(v: Any) -> str:
    """``String(v)`` for a JSON value (``None`` plays JS ``null``)."""
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return _js_number_to_string(v)
    if isinstance(v, list | tuple):
        return ",".join("" if x is None else _js_to_string(x) for x in v)
    return "[object Object]"


_JS_NUMERIC = re.compile(r"^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Infinity)$")


def _js_to_number(v: Any) -> float:
    """``Number(v)`` for a JSON value; ``nan`` where JS gives ``NaN``."""
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, str):
        s = v.strip(" \t\n\r\v\f\u00a0\ufeff\u2028\u2029")
        if s == "":
            return 0.0
        low = s.lower()
        try:
            if low.startswith(("0x", "0o", "0b")) and s[:2] == low[:2]:
                return float(int(s, 0))
        except ValueError:
            return math.nan
        if _JS_NUMERIC.match(s):
            return float(s)
        return math.nan
    if isinstance(v, list | tuple):
        return _js_to_number(_js_to_string(v))
    return math.nan


def _js_truthy(v: Any) -> bool:
    if v is None or v is False:
        return False
    if isinstance(v, int | float) and not isinstance(v, bool):
        return v != 0 and not math.isnan(v)
    if isinstance(v, str):
        return v != ""
    return True


def _utf16_key(s: str) -> bytes:
    # Big-endian UTF-16 bytes order strings by code unit, as JS's relational operators do.
    return s.encode("utf-16-be", "surrogatepass")


def _js_less(a: Any, b: Any) -> bool | None:
    """ECMAScript IsLessThan(a, b): True/False, or None for "undefined" (a NaN was involved)."""
    if isinstance(a, list | tuple | Mapping):
        a = _js_to_string(a)
    if isinstance(b, list | tuple | Mapping):
        b = _js_to_string(b)
    if isinstance(a, str) and isinstance(b, str):
        if a.isascii() and b.isascii():
            return a < b
        return _utf16_key(a) < _utf16_key(b)
    x, y = _js_to_number(a), _js_to_number(b)
    if math.isnan(x) or math.isnan(y):
        return None
    return x < y


def _js_strict_equal(a: Any, b: Any) -> bool:
    """``a === b`` for JSON values: arrays/objects are distinct references, so never equal."""
    ta = _js_type(a)
    if ta != _js_type(b) or ta in ("array", "object", "unknown"):
        return False
    return a == b  # numbers: NaN != NaN, as in JS


def _js_same_value_zero(a: Any, b: Any) -> bool:
    """SameValueZero (``Array.prototype.includes``): like ``===`` but NaN equals NaN."""
    if _js_strict_equal(a, b):
        return True
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def _js_stringify(v: Any) -> str:
    """``JSON.stringify(v)`` (compact), with JS number formatting and JS own-key order."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            return "null"
        return _js_number_to_string(v)
    if isinstance(v, str):
        import json

        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ",".join(_js_stringify(x) for x in v) + "]"
    if isinstance(v, Mapping):
        keys = [str(k) for k in v]
        index_keys = sorted((k for k in keys if _is_array_index(k)), key=int)
        other = [k for k in keys if not _is_array_index(k)]
        items = {str(k): x for k, x in v.items()}
        return (
            "{" + ",".join(_js_stringify(k) + ":" + _js_stringify(items[k]) for k in index_keys + other) + "}"
        )
    return "null"


def _is_array_index(k: str, length: int = 2**32 - 1) -> bool:
    return 0 < len(k) <= 10 and k.isascii() and k.isdigit() and (k == "0" or k[0] != "0") and int(k) < length


# --------------------------------------------------------------------------- versions


_VER_STRIP = re.compile(r"(^v|\+.*$)")
_VER_SPLIT = re.compile(r"[-.]")
_VER_NUM = re.compile(r"^[0-9]+$")


def padded_version_string(value: Any) -> str:
    """Normalise a (semantic) version so that plain string comparison orders versions.

    Numbers become strings, anything else that is not a non-empty string becomes ``"0"``; a
    leading ``v`` and ``+build`` metadata are dropped; the version is split on ``-``/``.``; a
    plain ``MAJOR.MINOR.PATCH`` gets a ``~`` part appended (so it sorts after its pre-releases)
    and every all-digit part is left-padded with spaces to width 5.
    Example: ``"v1.2.3-rc.1+b9"`` -> ``"    1-    2-    3-rc-    1"``.

    Source: ``paddedVersionString`` in ``packages/sdk-js/src/util.ts``.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = _js_number_to_string(value)
    if not value or not isinstance(value, str):
        value = "0"
    parts = _VER_SPLIT.split(_VER_STRIP.sub("", value))
    if len(parts) == 3:
        parts.append("~")
    return "-".join(p.rjust(5, " ") if _VER_NUM.match(p) else p for p in parts)


# --------------------------------------------------------------------------- conditions
#
# Results are tri-state internally, as in growthbook-python 4.x: True, False, or None for
# "undecidable here" (an unknown operator or saved-group type). None never passes: the public
# eval_condition returns ``result is True``, and ``$not`` of None stays None, so an operator this
# engine does not know can never *include* a unit (fail closed).

_CondResult = bool | None
_regex_cache: dict[tuple[str, bool], re.Pattern[str] | None] = {}


def _get_regex(pattern: Any, insensitive: bool) -> re.Pattern[str] | None:
    if not isinstance(pattern, str):
        return None
    key = (pattern, insensitive)
    if key not in _regex_cache:
        try:
            _regex_cache[key] = re.compile(pattern, re.IGNORECASE if insensitive else 0)
        except (re.error, OverflowError, RecursionError):
            _regex_cache[key] = None
        if len(_regex_cache) > 4096:
            _regex_cache.clear()
    return _regex_cache.get(key)


def _get_path(obj: Any, path: str) -> Any:
    """Value at a dot-separated path (JS ``getPath``: own keys of objects; arrays expose their
    indices and ``length``); ``None`` when any segment is missing."""
    current = obj
    for part in path.split("."):
        if isinstance(current, Mapping):
            if part in current:
                current = current[part]
                continue
            return None
        if isinstance(current, list | tuple):
            if part == "length":
                current = len(current)
                continue
            if _is_array_index(part, len(current)):
                current = current[int(part)]
                continue
        return None
    return current


def _is_operator_object(obj: Any) -> bool:
    return isinstance(obj, Mapping) and len(obj) > 0 and all(isinstance(k, str) and k[:1] == "$" for k in obj)


def _not(r: _CondResult) -> _CondResult:
    return None if r is None else not r


def _eval(
    attributes: Any, condition: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    if not isinstance(condition, Mapping):
        return False
    result: _CondResult = True
    for key, value in condition.items():
        if key == "$or":
            r = _eval_or(attributes, value, saved_groups, visited)
        elif key == "$nor":
            r = _not(_eval_or(attributes, value, saved_groups, visited))
        elif key == "$and":
            r = _eval_and(attributes, value, saved_groups, visited)
        elif key == "$not":
            r = _not(_eval(attributes, value, saved_groups, visited))
        elif key == "$savedGroup":
            r = _eval_saved_group_ref(attributes, value, saved_groups, visited)
        elif key == "$savedGroups":
            r = False
        else:
            r = _eval_value(value, _get_path(attributes, key), saved_groups, visited)
        if r is False:
            return False
        if r is None:
            result = None
    return result


def _eval_or(
    attributes: Any, conditions: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    if not isinstance(conditions, list | tuple):
        return False
    if not conditions:
        return True
    result: _CondResult = False
    for c in conditions:
        r = _eval(attributes, c, saved_groups, visited)
        if r is True:
            return True
        if r is None:
            result = None
    return result


def _eval_and(
    attributes: Any, conditions: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    if not isinstance(conditions, list | tuple):
        return False
    result: _CondResult = True
    for c in conditions:
        r = _eval(attributes, c, saved_groups, visited)
        if r is False:
            return False
        if r is None:
            result = None
    return result


def _eval_saved_group_ref(
    attributes: Any, reference: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    """``{"$savedGroup": {"id": ..., "attributeKey"?: ...}}`` (typed saved groups, spec 0.9).

    A ``list`` entry tests ``attributeKey`` (the reference's override, else the entry's) against
    its ``values``; a ``condition`` entry evaluates its condition (cycles resolve to False); an
    unknown type is undecidable (None); anything malformed or missing matches nobody."""
    if not isinstance(reference, Mapping):
        return False
    group_id = reference.get("id")
    if not isinstance(group_id, str) or group_id in visited:
        return False
    if "attributeKey" in reference and not isinstance(reference["attributeKey"], str):
        return False
    entry = saved_groups.get(group_id)
    if not isinstance(entry, Mapping):
        return False
    kind = entry.get("type")
    if kind == "list":
        key = reference.get("attributeKey", entry.get("attributeKey"))
        values = entry.get("values")
        if not isinstance(key, str) or not isinstance(values, list | tuple):
            return False
        return _is_in(_get_path(attributes, key), values)
    if kind == "condition":
        cond = entry.get("condition")
        if not isinstance(cond, Mapping):
            return False
        return _eval(attributes, cond, saved_groups, visited | {group_id})
    return None


def _saved_group_values(saved_groups: Mapping[str, Any], group_id: Any) -> list[Any] | tuple[Any, ...] | None:
    """Values of a legacy (bare array) or typed ``list`` saved group for ``$inGroup``/``$notInGroup``:
    ``[]`` for an id absent from the payload; ``None`` (fail closed) for a malformed entry, a
    ``condition`` entry, or a type this engine does not know."""
    if not isinstance(group_id, str):
        return None
    if group_id not in saved_groups:
        return []
    entry = saved_groups[group_id]
    if isinstance(entry, list | tuple):
        return entry
    if isinstance(entry, Mapping) and entry.get("type") == "list":
        values = entry.get("values")
        if isinstance(values, list | tuple):
            return values
    return None


def _is_in(actual: Any, expected: Sequence[Any], insensitive: bool = False) -> bool:
    """JS ``isIn``: ``expected.includes(actual)``, or a non-empty intersection when ``actual`` is
    an array; with ``insensitive`` strings are compared lower-cased."""
    if insensitive:

        def fold(x: Any) -> Any:
            return x.lower() if isinstance(x, str) else x

        items = actual if isinstance(actual, list | tuple) else (actual,)
        return any(_js_strict_equal(fold(a), fold(e)) for a in items for e in expected)
    if isinstance(actual, list | tuple):
        return any(_js_same_value_zero(a, e) for a in actual for e in expected)
    return any(_js_same_value_zero(actual, e) for e in expected)


def _is_in_all(
    actual: Any,
    expected: Sequence[Any],
    saved_groups: Mapping[str, Any],
    visited: frozenset[str],
    insensitive: bool,
) -> _CondResult:
    if not isinstance(actual, list | tuple):
        return False
    result: _CondResult = True
    for e in expected:
        passed: _CondResult = False
        for a in actual:
            r = _eval_value(e, a, saved_groups, visited, insensitive)
            if r is True:
                passed = True
                break
            if r is None:
                passed = None
        if passed is False:
            return False
        if passed is None:
            result = None
    return result


def _elem_match(
    actual: Any, expected: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    if not isinstance(actual, list | tuple):
        return False
    on_value = _is_operator_object(expected)
    result: _CondResult = False
    for item in actual:
        if not _js_truthy(item):  # JS: `actual[i] && check(actual[i])`
            continue
        r = (
            _eval_value(expected, item, saved_groups, visited)
            if on_value
            else _eval(item, expected, saved_groups, visited)
        )
        if r is True:
            return True
        if r is None:
            result = None
    return result


def _eval_value(
    condition: Any,
    value: Any,
    saved_groups: Mapping[str, Any],
    visited: frozenset[str],
    insensitive: bool = False,
) -> _CondResult:
    """JS ``evalConditionValue``: literal comparison, or every operator of an operator object."""
    if isinstance(condition, str):
        if insensitive:
            return _js_to_string(value).lower() == condition.lower()
        return _js_to_string(value) == condition  # JS: value + "" === condition
    if isinstance(condition, bool):
        return value is not None and _js_truthy(value) == condition
    if isinstance(condition, int | float):
        return _js_to_number(value) == condition  # JS: value * 1 === condition
    if condition is None:
        return value is None
    if not _is_operator_object(condition):
        return _js_stringify(value) == _js_stringify(condition)
    result: _CondResult = True
    for op, expected in condition.items():
        r = _eval_operator(op, value, expected, saved_groups, visited)
        if r is False:
            return False
        if r is None:
            result = None
    return result


def _eval_operator(
    op: str, actual: Any, expected: Any, saved_groups: Mapping[str, Any], visited: frozenset[str]
) -> _CondResult:
    if op == "$eq":
        return _js_strict_equal(actual, expected)
    if op == "$ne":
        return not _js_strict_equal(actual, expected)
    if op == "$lt":
        return _js_less(actual, expected) is True
    if op == "$gt":
        return _js_less(expected, actual) is True
    if op == "$lte":
        return _js_less(expected, actual) is False  # a <= b  <=>  !(b < a), undefined -> false
    if op == "$gte":
        return _js_less(actual, expected) is False
    if op in ("$veq", "$vne", "$vgt", "$vgte", "$vlt", "$vlte"):
        a, e = padded_version_string(actual), padded_version_string(expected)
        return {
            "$veq": a == e,
            "$vne": a != e,
            "$vgt": a > e,
            "$vgte": a >= e,
            "$vlt": a < e,
            "$vlte": a <= e,
        }[op]
    if op == "$exists":
        return actual is not None if _js_truthy(expected) else actual is None
    if op in ("$in", "$nin", "$ini", "$nini"):
        if not isinstance(expected, list | tuple):
            return False
        found = _is_in(actual, expected, insensitive=op in ("$ini", "$nini"))
        return found if op in ("$in", "$ini") else not found
    if op in ("$inGroup", "$notInGroup"):
        entry = saved_groups.get(expected) if isinstance(expected, str) else None
        if isinstance(entry, Mapping) and entry.get("type") not in ("list", "condition"):
            return None  # a saved-group type added after this engine was written
        values = _saved_group_values(saved_groups, expected)
        if values is None:
            return False  # fail closed, for $notInGroup too
        found = _is_in(actual, values)
        return found if op == "$inGroup" else not found
    if op == "$not":
        return _not(_eval_value(expected, actual, saved_groups, visited))
    if op == "$size":
        if not isinstance(actual, list | tuple):
            return False
        return _eval_value(expected, len(actual), saved_groups, visited)
    if op == "$elemMatch":
        return _elem_match(actual, expected, saved_groups, visited)
    if op in ("$all", "$alli"):
        if not isinstance(expected, list | tuple):
            return False
        return _is_in_all(actual, expected, saved_groups, visited, insensitive=op == "$alli")
    if op in ("$regex", "$regexi", "$notRegex", "$notRegexi"):
        rx = _get_regex(expected, insensitive=op.endswith("i"))
        if rx is None:
            return False  # invalid pattern matches nobody, negated or not
        matched = rx.search(_js_to_string(actual)) is not None  # JS RegExp.test coerces to string
        return matched if op in ("$regex", "$regexi") else not matched
    if op == "$type":
        return _js_type(actual) == expected
    if op in ("$or", "$nor", "$and", "$savedGroup"):
        return False  # condition-level keys used on a value never match
    return None  # unknown operator: undecidable, never passes


def eval_condition(
    attributes: Mapping[str, Any], condition: Mapping[str, Any], saved_groups: Mapping[str, Any] | None = None
) -> bool:
    """Evaluate a GrowthBook (MongoDB-like) targeting ``condition`` against ``attributes``.

    Supports every operator of the GrowthBook spec (0.9): ``$eq $ne $lt $lte $gt $gte $in $nin
    $ini $nini $all $alli $elemMatch $size $exists $type $regex $regexi $notRegex $notRegexi $not
    $and $or $nor``, version comparisons ``$veq $vne $vgt $vgte $vlt $vlte``
    (:func:`padded_version_string`), saved groups ``$inGroup``/``$notInGroup`` (legacy
    ``{id: [values]}`` or typed ``{id: {"type": "list", "attributeKey", "values"}}``) and typed
    references ``{"$savedGroup": {"id", "attributeKey"?}}`` (``list`` and ``condition`` entries),
    dotted attribute paths, and array attributes (``$in`` intersects, ``$elemMatch`` scans).

    Comparisons follow the JavaScript SDK's coercions (``{"n": {"$gt": 5}}`` passes for
    ``n = "8"``; a missing attribute is ``null`` and compares like ``0``; a string literal matches
    ``String(value)``). An unknown operator or saved-group type never passes (not even under
    ``$not``), and a malformed condition evaluates to ``False`` instead of raising.

    Args:
        attributes: the unit's attributes (JSON-like: dict/list/str/number/bool/None).
        condition: the condition object; ``{}`` passes everyone.
        saved_groups: saved-group payload keyed by group id (``None`` = no groups).

    Returns:
        ``True`` if the unit is targeted.

    Source: ``evalCondition`` in ``packages/sdk-js/src/mongrule.ts`` and ``growthbook/core.py``.
    """
    try:
        return _eval(attributes, condition, saved_groups or {}, frozenset()) is True
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, RecursionError):
        return False


def compile_condition(
    condition: Mapping[str, Any] | None, saved_groups: Mapping[str, Any] | None = None
) -> Callable[[Mapping[str, Any]], bool]:
    """Return a fast predicate ``attributes -> bool`` equivalent to ``eval_condition(attrs, condition)``.

    Flat conditions of plain string literals on top-level keys (e.g. ``{"subagent": "coder"}``,
    the common routing scope) compile to direct dictionary lookups; anything else falls back to
    :func:`eval_condition`. ``None``/``{}`` compile to "always true".
    """
    if not condition:
        return _always_true
    if all(
        isinstance(k, str) and k[:1] != "$" and "." not in k and isinstance(v, str)
        for k, v in condition.items()
    ):
        pairs = tuple(condition.items())

        def flat(attributes: Mapping[str, Any]) -> bool:
            for k, v in pairs:
                a = attributes.get(k)
                if a is v or a == v and isinstance(a, str):
                    continue
                if isinstance(a, str) or _js_to_string(a) != v:
                    return False
            return True

        return flat
    frozen_condition = condition
    groups = saved_groups or {}

    def general(attributes: Mapping[str, Any]) -> bool:
        return eval_condition(attributes, frozen_condition, groups)

    return general


def _always_true(attributes: Mapping[str, Any]) -> bool:
    return True
