"""Coverage of the quantile metrics' relative-lift interval, against the truth and a cluster bootstrap.

Run:  .venv/bin/python bench/bench_quantile_coverage.py [--runs 1000] [--units 1000] [--q 0.95]

Each run draws two arms of ``units`` units; a unit makes ``1 + Poisson(4)`` calls with latency
``exp(mu + u_i + e_ij)``, ``u_i ~ N(0, 0.5²)`` shared by the unit's calls, ``e_ij ~ N(0, 0.6²)``.
The call-level marginal is lognormal with σ² = 0.61 (call counts do not depend on ``u_i``), so the
true quantile is ``exp(mu + z_q·√0.61)`` and the treatment (mu + log 1.1) has a true relative
lift of exactly +10 % at every q. Prints:

* coverage of the 95 % relative-lift interval (:func:`analytics.stats.compare` on
  :func:`analytics.stats.quantile_statistic`) — the target is 93–97 %;
* the same with calls treated as independent (no clustering), to show why clustering matters;
* the ratio of our standard error to a cluster-bootstrap one (units resampled with replacement,
  ``--boot`` resamples on the first ``--boot-runs`` runs).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.stats import compare, quantile_statistic  # noqa: E402

SIGMA_UNIT, SIGMA_CALL, MEAN_CALLS = 0.5, 0.6, 4.0


def draw_arm(rng: np.random.Generator, units: int, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """``(latencies in ms, unit ids)`` of one arm (see the module docstring)."""
    calls = 1 + rng.poisson(MEAN_CALLS, units)
    ids = np.repeat(np.arange(units), calls)
    effect = np.repeat(rng.normal(0.0, SIGMA_UNIT, units), calls)
    return np.exp(mu + effect + rng.normal(0.0, SIGMA_CALL, calls.sum())), ids


def cluster_bootstrap_se(values, ids, q: float, resamples: int, rng: np.random.Generator) -> float:
    """Standard error of the ``q``-quantile with units resampled with replacement."""
    order = np.argsort(ids, kind="stable")
    values, ids = values[order], ids[order]
    starts = np.searchsorted(ids, np.arange(ids.max() + 1))
    ends = np.append(starts[1:], ids.size)
    out = np.empty(resamples)
    for b in range(resamples):
        pick = rng.integers(0, starts.size, starts.size)
        out[b] = np.quantile(np.concatenate([values[starts[i] : ends[i]] for i in pick]), q)
    return float(out.std(ddof=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--q", type=float, default=0.95)
    parser.add_argument("--boot", type=int, default=400)
    parser.add_argument("--boot-runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20260)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    mu_c, mu_t = 5.0, 5.0 + math.log(1.1)
    true_lift = 0.1
    covered = covered_naive = 0
    ratios = []
    for run in range(args.runs):
        xc, ic = draw_arm(rng, args.units, mu_c)
        xt, it = draw_arm(rng, args.units, mu_t)
        result = compare(quantile_statistic(xc, ic, q=args.q), quantile_statistic(xt, it, q=args.q))
        low, high = result.relative_ci
        covered += low <= true_lift <= high
        naive = compare(quantile_statistic(xc, q=args.q), quantile_statistic(xt, q=args.q))
        covered_naive += naive.relative_ci[0] <= true_lift <= naive.relative_ci[1]
        if run < args.boot_runs:
            ours = quantile_statistic(xc, ic, q=args.q).std_error
            ratios.append(ours / cluster_bootstrap_se(xc, ic, args.q, args.boot, rng))
    cov, cov_naive = covered / args.runs, covered_naive / args.runs
    half = 1.96 * math.sqrt(0.95 * 0.05 / args.runs)
    true_q = math.exp(mu_c + sps.norm.ppf(args.q) * math.sqrt(SIGMA_UNIT**2 + SIGMA_CALL**2))
    print(f"q={args.q} runs={args.runs} units/arm={args.units} true control quantile={true_q:.1f} ms")
    print(f"coverage of the 95% relative-lift CI, clustered: {cov:.3f} (±{half:.3f} Monte Carlo)")
    print(f"coverage with calls treated as independent:     {cov_naive:.3f}")
    if ratios:
        print(
            f"SE / cluster-bootstrap SE over {len(ratios)} runs ({args.boot} resamples): "
            f"mean {np.mean(ratios):.3f}, min {np.min(ratios):.3f}, max {np.max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
