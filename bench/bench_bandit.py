"""Bandit simulation through the real assignment engine and the real bandit statistics.

Three arms with success rates 0.30 (control), 0.32 and 0.35. Each run: units arrive in periods of
``--units`` new units (hashed by ``assignment.vectorised.assign_many``, the engine's twin, id for
id); a share of earlier units come back (``--return-share``) and must keep their arm through the
sticky map the router passes to the engine (``engine.route(..., sticky=...)``). After each period
the update of :func:`analytics.stats.bandit.bandit_decide` runs on every unit seen so far: equal
weights during the exploration periods, then Thompson weights with the floor; each new set of
weights is a new :class:`ExperimentSpec` phase with the same seed, as ``services.variants.phase_open``
does, unless no arm's weight moved by more than ``WEIGHT_CHANGE_TOLERANCE`` (0.5 points), as
``analytics.bandits.bandit_update`` keeps them then. When an arm's P(best) reaches the threshold it is declared the winner and gets
:func:`analytics.stats.bandit.winner_weights` for the rest of the run, as
``analytics.bandits.bandit_update`` does. A run lasts ``--max-periods`` periods (its horizon), or
ends at the declaration with ``--stop-at-winner`` (the behaviour before a winner moved traffic).
The reported lift of every treatment is :func:`analytics.stats.bandit.stratified_lift` over the
phases of first exposure.

Prints: how often the best arm got the most traffic and was declared best (and had the most units
at the declaration), how often each reported 95 % interval covered the true lift (with a 95 %
Wilson interval of that rate), and the regret (expected successes lost) against always serving
the best arm, beside an equal split of the same units.

With ``--cost-per-call`` and ``--cost-cap`` each unit also has calls and a cost, and every update
holds the arms whose cost per call is credibly over the cap at the floor
(:func:`analytics.stats.bandit.cost_over_cap`); the best arm is then the best within the cap.

    .venv/bin/python bench/bench_bandit.py --runs 100
    .venv/bin/python bench/bench_bandit.py --runs 100 --cost-per-call 0.001,0.0012,0.003 --cost-cap 0.002
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

from analytics.stats.bandit import (  # noqa: E402
    bandit_decide,
    cost_over_cap,
    rounded_weights,
    stratified_lift,
    weights_moved,
    winner_weights,
)
from analytics.stats.statistics import MeanStatistic, ProportionStatistic, RatioStatistic  # noqa: E402
from muse_experiments.experiments.assignment.engine import route  # noqa: E402
from muse_experiments.experiments.assignment.specs import (  # noqa: E402
    ConfigSnapshot,
    ExperimentSpec,
    VariantSpec,
)
from muse_experiments.experiments.assignment.vectorised import assign_many  # noqa: E402

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
    stop_at_winner: bool = False
    #: true mean cost per call of each arm (USD) and the cap; None: no cost guardrail
    cost_per_call: tuple[float, ...] | None = None
    cost_cap: float | None = None


def best_arm(cfg: Config) -> int:
    """The arm with the highest rate among those whose true cost per call is within the cap."""
    allowed = [
        i
        for i in range(len(cfg.rates))
        if cfg.cost_cap is None or cfg.cost_per_call is None or cfg.cost_per_call[i] <= cfg.cost_cap
    ]
    return max(allowed, key=lambda i: cfg.rates[i])


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
    declared_period: int | None = None
    traffic_at_declaration: list[int] = field(default_factory=list)
    ever_over_cap: list[bool] = field(default_factory=list)


class _CostSums:
    """Per-arm sums of each unit's cost (USD) and calls, for the cost per call's RatioStatistic.

    A unit makes ``1 + Poisson(1)`` calls; its cost is ``calls × mean cost per call × G`` with
    ``G ~ Gamma(4, 1/4)`` (mean 1, sd 0.5: units differ in prompt sizes). Its own generator, so
    runs without a cap draw exactly what they did before."""

    def __init__(self, k: int, means: tuple[float, ...], run: int) -> None:
        self.rng = np.random.default_rng(20_000 + run)
        self.means = np.asarray(means)
        self.sums = np.zeros((k, 6))  # n, Σcost, Σcost², Σcalls, Σcalls², Σcost·calls

    def add(self, arms: np.ndarray) -> None:
        calls = 1.0 + self.rng.poisson(1.0, len(arms))
        cost = calls * self.means[arms] * self.rng.gamma(4.0, 0.25, len(arms))
        for i in range(len(self.sums)):
            mask = arms == i
            c, m = cost[mask], calls[mask]
            self.sums[i] += (mask.sum(), c.sum(), (c * c).sum(), m.sum(), (m * m).sum(), (c * m).sum())

    def over_cap(self, cap: float) -> list[bool]:
        out = []
        for n, c, c2, m, m2, cm in self.sums:
            n = int(n)
            stat = RatioStatistic(n, MeanStatistic(n, c, c2), MeanStatistic(n, m, m2), cm)
            out.append(cost_over_cap(stat, cap).over_cap)
        return out


def _spec(seed: str, phase: int, weights: tuple[float, ...]) -> ExperimentSpec:
    variants = tuple(
        VariantSpec(key=k, weight=w, endpoint_id=f"model-{k}", is_control=k == "control")
        for k, w in zip(KEYS, weights, strict=True)
    )
    return ExperimentSpec(
        id=1, key="bandit-sim", seed=seed, phase=phase, unit_type="session", variants=variants
    )


def simulate(run: int, cfg: Config) -> RunResult:
    """One seeded run (``run`` seeds the outcomes, the hash seed and the Monte Carlo).

    The run lasts ``cfg.max_periods`` update periods (its horizon). Once an arm is declared the
    winner it gets :func:`winner_weights` (the others keep the floor) and the updates stop, as
    ``analytics.bandits.bandit_update`` does; with ``cfg.stop_at_winner`` the run ends at the
    declaration instead (the behaviour before winners moved traffic).
    """
    rng = np.random.default_rng(10_000 + run)
    k = len(cfg.rates)
    seed = f"bandit-sim-{run}"
    weights = rounded_weights(tuple(1.0 / k for _ in range(k)))
    history = [weights]
    phase = 1
    arm_of: dict[str, int] = {}  # unit -> arm (the durable exposure)
    # per phase (a period of fixed weights) of first exposure: units and successes per arm
    phase_n: list[list[int]] = [[0] * k]
    phase_s: list[list[int]] = [[0] * k]
    sticky_kept = 0
    declared = declared_period = None
    at_declaration: list[int] = []
    expected_lost = 0.0
    best_rate = cfg.rates[best_arm(cfg)]
    rates = np.asarray(cfg.rates)
    capped = cfg.cost_cap is not None and cfg.cost_per_call is not None
    costs = _CostSums(k, cfg.cost_per_call, run) if capped else None
    ever_over = [False] * k
    next_unit = 0
    periods = 0
    for period in range(cfg.max_periods):
        periods += 1
        spec = _spec(seed, phase, weights)
        snapshot = ConfigSnapshot(version=phase, experiments=(spec,))
        if arm_of and cfg.return_share > 0:
            count = int(cfg.units_per_period * cfg.return_share)
            pool = list(arm_of)
            for i in rng.integers(0, len(pool), size=count):  # must keep their arm whatever the weights
                unit = pool[i]
                d = route(snapshot, session_id=unit, user_id="", sticky={(1, phase): KEYS[arm_of[unit]]})
                if d.variant_index != arm_of[unit]:
                    raise AssertionError(f"unit {unit} changed arm when weights changed")
                sticky_kept += 1
        units = [f"r{run}-u{i}" for i in range(next_unit, next_unit + cfg.units_per_period)]
        next_unit += cfg.units_per_period
        arms = assign_many(spec, units)  # the engine's hash, id for id (route's vectorised twin)
        success = rng.random(len(units)) < rates[arms]
        for unit, arm in zip(units, arms.tolist(), strict=True):
            arm_of[unit] = arm
        n_row, s_row = phase_n[-1], phase_s[-1]
        for i in range(k):
            n_row[i] += int(np.sum(arms == i))
            s_row[i] += int(np.sum(success & (arms == i)))
        expected_lost += float(np.sum(best_rate - rates[arms]))
        if costs is not None:
            costs.add(arms)
        if declared is not None:
            continue  # the winner's weights stay: no more updates
        totals = [
            ProportionStatistic(sum(r[i] for r in phase_n), sum(r[i] for r in phase_s)) for i in range(k)
        ]
        over = costs.over_cap(cfg.cost_cap) if costs is not None else None
        exploring = period + 1 < cfg.explore_periods
        if over and not exploring:
            ever_over = [a or b for a, b in zip(ever_over, over, strict=True)]
        decision = bandit_decide(
            totals,
            exploring=exploring,
            min_weight=cfg.min_weight,
            stop_when_probability_best=cfg.threshold,
            seed=run * 1000 + period,
            over_cap=over,
        )
        if decision.winner is not None:
            declared, declared_period = decision.winner, period + 1
            at_declaration = [int(x) for x in np.sum(phase_n, axis=0)]
            if cfg.stop_at_winner:
                break
            new = rounded_weights(winner_weights(k, decision.winner, min_weight=cfg.min_weight))
        else:
            new = rounded_weights(decision.weights)
        if (decision.winner is not None and new != weights) or weights_moved(weights, new):
            weights = new
            phase += 1
            history.append(weights)
            phase_n.append([0] * k)
            phase_s.append([0] * k)
    if not phase_n[-1] or sum(phase_n[-1]) == 0:
        phase_n.pop()
        phase_s.pop()
    traffic = [sum(r[i] for r in phase_n) for i in range(k)]
    per_phase_units = [sum(r) for r in phase_n]
    covered, lifts = {}, {}
    for t in range(1, k):
        lift = stratified_lift(
            [ProportionStatistic(n[0], s[0]) for n, s in zip(phase_n, phase_s, strict=True)],
            [ProportionStatistic(n[t], s[t]) for n, s in zip(phase_n, phase_s, strict=True)],
            per_phase_units,
            alpha=cfg.alpha,
        )
        true = cfg.rates[t] - cfg.rates[0]
        lifts[KEYS[t]] = lift.absolute_lift if lift else math.nan
        covered[KEYS[t]] = bool(lift and lift.absolute_ci[0] <= true <= lift.absolute_ci[1])
    regret_equal = sum(traffic) * (best_rate - sum(cfg.rates) / k)
    return RunResult(
        declared,
        traffic,
        periods,
        covered,
        lifts,
        expected_lost,
        regret_equal,
        history,
        sticky_kept,
        declared_period,
        at_declaration,
        ever_over,
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
    best = best_arm(cfg)
    n = len(results)
    declared_best = sum(r.declared == best for r in results)
    most_traffic = sum(int(np.argmax(r.traffic)) == best for r in results)
    both = sum(r.declared == best and int(np.argmax(r.traffic)) == best for r in results)
    top_weight = sum(int(np.argmax(r.weights[-1])) == best for r in results)
    early = sum(
        bool(r.traffic_at_declaration) and int(np.argmax(r.traffic_at_declaration)) == best for r in results
    )
    declared_at = [r.declared_period for r in results if r.declared_period is not None]
    coverage = {key: sum(r.covered[key] for r in results) for key in KEYS[1:]}
    return {
        "runs": n,
        "declared_best": declared_best,
        "declared_any": sum(r.declared is not None for r in results),
        "most_traffic_to_best": most_traffic,
        "best_and_most_traffic": both,
        "highest_final_weight": top_weight,
        "most_traffic_at_declaration": early,
        "declared_period_median": float(np.median(declared_at)) if declared_at else math.nan,
        "declared_at_first_update": sum(p == cfg.explore_periods for p in declared_at),
        "coverage": coverage,
        "coverage_all": sum(coverage.values()) / (n * (len(cfg.rates) - 1)),
        "mean_units": float(np.mean([sum(r.traffic) for r in results])),
        "mean_periods": float(np.mean([r.periods for r in results])),
        "regret": float(np.mean([r.regret for r in results])),
        "regret_equal": float(np.mean([r.regret_equal for r in results])),
        "sticky_kept": sum(r.sticky_kept for r in results),
        "ever_over_cap": [sum(r.ever_over_cap[i] for r in results) for i in range(len(cfg.rates))],
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
        "--stop-at-winner",
        action="store_true",
        help="end a run at the declaration (the behaviour before a winner moved traffic)",
    )
    parser.add_argument(
        "--first-seed", type=int, default=0, help="runs use seeds first-seed, first-seed+1, …"
    )
    parser.add_argument(
        "--cost-per-call",
        type=lambda text: tuple(float(x) for x in text.split(",")),
        default=None,
        help="true mean USD per call of each arm, e.g. 0.001,0.0012,0.003 (with --cost-cap)",
    )
    parser.add_argument("--cost-cap", type=float, default=None, help="max_cost_usd_per_call")
    args = parser.parse_args()
    if (args.cost_per_call is None) != (args.cost_cap is None):
        parser.error("--cost-per-call and --cost-cap go together")
    cfg = Config(
        units_per_period=args.units,
        max_periods=args.max_periods,
        min_weight=args.min_weight,
        threshold=args.threshold,
        return_share=args.return_share,
        explore_periods=args.explore_periods,
        stop_at_winner=args.stop_at_winner,
        cost_per_call=args.cost_per_call,
        cost_cap=args.cost_cap,
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
    horizon = "runs end at the declaration" if cfg.stop_at_winner else f"horizon {cfg.max_periods} periods"
    print(f"{horizon}; after a winner: {'—' if cfg.stop_at_winner else 'winner 1 − floors, no more updates'}")
    best = KEYS[best_arm(cfg)]
    if cfg.cost_cap is not None:
        held = ", ".join(f"{k} {c}/{n}" for k, c in zip(KEYS, s["ever_over_cap"], strict=True))
        print(
            f"cost per call {dict(zip(KEYS, cfg.cost_per_call, strict=True))}, cap {cfg.cost_cap}: best "
            f"arm within the cap {best}; runs where an arm was held at the floor for its cost: {held}"
        )
    print(f"declared a winner: {s['declared_any']}/{n}; declared best ({best}): {s['declared_best']}/{n}")
    print(
        f"declared at period (median) {s['declared_period_median']:.0f}; at the first update after "
        f"exploration: {s['declared_at_first_update']}/{n}; best arm had the most units at the "
        f"declaration: {s['most_traffic_at_declaration']}/{n}"
    )
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
