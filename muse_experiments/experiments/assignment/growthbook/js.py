"""JavaScript value semantics for GrowthBook conditions.

GrowthBook conditions are evaluated by JavaScript in the reference SDK, with JS's coercions
(``"8" > 5`` is true, ``null < 10`` is true, ``value + "" === "10"``...). These functions model
the JSON-representable subset of JS values: None=null, bool, int/float=number, str, list=array,
Mapping=object.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any


def js_type(v: Any) -> str:
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


def js_number_to_string(value: float) -> str:
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
        return "-" + js_number_to_string(-x)
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


def js_to_string(v: Any) -> str:
    """``String(v)`` for a JSON value (``None`` plays JS ``null``)."""
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return js_number_to_string(v)
    if isinstance(v, list | tuple):
        return ",".join("" if x is None else js_to_string(x) for x in v)
    return "[object Object]"


_JS_NUMERIC = re.compile(r"^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Infinity)$")


def js_to_number(v: Any) -> float:
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
        return js_to_number(js_to_string(v))
    return math.nan


def js_truthy(v: Any) -> bool:
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


def js_less(a: Any, b: Any) -> bool | None:
    """ECMAScript IsLessThan(a, b): True/False, or None for "undefined" (a NaN was involved)."""
    if isinstance(a, list | tuple | Mapping):
        a = js_to_string(a)
    if isinstance(b, list | tuple | Mapping):
        b = js_to_string(b)
    if isinstance(a, str) and isinstance(b, str):
        if a.isascii() and b.isascii():
            return a < b
        return _utf16_key(a) < _utf16_key(b)
    x, y = js_to_number(a), js_to_number(b)
    if math.isnan(x) or math.isnan(y):
        return None
    return x < y


def js_strict_equal(a: Any, b: Any) -> bool:
    """``a === b`` for JSON values: arrays/objects are distinct references, so never equal."""
    ta = js_type(a)
    if ta != js_type(b) or ta in ("array", "object", "unknown"):
        return False
    return a == b  # numbers: NaN != NaN, as in JS


def js_same_value_zero(a: Any, b: Any) -> bool:
    """SameValueZero (``Array.prototype.includes``): like ``===`` but NaN equals NaN."""
    if js_strict_equal(a, b):
        return True
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def js_stringify(v: Any) -> str:
    """``JSON.stringify(v)`` (compact), with JS number formatting and JS own-key order."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            return "null"
        return js_number_to_string(v)
    if isinstance(v, str):
        import json

        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ",".join(js_stringify(x) for x in v) + "]"
    if isinstance(v, Mapping):
        keys = [str(k) for k in v]
        index_keys = sorted((k for k in keys if is_array_index(k)), key=int)
        other = [k for k in keys if not is_array_index(k)]
        items = {str(k): x for k, x in v.items()}
        return (
            "{" + ",".join(js_stringify(k) + ":" + js_stringify(items[k]) for k in index_keys + other) + "}"
        )
    return "null"


def is_array_index(k: str, length: int = 2**32 - 1) -> bool:
    return 0 < len(k) <= 10 and k.isascii() and k.isdigit() and (k == "0" or k[0] != "0") and int(k) < length
