"""``manage.py demo``'s printed results table names models by version label (issue 32: it printed
32-hex public ids)."""

from __future__ import annotations

import pytest

from muse_experiments.experiments.demo.report import print_table
from routing.catalogue import avocado_id
from tests.factories import seed_catalogue


def _results() -> dict:
    variants = [
        {"key": "control", "endpoint": avocado_id(14), "units": 400},
        {"key": "avocado-v15", "endpoint": avocado_id(15), "units": 200},
        {"key": "azure-muse-special", "endpoint": "azure/muse-special", "units": 200},
    ]
    comparison = {"relative_lift": 0.05, "relative_ci": [-0.02, 0.12], "p_value": 0.21}
    return {
        "experiment": "demo",
        "phase": 1,
        "variants": variants,
        "srm": {"p_value": 0.5, "flagged": False, "status": "ok"},
        "metrics": [
            {
                "name": "task_success",
                "variants": [{"key": v["key"], "mean": 0.6} for v in variants],
                "comparisons": [{"variant": v["key"], **comparison} for v in variants[1:]],
            },
            {"name": "latency_ms", "variants": [{"key": v["key"], "mean": 120.0} for v in variants]},
        ],
    }


@pytest.mark.django_db
def test_the_demo_table_names_models_by_label():
    seed_catalogue()
    lines: list[str] = []
    print_table(_results(), lines.append)
    out = "\n".join(lines)
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[4:7]}
    assert rows == {
        "control": "avocado-v14",
        "avocado-v15": "avocado-v15",
        "azure-muse-special": "muse-special",
    }
    assert avocado_id(14).split("/")[1] not in out


def test_the_adaptive_report_prints_weights_p_best_and_the_ramp_with_its_evidence():
    from muse_experiments.experiments.demo.adaptive import AdaptiveOutcome
    from muse_experiments.experiments.demo.report import print_bandit, print_rollout

    update = {
        "at_s": 5.2,
        "slot": 1,
        "decision": "update",
        "weights": {"avocado-v14": 0.25, "avocado-v13": 0.05, "avocado-v15": 0.7},
        "probability_best": {"avocado-v14": 0.2, "avocado-v13": 0.01, "avocado-v15": 0.79},
        "units": {"avocado-v14": 40, "avocado-v13": 30, "avocado-v15": 50},
        "winner": "",
    }
    evidence = {
        "candidate_units": 21,
        "guardrails": [
            {"metric": "error_rate", "status": "constant_identical", "always_valid_p": None},
            {"metric": "task_success", "status": "ok", "always_valid_p": 0.6712},
        ],
    }
    history = [
        {"at": "2026-12-04T18:51:20.1Z", "from_percent": 0.0, "to_percent": 20.0, "reason": "started",
         "message": "", "evidence": {}},
        {"at": "2026-12-04T18:51:33.5Z", "from_percent": 20.0, "to_percent": 50.0, "reason": "advanced",
         "message": "", "evidence": evidence},
    ]  # fmt: skip
    rollout = {
        "key": "demo-rollout-1",
        "model": "avocado/v14",
        "replaces": "avocado/v13",
        "state": "running",
        "step": 1,
        "percent": 50.0,
        "steps": [20, 50, 100],
        "step_min_units": 20,
        "guardrails": ["error_rate", "task_success"],
        "history": history,
    }
    outcome = AdaptiveOutcome(
        bandit_key="demo-bandit-1",
        rollout_key="demo-rollout-1",
        bandit_updates=[update],
        bandit_status="running",
        bandit_phases=2,
        rollout=rollout,
    )
    lines: list[str] = []
    print_bandit(outcome, lines.append)
    print_rollout(outcome, lines.append, labels={"avocado/v14": "avocado-v14", "avocado/v13": "avocado-v13"})
    row = lines[3].split()
    assert row[:2] == ["5s", "update"]
    assert row[2:5] == ["25.0%", "5.0%", "70.0%"] and row[6:9] == ["0.200", "0.010", "0.790"]
    assert row[-3:] == ["40", "30", "50"]
    assert lines[4] == "1 updates, 1 changed the weights; no winner yet (running)"
    assert "avocado-v14 replacing avocado-v13, steps 20% → 50% → 100%" in lines[5]
    assert lines[6] == "state running, step 2 of 3, 50% on the candidate"
    assert lines[8].split(None, 4)[1:4] == ["20%", "→", "50%"]
    assert lines[8].endswith(
        "advanced               21 candidate units; error_rate constant_identical, task_success ok p=0.67"
    )
