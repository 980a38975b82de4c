"""A small, known experiment for the dashboard tests (view tests and browser tests).

Three arms, 90 units first exposed over the last three days, calls of known latency, cost and
tokens (the ``fast`` arm is faster, ``cheap`` cheaper), task_success outcomes, a latency guardrail,
and three snapshots computed as the data grew, so every chart has points.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from analytics.models import LiftPoint, ResultSnapshot
from analytics.rollups import call_rollup_refresh
from analytics.services import results_compute
from routing.catalogue import avocado_id
from tests.analytics.conftest import Raw
from tests.factories import make_experiment, seed_catalogue

ARMS = [
    ("control", avocado_id(14), 1 / 3),
    ("fast", avocado_id(15), 1 / 3),
    ("cheap", "azure/muse-special", 1 / 3),
]
LATENCY = {"control": 900.0, "fast": 450.0, "cheap": 1200.0}
COST = {"control": "0.0040", "fast": "0.0045", "cheap": "0.000008"}
SUCCESS_EVERY = {"control": 2, "fast": 2, "cheap": 3}
TTFT_SHARE = 0.25


def build_dashboard_experiment(
    key: str = "ana", units: int = 90, latency: dict | None = None, streamed: bool = True
) -> Raw:
    """Write the rows, compute three snapshots (one per day of data) and the rollup.

    ``latency``: per-arm base latencies (ms) replacing :data:`LATENCY` for the arms it names
    (e.g. a ``cheap`` arm 68× slower puts the latency guardrail near +6,700 %). ``streamed``: the
    first call of each unit is streamed, its time to first token :data:`TTFT_SHARE` of its
    latency (False: no streamed call, so no time to first token anywhere)."""
    latencies = {**LATENCY, **(latency or {})}
    seed_catalogue()
    experiment = make_experiment(key=key, arms=ARMS)
    experiment.name = "Faster Avocado for subagents"
    experiment.guardrail_metrics = ["latency_ms"]
    experiment.save(update_fields=["name", "guardrail_metrics"])
    raw = Raw(experiment)
    now = timezone.now()
    per_day = units // 3
    snapshots: list[ResultSnapshot] = []
    for day in range(3):
        start = now - timedelta(days=2 - day, hours=3)
        for j in range(per_day):
            i = day * per_day + j
            variant = ARMS[i % 3][0]
            at = start + timedelta(minutes=j)
            unit = f"{key}-u{i}"
            raw.expose(unit, variant, at=at)
            for k in range(1 + i % 3):
                raw.call(
                    unit,
                    variant,
                    at=at + timedelta(seconds=k),
                    latency_ms=latencies[variant] * (1 + 0.1 * (i % 7)),
                    ttft_ms=latencies[variant] * (1 + 0.1 * (i % 7)) * TTFT_SHARE
                    if streamed and k == 0
                    else None,
                    cost_usd=COST[variant],
                    input_tokens=400 + 50 * (i % 5),
                    output_tokens=120 + 10 * (i % 4),
                )
            if (i // 3) % SUCCESS_EVERY[variant] == 0:
                raw.event(unit, "task_success", 1.0, at=at + timedelta(minutes=5))
        snapshot = results_compute(experiment=experiment)
        when = start + timedelta(hours=2)
        ResultSnapshot.objects.filter(pk=snapshot.pk).update(computed_at=when)
        LiftPoint.objects.filter(snapshot=snapshot).update(computed_at=when)
        snapshots.append(snapshot)
    # one fallback call (served by another endpoint) in the control arm
    raw.call(
        f"{key}-u0",
        "control",
        at=now - timedelta(minutes=30),
        reason="error_fallback",
        served="azure/muse-special",
        latency_ms=700.0,
    )
    call_rollup_refresh()
    return raw
