"""Guarded progressive rollouts by simulation: harmful candidates rolled back early, harmless ones
reach 100 % (issue 34).

Run:  .venv/bin/python bench/bench_rollout.py [--runs 200] [--arrivals 2500]

Each run ramps a candidate through ``[1, 5, 25, 50, 100]`` % with checks every 15 minutes, each
step held at least 60 minutes and 100 candidate units. Units arrive (``--arrivals`` new sessions
per check interval) and are split by the real assignment engine
(:func:`muse_experiments.experiments.assignment.vectorised.assign_many` on the rollout's
two-variant experiment, same seed at every step, one phase per step). A unit makes
``1 + Poisson(2)`` calls; per call it fails with the arm's error rate, has a lognormal latency
with a unit effect, and costs ~USD 0.002; per unit task success is Bernoulli(0.6). At every check
the four guardrails of the current step (error_rate as a delta-method ratio, latency_p95_ms as a
clustered quantile, cost_usd per unit as a mean, task_success as a proportion) go through the real
engine (:func:`analytics.stats.compare`) and the real decision
(:func:`analytics.rollout_policy.rollout_decide`).

Prints, for a candidate with twice the error rate (5 % → 10 %), the share of runs rolled back by
step 2 (the target is ≥ 95 %), and for a harmless candidate the share that reached 100 % and
the share of false rollbacks (target ≤ 5 %).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.rollout_policy import GuardrailReading, rollout_decide  # noqa: E402
from analytics.stats import (  # noqa: E402
    MeanStatistic,
    ProportionStatistic,
    RatioStatistic,
    compare,
    quantile_statistic,
)
from muse_experiments.experiments.assignment.specs import ExperimentSpec, VariantSpec  # noqa: E402
from muse_experiments.experiments.assignment.vectorised import assign_many  # noqa: E402

STEPS = (1, 5, 25, 50, 100)
CHECK_MINUTES, STEP_MIN_MINUTES, STEP_MIN_UNITS = 15, 60, 100
BASE_ERROR = 0.05
GUARDRAILS = ("error_rate", "latency_p95_ms", "cost_usd", "task_success")


@dataclass
class RunResult:
    """How a run ended: ``final`` state (completed | rolled_back | running), ``rollback_step``
    (index into STEPS, or None), ``checks`` made and the per-unit sticky check."""

    final: str
    rollback_step: int | None
    checks: int
    sticky_ok: bool


def _spec(run: int, step: int, percent: float) -> ExperimentSpec:
    return ExperimentSpec(
        id=1,
        key=f"rollout-{run}",
        seed=f"rollout-{run}",
        phase=step + 1,
        unit_type="session",
        variants=(
            VariantSpec(key="current", weight=1 - percent / 100, endpoint_id="m/current", is_control=True),
            VariantSpec(key="candidate", weight=percent / 100, endpoint_id="m/candidate"),
        ),
    )


def _arm(rng: np.random.Generator, units: int, error_rate: float) -> dict[str, np.ndarray]:
    calls = 1 + rng.poisson(2.0, units)
    ids = np.repeat(np.arange(units), calls)
    errors = rng.random(calls.sum()) < error_rate
    latency = np.exp(6.0 + np.repeat(rng.normal(0, 0.3, units), calls) + rng.normal(0, 0.5, calls.sum()))
    cost = rng.gamma(4.0, 0.0005, calls.sum())
    return {
        "calls": calls.astype(float),
        "errors": np.bincount(ids, weights=errors, minlength=units),
        "cost": np.bincount(ids, weights=cost, minlength=units),
        "latency": latency[~errors],
        "latency_ids": ids[~errors],
        "success": (rng.random(units) < 0.6).astype(float),
    }


def _merge(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    offset = len(a["calls"])
    out = {k: np.concatenate([a[k], b[k]]) for k in a}
    out["latency_ids"] = np.concatenate([a["latency_ids"], b["latency_ids"] + offset])
    return out


def _statistics(arm: dict) -> dict[str, object]:
    n = len(arm["calls"])
    m, d = arm["errors"], arm["calls"]
    return {
        "error_rate": RatioStatistic(
            n=n,
            m=MeanStatistic(n, m.sum(), (m * m).sum()),
            d=MeanStatistic(n, d.sum(), (d * d).sum()),
            sum_of_products=(m * d).sum(),
        ),
        "latency_p95_ms": quantile_statistic(arm["latency"], arm["latency_ids"], q=0.95),
        "cost_usd": MeanStatistic(n, arm["cost"].sum(), (arm["cost"] ** 2).sum()),
        "task_success": ProportionStatistic(n=n, sum=arm["success"].sum()),
    }


def _readings(control: dict, candidate: dict) -> list[GuardrailReading]:
    c, t = _statistics(control), _statistics(candidate)
    out = []
    for name in GUARDRAILS:
        r = compare(c[name], t[name])
        out.append(
            GuardrailReading(
                metric=name,
                status=r.status,
                higher_is_better=name == "task_success",
                control_n=r.control_n,
                treatment_n=r.treatment_n,
                estimate=r.absolute_lift,
                std_error=r.std_error,
                relative_lift=r.relative_lift,
            )
        )
    return out


def simulate_rollout(
    *, seed: int, candidate_error: float, arrivals: int = 2500, max_checks: int = 200
) -> RunResult:
    """One rollout through the real assignment, statistics and decision code (see the module)."""
    rng = np.random.default_rng(seed)
    step, minutes_in_step, checks, next_unit = 0, 0, 0, 0
    on_candidate: set[str] = set()
    sticky_ok = True
    arms: dict[str, dict | None] = {"current": None, "candidate": None}
    while checks < max_checks:
        percent = STEPS[step]
        units = [f"s{seed}-{next_unit + i}" for i in range(arrivals)]
        next_unit += arrivals
        index = assign_many(_spec(seed, step, percent), units)
        # Stickiness: earlier candidate units (sampled) still hash onto the candidate at this step.
        sample = sorted(on_candidate)[:200]
        if sample and not np.all(assign_many(_spec(seed, step, percent), sample) == 1):
            sticky_ok = False
        on_candidate.update(u for u, i in zip(units, index, strict=True) if i == 1)
        n_candidate = int((index == 1).sum())
        arms["current"] = _merge(arms["current"], _arm(rng, arrivals - n_candidate, BASE_ERROR))
        if n_candidate:
            arms["candidate"] = _merge(arms["candidate"], _arm(rng, n_candidate, candidate_error))
        minutes_in_step += CHECK_MINUTES
        checks += 1
        if arms["candidate"] is None or len(arms["candidate"]["calls"]) < 2:
            continue
        decision = rollout_decide(
            readings=_readings(arms["current"], arms["candidate"]),
            steps=STEPS,
            percent=percent,
            held_minutes=minutes_in_step,
            min_minutes=STEP_MIN_MINUTES,
            min_units=STEP_MIN_UNITS,
            candidate_units=len(arms["candidate"]["calls"]),
        )
        if decision.action == "rollback":
            return RunResult("rolled_back", step, checks, sticky_ok)
        if decision.action == "advance":
            step += 1
            if STEPS[step] >= 100:
                return RunResult("completed", None, checks, sticky_ok)
            minutes_in_step, arms = 0, {"current": None, "candidate": None}  # a new phase
    return RunResult("running", None, checks, sticky_ok)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--arrivals", type=int, default=2500)
    parser.add_argument("--seed", type=int, default=34)
    args = parser.parse_args()
    harmful = [
        simulate_rollout(seed=args.seed * 100_000 + i, candidate_error=2 * BASE_ERROR, arrivals=args.arrivals)
        for i in range(args.runs)
    ]
    harmless = [
        simulate_rollout(
            seed=args.seed * 100_000 + 50_000 + i, candidate_error=BASE_ERROR, arrivals=args.arrivals
        )
        for i in range(args.runs)
    ]
    early = sum(1 for r in harmful if r.final == "rolled_back" and r.rollback_step <= 1) / args.runs
    by_step = {s: sum(1 for r in harmful if r.rollback_step == i) for i, s in enumerate(STEPS)}
    reached = sum(1 for r in harmless if r.final == "completed") / args.runs
    false_rb = sum(1 for r in harmless if r.final == "rolled_back") / args.runs
    checks = np.mean([r.checks for r in harmless])
    print(
        f"runs={args.runs} arrivals/check={args.arrivals} steps={list(STEPS)} checks every {CHECK_MINUTES} min"
    )
    print(f"2x error rate: rolled back by step 2 in {early:.1%} of runs; rollbacks per step {by_step}")
    print(
        f"harmless: reached 100 % in {reached:.1%}; false rollbacks {false_rb:.1%}; mean checks {checks:.1f}"
    )
    print(
        f"units kept the candidate across steps in every run: {all(r.sticky_ok for r in harmful + harmless)}"
    )


if __name__ == "__main__":
    main()
