"""The vectorised twin of :func:`~muse_experiments.experiments.assignment.engine.bucket`: the
hash-only assignment of many unit ids at once with numpy (uint32 FNV-1a over UTF-16 code units,
one pass per character column), identical to the scalar path id for id."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from muse_experiments.experiments.assignment.growthbook.hashing import FNV_OFFSET_BASIS, FNV_PRIME
from muse_experiments.experiments.assignment.specs import ExperimentSpec


def _code_unit_matrix(unit_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode ids as UTF-16 code units: a zero-padded, column-major ``(max_len, n)`` uint16 matrix
    (row ``j`` = the ``j``-th code unit of every id) and the ``(n,)`` code-unit lengths."""
    n = len(unit_ids)
    lengths = np.fromiter(map(len, unit_ids), dtype=np.int64, count=n)
    codes = np.frombuffer("".join(unit_ids).encode("utf-16-le", "surrogatepass"), dtype="<u2")
    if codes.size != int(lengths.sum()):
        # Some ids hold characters above U+FFFF: each is two code units (a surrogate pair), as in JS.
        lengths = np.fromiter(
            (len(u.encode("utf-16-le", "surrogatepass")) // 2 for u in unit_ids), dtype=np.int64, count=n
        )
    width = int(lengths.max()) if n else 0
    mat = np.zeros((width, n), dtype=np.uint16)
    if n and width:
        if int(lengths.min()) == width:
            mat[:] = codes.reshape(n, width).T
        else:
            starts = np.cumsum(lengths) - lengths
            rows = np.repeat(np.arange(n), lengths)
            cols = np.arange(codes.size) - np.repeat(starts, lengths)
            mat[cols, rows] = codes
    return mat, lengths


def _fnv_columns(h: np.ndarray, mat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Feed each id's first ``lengths[i]`` code units (column ``i`` of ``mat``) into the uint32
    FNV-1a state ``h`` (modified in place and returned)."""
    prime = np.uint32(FNV_PRIME)
    if mat.shape[0] == 0:
        return h
    min_len = int(lengths.min())
    for j in range(min_len):
        h ^= mat[j]
        h *= prime
    for j in range(min_len, mat.shape[0]):
        hn = (h ^ mat[j]) * prime
        np.copyto(h, hn, where=lengths > j)
    return h


def _fnv_decimal(n: np.ndarray) -> np.ndarray:
    """Vectorised ``fnv1a32(str(n))`` for a uint32 array ``n`` (decimal digits, no padding)."""
    prime = np.uint32(FNV_PRIME)
    digits = np.empty((10, n.size), dtype=np.uint32)  # digits[p] = (n // 10**p) % 10 + ord("0")
    q = n.copy()
    for p in range(10):
        q10 = q // np.uint32(10)
        digits[p] = q - q10 * np.uint32(10) + np.uint32(48)
        q = q10
    h = np.full(n.shape, FNV_OFFSET_BASIS, dtype=np.uint32)
    low = int(n.min()) if n.size else 0
    for p in range(9, -1, -1):
        hn = (h ^ digits[p]) * prime
        if p == 0 or low >= 10**p:
            h = hn
        else:
            np.copyto(h, hn, where=n >= np.uint32(10**p))
    return h


def _const_fnv(h: np.ndarray, s: str) -> np.ndarray:
    prime = np.uint32(FNV_PRIME)
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= np.uint32(data[i] | (data[i + 1] << 8))
        h *= prime
    return h


def assign_many(experiment: ExperimentSpec, unit_ids: Sequence[str]) -> np.ndarray:
    """Vectorised :func:`bucket` for many unit ids.

    Args:
        experiment: the experiment (its layer, coverage and weights are applied).
        unit_ids: sequence of ``N`` id strings (session or user ids, as the experiment's
            ``unit_type`` says).

    Returns:
        ``int64`` array of shape ``(N,)``: the variant index per id, ``-1`` = not in the
        experiment (outside the layer slice or coverage, or empty id). Identical to
        ``[bucket(experiment, u) for u in unit_ids]``; targeting, forced pins, sticky entries and
        the holdout are not applied. Hashes are computed over UTF-16 code units exactly like the
        scalar path (FNV-1a with uint32 arithmetic, one numpy pass per character column).
    """
    cps, lengths = _code_unit_matrix(unit_ids)
    n = len(lengths)
    result = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return result
    eligible = lengths > 0
    with np.errstate(over="ignore"):
        layer = experiment.layer
        if layer is not None and layer.hash_version == 2:
            h1 = _fnv_columns(np.full(n, layer._seed_state, dtype=np.uint32), cps, lengths)  # type: ignore[attr-defined]
            ln = (_fnv_decimal(h1) % np.uint32(10000)).astype(np.float64) / 10000
            eligible &= (layer.start <= ln) & (ln < layer.end)
        elif layer is not None:
            h1 = _fnv_columns(np.full(n, FNV_OFFSET_BASIS, dtype=np.uint32), cps, lengths)
            h1 = _const_fnv(h1, layer._suffix)  # type: ignore[attr-defined]
            ln = (h1 % np.uint32(1000)).astype(np.float64) / 1000
            eligible &= (experiment.layer.start <= ln) & (ln < experiment.layer.end)
        h = _fnv_columns(np.full(n, experiment._seed_state, dtype=np.uint32), cps, lengths)  # type: ignore[attr-defined]
        h2 = _fnv_decimal(h)
    bucket_values = (h2 % np.uint32(10000)).astype(np.float64) / 10000
    for i, (a, b) in enumerate(experiment._ranges):  # type: ignore[attr-defined]
        hit = eligible & (result == -1) & (a <= bucket_values) & (bucket_values < b)
        result[hit] = i
    return result
