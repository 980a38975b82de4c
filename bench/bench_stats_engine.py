"""Throughput benchmark of the statistics engine (comparisons per second).

Run:  .venv/bin/python bench/bench_stats_engine.py [--k 200000] [--scalar 20000]

Times, on synthetic sufficient statistics (seeded):
  * scalar ``compare()`` for means (Welch) and proportions (z-test),
  * vectorised ``compare_many()`` for k metric x variant comparisons at once,
  * ``compare_sequential`` and ``compare_bayesian`` (scalar).
Comparison with GrowthBook gbstats is a separate task (gbstats is deliberately not
installed in this venv); this script only prints our own figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.stats import (  # noqa: E402
    MeanStatistic,
    ProportionStatistic,
    compare,
    compare_bayesian,
    compare_many,
    compare_sequential,
)


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _report(name: str, count: int, seconds: float) -> None:
    print(
        f"{name:<42s} {count:>9d} comparisons  {seconds * 1e3:9.2f} ms  "
        f"{count / seconds:>13,.0f} cmp/s  {seconds / count * 1e6:8.3f} us/cmp"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=200_000, help="comparisons for the vectorised path")
    ap.add_argument("--scalar", type=int, default=20_000, help="comparisons for the scalar path")
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    k = args.k
    n_c = rng.integers(100, 100_000, k).astype(float)
    n_t = rng.integers(100, 100_000, k).astype(float)
    mu_c, mu_t = rng.uniform(1, 100, k), rng.uniform(1, 100, k)
    sd = rng.uniform(1, 50, k)
    s_c, s_t = mu_c * n_c, mu_t * n_t
    ss_c = (sd**2) * (n_c - 1) + s_c**2 / n_c
    ss_t = (sd**2) * (n_t - 1) + s_t**2 / n_t
    x_c = np.floor(n_c * rng.uniform(0.01, 0.5, k))
    x_t = np.floor(n_t * rng.uniform(0.01, 0.5, k))

    m = args.scalar
    means = [
        (MeanStatistic(int(n_c[i]), s_c[i], ss_c[i]), MeanStatistic(int(n_t[i]), s_t[i], ss_t[i]))
        for i in range(m)
    ]
    props = [
        (ProportionStatistic(int(n_c[i]), x_c[i]), ProportionStatistic(int(n_t[i]), x_t[i])) for i in range(m)
    ]

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    _report("compare() scalar, mean (Welch t)", m, _best(lambda: [compare(a, b) for a, b in means]))
    _report("compare() scalar, proportion (z)", m, _best(lambda: [compare(a, b) for a, b in props]))
    _report(
        "compare_sequential() scalar, mean", m, _best(lambda: [compare_sequential(a, b) for a, b in means])
    )
    _report("compare_bayesian() scalar, mean", m, _best(lambda: [compare_bayesian(a, b) for a, b in means]))
    _report(
        "compare_many() vectorised, mean",
        k,
        _best(
            lambda: compare_many(
                control_n=n_c,
                control_sum=s_c,
                control_sum_squares=ss_c,
                treatment_n=n_t,
                treatment_sum=s_t,
                treatment_sum_squares=ss_t,
            )
        ),
    )
    _report(
        "compare_many() vectorised, proportion",
        k,
        _best(
            lambda: compare_many(
                kind="proportion", control_n=n_c, control_sum=x_c, treatment_n=n_t, treatment_sum=x_t
            )
        ),
    )
    small = 1000
    _report(
        "compare_many() vectorised, mean, k=1000",
        small,
        _best(
            lambda: compare_many(
                control_n=n_c[:small],
                control_sum=s_c[:small],
                control_sum_squares=ss_c[:small],
                treatment_n=n_t[:small],
                treatment_sum=s_t[:small],
                treatment_sum_squares=ss_t[:small],
            ),
            repeat=20,
        ),
    )


if __name__ == "__main__":
    main()
