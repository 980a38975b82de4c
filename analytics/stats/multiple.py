"""Multiple-comparison corrections of p-values (metrics x variants).

* Holm-Bonferroni step-down (Holm 1979, "A simple sequentially rejective multiple test
  procedure"): controls the family-wise error rate.
* Benjamini-Hochberg step-up (Benjamini & Hochberg 1995, JRSS-B): controls the false
  discovery rate under independence / positive dependence.
* Bonferroni.

Results equal ``statsmodels.stats.multitest.multipletests(p, method="holm"|"fdr_bh"|
"bonferroni")[1]``.  ``None``/NaN entries (comparisons that could not be computed) are
passed through as None and excluded from the family size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["adjust_p_values", "holm", "benjamini_hochberg", "bonferroni"]


def _holm(p: np.ndarray) -> np.ndarray:
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def _bh(p: np.ndarray) -> np.ndarray:
    m = p.size
    order = np.argsort(p, kind="stable")[::-1]
    ranks = np.arange(m, 0, -1)
    adj = np.minimum.accumulate(p[order] * m / ranks)
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def _bonf(p: np.ndarray) -> np.ndarray:
    return np.minimum(p * p.size, 1.0)


_METHODS = {"holm": _holm, "bh": _bh, "fdr_bh": _bh, "benjamini-hochberg": _bh, "bonferroni": _bonf}


def adjust_p_values(p_values: Sequence[float | None], method: str = "holm") -> list[float | None]:
    """Adjusted p-values, same order/length as the input.

    Args:
        p_values: raw p-values in [0, 1]; None or NaN entries are skipped (returned
            as None) and do not count towards the family size.
        method: "holm", "bh" (alias "fdr_bh", "benjamini-hochberg") or "bonferroni".

    Raises:
        ValueError: unknown method, or a p-value outside [0, 1] / infinite.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    idx, vals = [], []
    for i, p in enumerate(p_values):
        if p is None or (isinstance(p, float) and math.isnan(p)):
            continue
        f = float(p)
        if not (0.0 <= f <= 1.0):
            raise ValueError(f"p-values must be in [0, 1], got {p!r} at index {i}")
        idx.append(i)
        vals.append(f)
    out: list[float | None] = [None] * len(p_values)
    if vals:
        adj = _METHODS[method](np.asarray(vals, dtype=float))
        for i, a in zip(idx, adj.tolist(), strict=True):
            out[i] = a
    return out


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (see :func:`adjust_p_values`)."""
    return adjust_p_values(p_values, "holm")


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (q-values) (see :func:`adjust_p_values`)."""
    return adjust_p_values(p_values, "bh")


def bonferroni(p_values: Sequence[float | None]) -> list[float | None]:
    """Bonferroni adjusted p-values (see :func:`adjust_p_values`)."""
    return adjust_p_values(p_values, "bonferroni")
