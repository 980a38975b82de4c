"""GrowthBook's hashing, bucket ranges, variation choice and namespaces (``packages/sdk-js/src/util.ts``
and ``growthbook/core.py``); how non-ASCII ids hash: see the package's docstring."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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
