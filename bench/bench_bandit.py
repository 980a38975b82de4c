"""Bandit simulation through the real assignment engine and the real bandit statistics.

Three arms with success rates 0.30 (control), 0.32 and 0.35. Each run: units arrive in periods of
``--units`` new units; a share of earlier units come back (``--return-share``) and must keep their
arm through the sticky map the router passes to the engine (``engine.route(..., sticky=...)``).
After each period the update of :func:`analytics.stats.bandit.bandit_decide` runs on every unit
seen so far: equal weights during the exploration periods, then Thompson weights with the floor;
each new set of weights is a new :class:`ExperimentSpec` phase with the same seed, as
``services.variants.phase_open`` does. The run stops when an arm's P(best) reaches the threshold
(or after ``--max-periods``); the reported lift of every treatment is
:func:`analytics.stats.bandit.stratified_lift` over the periods of first exposure.

Prints: how often the best arm got the most traffic and was declared best, how often each
reported 95 % interval covered the true lift (with a 95 % Wilson interval of that rate), and the
regret (expected successes lost) against always serving the best arm, beside an equal split of
the same units.

    .venv/bin/python bench/bench_bandit.py --runs 100
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analytics.stats.bandit import bandit_decide, rounded_weights, stratified_lift  # noqa: E402
from analytics.stats.statistics import ProportionStatistic  # noqa: E402
from muse_experiments.experiments.assignment.engine import route  # noqa: E402
from muse_experiments.experiments.assignment.specs import (  # noqa: E402
    ConfigSnapshot,
    ExperimentSpec,
    VariantSpec,
)

RATES = (0.30, 0.32, 0.35)
KEYS = ("control", "b", "c")


@dataclass
class Config:
    rates: tuple[float, ...] = RATES
    units_per_period: int = 300
    explore_periods: int = 2
    max_periods: int = 80
    min_weight: float = 0.01
    threshold: float = 0.95
    return_share: float = 0.2
    alpha: float = 0.05


@dataclass
class RunResult:
    declared: int | None
    traffic: list[int]
    periods: int
    covered: dict[str, bool]
    lifts: dict[str, float]
    regret: float
    regret_equal: float
    weights: list[tuple[float, ...]] = field(default_factory=list)
    sticky_kept: int = 0


def _spec(seed: str, phase: int, weights: tuple[float, ...]) -> ConfigSnapshot:
    variants = tuple(
        VariantSpec(key=k, weight=w, endpoint_id=f"model-{k}", is_control=k == "control")
        for k, w in zip(KEYS, weights, strict=True)
    )
    exp = ExperimentSpec(
        id=1, key="bandit-sim", seed=seed, phase=phase, unit_type="session", variants=variants
    )
    return ConfigSnapshot(version=phase, experiments=(exp,))


def simulate(run: int, cfg: Config) -> RunResult:
    """One seeded run (``run`` seeds the outcomes, the hash seed and the Monte Carlo)."""
    rng = np.random.default_rng(10_000 + run)
    k = len(cfg.rates)
    seed = f"bandit-sim-{run}"
    weights = tuple(1.0 / k for _ in range(k))
    weights = rounded_weights(weights)
    history = [weights]
    phase = 1
    arm_of: dict[str, int] = {}  # unit -> arm (the durable exposure)
    first_phase: dict[str, int] = {}
    # per period of first exposure: units and successes per arm
    period_n: list[list[int]] = []
    period_s: list[list[int]] = []
    sticky_kept = 0
    declared = None
    expected_lost = 0.0
    best_rate = max(cfg.rates)
    next_unit = 0
    for period in range(cfg.max_periods):
        snapshot = _spec(seed, phase, weights)
        n_row, s_row = [0] * k, [0] * k
        returning = []
        if arm_of and cfg.return_share > 0:
            count = int(cfg.units_per_period * cfg.return_share)
            pool = list(arm_of)
            returning = [pool[i] for i in rng.integers(0, len(pool), size=count)]
        for unit in returning:  # must keep their arm whatever the weights now
            sticky = {(1, phase): KEYS[arm_of[unit]]}
            d = route(snapshot, session_id=unit, user_id="", sticky=sticky)
            if d.variant_index != arm_of[unit]:
                raise AssertionError(f"unit {unit} changed arm when weights changed")
            sticky_kept += 1
        for _ in range(cfg.units_per_period):
            unit = f"r{run}-u{next_unit}"
            next_unit += 1
            d = route(snapshot, session_id=unit, user_id="")
            arm = d.variant_index
            arm_of[unit], first_phase[unit] = arm, phase
            success = rng.random() < cfg.rates[arm]
            n_row[arm] += 1
            s_row[arm] += int(success)
            expected_lost += best_rate - cfg.rates[arm]
        period_n.append(n_row)
        period_s.append(s_row)
        totals = [
            ProportionStatistic(sum(r[i] for r in period_n), sum(r[i] for r in period_s)) for i in range(k)
        ]
        decision = bandit_decide(
            totals,
            exploring=period + 1 < cfg.explore_periods,
            min_weight=cfg.min_weight,
            stop_when_probability_best=cfg.threshold,
            seed=run * 1000 + period,
        )
        if decision.winner is not None:
            declared = decision.winner
            break
        new = rounded_weights(decision.weights)
        if new != weights:
            weights = new
            phase += 1
            history.append(weights)
    periods = len(period_n)
    units = [sum(r[i] for r in period_n) for i in range(k)]
    per_period_units = [sum(r) for r in period_n]
    covered, lifts = {}, {}
    for t in range(1, k):
        lift = stratified_lift(
            [ProportionStatistic(period_n[p][0], period_s[p][0]) for p in range(periods)],
            [ProportionStatistic(period_n[p][t], period_s[p][t]) for p in range(periods)],
            per_period_units,
            alpha=cfg.alpha,
        )
        true = cfg.rates[t] - cfg.rates[0]
        lifts[KEYS[t]] = lift.absolute_lift if lift else math.nan
        covered[KEYS[t]] = bool(lift and lift.absolute_ci[0] <= true <= lift.absolute_ci[1])
    total_units = sum(units)
    regret_equal = total_units * (best_rate - sum(cfg.rates) / k)
    return RunResult(
        declared, units, periods, covered, lifts, expected_lost, regret_equal, history, sticky_kept
    )


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial rate."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def summarise(results: list[RunResult], cfg: Config) -> dict:
    """Rates over runs: declared best, most traffic to best, coverage per treatment, regret."""
    best = int(np.argmax(cfg.rates))
    n = len(results)
    declared_best = sum(r.declared == best for r in results)
    most_traffic = sum(int(np.argmax(r.traffic)) == best for r in results)
    both = sum(r.declared == best and int(np.argmax(r.traffic)) == best for r in results)
    top_weight = sum(int(np.argmax(r.weights[-1])) == best for r in results)
    coverage = {key: sum(r.covered[key] for r in results) for key in KEYS[1:]}
    return {
        "runs": n,
        "declared_best": declared_best,
        "declared_any": sum(r.declared is not None for r in results),
        "most_traffic_to_best": most_traffic,
        "best_and_most_traffic": both,
        "highest_final_weight": top_weight,
        "coverage": coverage,
        "coverage_all": sum(coverage.values()) / (n * (len(cfg.rates) - 1)),
        "mean_units": float(np.mean([sum(r.traffic) for r in results])),
        "mean_periods": float(np.mean([r.periods for r in results])),
        "regret": float(np.mean([r.regret for r in results])),
        "regret_equal": float(np.mean([r.regret_equal for r in results])),
        "sticky_kept": sum(r.sticky_kept for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--units", type=int, default=Config.units_per_period)
    parser.add_argument("--max-periods", type=int, default=Config.max_periods)
    parser.add_argument("--min-weight", type=float, default=Config.min_weight)
    parser.add_argument("--threshold", type=float, default=Config.threshold)
    parser.add_argument("--return-share", type=float, default=Config.return_share)
    parser.add_argument("--explore-periods", type=int, default=Config.explore_periods)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="runs use seeds first-seed, first-seed+1, …"
    )
    args = parser.parse_args()
    cfg = Config(
        units_per_period=args.units,
        max_periods=args.max_periods,
        min_weight=args.min_weight,
        threshold=args.threshold,
        return_share=args.return_share,
        explore_periods=args.explore_periods,
    )
    started = time.perf_counter()
    results = [simulate(run, cfg) for run in range(args.first_seed, args.first_seed + args.runs)]
    s = summarise(results, cfg)
    n = s["runs"]
    print(
        f"arms {dict(zip(KEYS, cfg.rates, strict=True))}, {cfg.units_per_period} new units/period, "
        f"explore {cfg.explore_periods} periods, floor {cfg.min_weight}, stop at P(best) >= {cfg.threshold}"
    )
    print(
        f"runs: {n} in {time.perf_counter() - started:.1f} s; mean units {s['mean_units']:.0f}, "
        f"mean periods {s['mean_periods']:.1f}; returning units kept their arm: {s['sticky_kept']}"
    )
    print(f"declared a winner: {s['declared_any']}/{n}; declared best (c): {s['declared_best']}/{n}")
    print(
        f"best arm got the most units over the run: {s['most_traffic_to_best']}/{n}; that and declared "
        f"best: {s['best_and_most_traffic']}/{n}; highest weight at the end: {s['highest_final_weight']}/{n}"
    )
    for key, c in s["coverage"].items():
        lo, hi = wilson(c, n)
        print(
            f"95 % CI of the lift {key} vs control covers the true lift: {c}/{n} "
            f"({c / n:.1%}, Wilson 95 % [{lo:.1%}, {hi:.1%}])"
        )
    print(f"coverage over both treatments: {s['coverage_all']:.1%}")
    print(
        f"regret vs always-best (expected successes lost per run): bandit {s['regret']:.1f}, "
        f"equal split of the same units {s['regret_equal']:.1f}"
    )


if __name__ == "__main__":
    main()
