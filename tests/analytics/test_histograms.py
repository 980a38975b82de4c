"""Log-spaced histograms of the call rollup (analytics/histograms.py), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from analytics.histograms import LATENCY_MS, LogBins, merge


def test_it_puts_values_in_the_bin_whose_edges_surround_them():
    grid = LogBins(1.0, 1000.0, 1)  # edges 1, 10, 100, 1000
    assert grid.edges == [1.0, 10.0, 100.0, 1000.0]
    assert [grid.index(v) for v in (None, 0.0, 0.5, 1.0, 9.99, 10.0, 999.0, 1000.0, 1e9)] == [
        0,
        0,
        0,
        1,
        1,
        2,
        3,
        4,
        4,
    ]
    assert grid.size == 5 and grid.labels() == ["< 1.0", "1.0", "10.0", "100.0", "≥ 1000.0"]


def test_quantiles_are_within_one_bin_of_numpy_on_lognormal_latencies():
    rng = np.random.default_rng(7)
    values = rng.lognormal(mean=6.5, sigma=0.6, size=20_000)  # ~ 665 ms median
    counts = [0] * LATENCY_MS.size
    for v in values:
        counts[LATENCY_MS.index(float(v))] += 1
    width = 10 ** (1 / LATENCY_MS.per_decade)
    for q in (0.5, 0.95):
        exact = float(np.quantile(values, q))
        assert exact / width <= LATENCY_MS.quantile(counts, q) <= exact * width


def test_empty_histograms_have_no_quantile_and_merge_adds_bins():
    assert LATENCY_MS.quantile([0] * LATENCY_MS.size, 0.5) is None
    assert merge([[1, 2], [0, 3, 4]], 3) == [1, 5, 4]
    with pytest.raises(ValueError):
        LogBins(0.0, 1.0, 4)
