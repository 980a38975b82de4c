"""The rollout simulation (bench/bench_rollout.py) at a smaller, seeded size: a candidate with
twice the error rate is rolled back by step 2, a harmless one reaches 100 % without a false
rollback, and units keep the candidate from step to step (real assignment, statistics and
decision code)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_rollout import BASE_ERROR, simulate_rollout  # noqa: E402

RUNS = 20


def test_a_candidate_with_twice_the_error_rate_is_rolled_back_by_step_2():
    runs = [simulate_rollout(seed=9000 + i, candidate_error=2 * BASE_ERROR) for i in range(RUNS)]
    early = [r for r in runs if r.final == "rolled_back" and r.rollback_step <= 1]
    assert len(early) >= 0.95 * RUNS
    assert all(r.sticky_ok for r in runs)


def test_a_harmless_candidate_reaches_100_percent_without_false_rollbacks():
    runs = [simulate_rollout(seed=7000 + i, candidate_error=BASE_ERROR) for i in range(RUNS)]
    assert sum(r.final == "rolled_back" for r in runs) <= 0.05 * RUNS
    assert sum(r.final == "completed" for r in runs) >= 0.95 * RUNS
    assert all(r.sticky_ok for r in runs)
