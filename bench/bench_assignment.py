"""Benchmark the assignment engine.

Run: ``.venv/bin/python bench/bench_assignment.py [--decisions 100000] [--ids 1000000]``

Builds 50 running experiments across 5 layers (10 disjoint 10% slices per layer, one layer per
subagent scope, 2-3 variants, mixed coverage, a 5% global holdout), then times

* ``route`` per decision (median / p99 in microseconds, varied session/user ids and subagents),
* ``assign`` (all 50 experiments) per unit,
* ``assign_many`` on 1,000,000 ids (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from muse_experiments.experiments.assignment.engine import assign, route  # noqa: E402
from muse_experiments.experiments.assignment.specs import (  # noqa: E402
    ConfigSnapshot,
    ExperimentSpec,
    HoldoutSpec,
    LayerSpec,
    VariantSpec,
)
from muse_experiments.experiments.assignment.vectorised import assign_many  # noqa: E402

SUBAGENTS = ("planner", "coder", "reviewer", "tester", "writer")


def build_snapshot() -> ConfigSnapshot:
    """50 experiments, 5 layers x 10 slices; layer i is scoped to subagent i."""
    exps = []
    for layer_i, sub in enumerate(SUBAGENTS):
        for slot in range(10):
            eid = layer_i * 10 + slot + 1
            n_var = 2 + (eid % 2)
            variants = tuple(
                VariantSpec(key=f"v{k}", weight=1.0, endpoint_id=f"ep-{eid}-{k}", is_control=k == 0)
                for k in range(n_var)
            )
            exps.append(
                ExperimentSpec(
                    id=eid,
                    key=f"exp-{eid}",
                    seed=f"seed-{eid}",
                    phase=0,
                    unit_type="session" if eid % 3 else "user",
                    variants=variants,
                    coverage=1.0 if eid % 4 else 0.5,
                    layer=LayerSpec(key=f"layer-{sub}", start=slot / 10, end=(slot + 1) / 10),
                    match={"subagent": sub},
                    condition={"plan": {"$in": ["pro", "team"]}} if eid % 5 == 0 else None,
                )
            )
    return ConfigSnapshot(version=1, experiments=tuple(exps), holdout=HoldoutSpec(share=0.05))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--ids", type=int, default=1_000_000)
    args = ap.parse_args()

    snap = build_snapshot()
    calls = [
        (
            f"sess-{i:08d}-{(i * 2654435761) % 10**9:09d}",
            f"user-{(i * 7919) % 50_000:06d}",
            {"subagent": SUBAGENTS[i % 5], "plan": ("free", "pro", "team")[i % 3]},
        )
        for i in range(args.decisions)
    ]
    clock = time.perf_counter_ns
    for s, u, a in calls[:2000]:  # warm-up
        route(snap, session_id=s, user_id=u, attributes=a)

    route_ns: list[float] = []
    in_exp = 0
    for s, u, a in calls:
        t0 = clock()
        d = route(snap, session_id=s, user_id=u, attributes=a)
        route_ns.append(clock() - t0)
        in_exp += d.in_experiment
    route_us = [x / 1000 for x in route_ns]

    assign_us: list[float] = []
    for s, u, a in calls[: max(1, args.decisions // 10)]:
        t0 = clock()
        assign(snap, session_id=s, user_id=u, attributes=a)
        assign_us.append((clock() - t0) / 1000)

    ids = [f"sess-{i:08d}-{(i * 2654435761) % 10**9:09d}" for i in range(args.ids)]
    exp = snap.experiments[1]
    plain = ExperimentSpec(
        id=999, key="plain", seed="plain", phase=0, unit_type="session", variants=exp.variants
    )
    t0 = time.perf_counter()
    out = assign_many(plain, ids)
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    assign_many(exp, ids)
    t_layer = time.perf_counter() - t0

    print(f"snapshot: {len(snap.experiments)} experiments, 5 layers, holdout 5%")
    print(
        f"route  ({len(route_us):,} decisions): median {statistics.median(route_us):.2f} us, "
        f"p99 {pct(route_us, 0.99):.2f} us, mean {statistics.fmean(route_us):.2f} us, "
        f"in experiment {in_exp / len(calls):.1%}"
    )
    print(
        f"assign (all 50 experiments, {len(assign_us):,} units): median {statistics.median(assign_us):.2f} us, "
        f"p99 {pct(assign_us, 0.99):.2f} us"
    )
    print(
        f"assign_many ({len(ids):,} ids, 36-char): {t_plain:.3f} s (no layer), {t_layer:.3f} s (with layer)"
    )
    print(
        f"  split of {len(plain.variants)} variants: {[int((out == k).sum()) for k in range(len(plain.variants))]}"
    )


if __name__ == "__main__":
    main()
