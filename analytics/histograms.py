"""Log-spaced histograms for pre-aggregated distributions (no Django import).

The call rollup (:class:`analytics.models.CallRollup`) keeps, per hour × endpoint × variant, the
count of calls in each bin of a fixed log-spaced grid, so pages can draw distributions and read
percentiles without touching raw call records. Bin ``0`` holds values below ``lo`` (including 0),
bin ``i`` (1 ≤ i ≤ n) holds ``[edges[i-1], edges[i])`` and bin ``n + 1`` holds values ≥ ``hi``.

Percentiles interpolate geometrically inside a bin, so their relative error is at most one bin
width (``10 ** (1 / per_decade)``, e.g. ±15 % at 8 bins per decade) — good enough for a p95 on a
health page; the stats engine never reads these.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LogBins:
    """A log-spaced grid from ``lo`` to ``hi`` (both > 0) with ``per_decade`` bins per power of ten."""

    lo: float
    hi: float
    per_decade: int

    def __post_init__(self) -> None:
        if not (0 < self.lo < self.hi) or self.per_decade < 1:
            raise ValueError("LogBins needs 0 < lo < hi and per_decade >= 1")

    @property
    def edges(self) -> list[float]:
        """Inner edges ``lo … hi`` (length n + 1)."""
        n = round(math.log10(self.hi / self.lo) * self.per_decade)
        return [self.lo * 10 ** (i / self.per_decade) for i in range(n + 1)]

    @property
    def size(self) -> int:
        """Number of bins including underflow and overflow."""
        return len(self.edges) + 1

    def index(self, value: float | None) -> int:
        """The bin of one value (None and values below ``lo`` → 0)."""
        if value is None or value < self.lo:
            return 0
        return min(int(math.log10(value / self.lo) * self.per_decade + 1e-9) + 1, self.size - 1)

    def labels(self, fmt: Callable[[float], str] = str) -> list[str]:
        """Labels of every bin by its lower edge: ``< lo``, ``a`` (for ``[a, next)``), ``≥ hi``;
        each edge through ``fmt``."""
        e = self.edges
        return [f"< {fmt(e[0])}", *(fmt(a) for a in e[:-1]), f"≥ {fmt(e[-1])}"]

    def range_labels(self, fmt: Callable[[float], str] = str) -> list[str]:
        """Labels of every bin by its range: ``< lo``, ``a–b`` (for ``[a, b)``), ``≥ hi``; each
        edge through ``fmt``. A histogram's bars read as ranges, not as points on a curve."""
        e = self.edges
        return [
            f"< {fmt(e[0])}",
            *(f"{fmt(a)}–{fmt(b)}" for a, b in itertools.pairwise(e)),
            f"≥ {fmt(e[-1])}",
        ]

    def quantile(self, counts: Sequence[int], q: float) -> float | None:
        """The ``q`` quantile (0 < q < 1) of a histogram on this grid; None when it is empty.

        Inside a bin the value is interpolated geometrically; the underflow bin reports ``lo`` as
        an upper bound and the overflow bin ``hi`` as a lower bound.
        """
        total = sum(counts)
        if total <= 0:
            return None
        target, seen = q * total, 0.0
        e = self.edges
        for i, c in enumerate(counts):
            if c and seen + c >= target:
                if i == 0:
                    return e[0]
                if i > len(e) - 1:
                    return e[-1]
                frac = (target - seen) / c
                return e[i - 1] * (e[i] / e[i - 1]) ** frac
            seen += c
        return e[-1]


def merge(histograms: Iterable[Sequence[int]], size: int) -> list[int]:
    """Element-wise sum of histograms on one grid (missing tails count as 0)."""
    out = [0] * size
    for h in histograms:
        for i, c in enumerate(h[:size]):
            out[i] += c
    return out


#: Grids of the call rollup: latency in ms (1 ms – 10 min), cost in USD per call (1e-7 – 10 USD),
#: tokens per call (input + output, where output already includes reasoning; 1 – 10 M).
LATENCY_MS = LogBins(1.0, 1_000_000.0, 8)
COST_USD = LogBins(1e-7, 10.0, 4)
TOKENS = LogBins(1.0, 10_000_000.0, 4)
