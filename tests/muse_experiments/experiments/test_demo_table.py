"""``manage.py demo``'s printed results table names models by version label (issue 32: it printed
32-hex public ids)."""

from __future__ import annotations

import io

import pytest

from muse_experiments.experiments.management.commands.demo import Command
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
    command = Command(stdout=io.StringIO())
    command._print_table(_results())
    out = command.stdout.getvalue()
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[4:7]}
    assert rows == {
        "control": "avocado-v14",
        "avocado-v15": "avocado-v15",
        "azure-muse-special": "muse-special",
    }
    assert avocado_id(14).split("/")[1] not in out
