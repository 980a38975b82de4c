"""GrowthBook targeting conditions (``packages/sdk-js/src/mongrule.ts`` and the ``evalCondition``
family of ``growthbook/core.py``), and the padded version strings their ``$v…`` operators compare."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from muse_experiments.experiments.assignment.growthbook.js import (
    is_array_index,
    js_less,
    js_number_to_string,
    js_same_value_zero,
    js_strict_equal,
    js_stringify,
    js_to_number,
    js_to_string,
    js_truthy,
    js_type,
)

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
        value = js_number_to_string(value)
    if not value or not isinstance(value, str):
        value = "0"
    parts = _VER_SPLIT.split(_VER_STRIP.sub("", value))
    if len(parts) == 3:
        parts.append("~")
    return "-".join(p.rjust(5, " ") if _VER_NUM.match(p) else p for p in parts)


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
            if is_array_index(part, len(current)):
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
        return any(js_strict_equal(fold(a), fold(e)) for a in items for e in expected)
    if isinstance(actual, list | tuple):
        return any(js_same_value_zero(a, e) for a in actual for e in expected)
    return any(js_same_value_zero(actual, e) for e in expected)


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
        if not js_truthy(item):  # JS: `actual[i] && check(actual[i])`
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
            return js_to_string(value).lower() == condition.lower()
        return js_to_string(value) == condition  # JS: value + "" === condition
    if isinstance(condition, bool):
        return value is not None and js_truthy(value) == condition
    if isinstance(condition, int | float):
        return js_to_number(value) == condition  # JS: value * 1 === condition
    if condition is None:
        return value is None
    if not _is_operator_object(condition):
        return js_stringify(value) == js_stringify(condition)
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
        return js_strict_equal(actual, expected)
    if op == "$ne":
        return not js_strict_equal(actual, expected)
    if op == "$lt":
        return js_less(actual, expected) is True
    if op == "$gt":
        return js_less(expected, actual) is True
    if op == "$lte":
        return js_less(expected, actual) is False  # a <= b  <=>  !(b < a), undefined -> false
    if op == "$gte":
        return js_less(actual, expected) is False
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
        return actual is not None if js_truthy(expected) else actual is None
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
        matched = rx.search(js_to_string(actual)) is not None  # JS RegExp.test coerces to string
        return matched if op in ("$regex", "$regexi") else not matched
    if op == "$type":
        return js_type(actual) == expected
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
                if isinstance(a, str) or js_to_string(a) != v:
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
