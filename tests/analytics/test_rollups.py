"""The dashboards' pre-aggregation (analytics/rollups.py) against the raw rows it summarises."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum

from analytics.histograms import COST_USD, LATENCY_MS
from analytics.models import CallRollup, LiftPoint, RollupSpan
from analytics.rollups import call_rollup_refresh
from analytics.services import results_compute
from tests.analytics.conftest import T0


def _rows(raw):
    for i in range(9):
        variant = ["control", "fast", "cheap"][i % 3]
        raw.expose(f"u{i}", variant, at=T0 + timedelta(hours=i))
        raw.call(f"u{i}", variant, at=T0 + timedelta(hours=i, minutes=1), latency_ms=100.0 * (i + 1))
    raw.call("u0", "control", at=T0 + timedelta(minutes=5), status="failed", latency_ms=None)
    raw.call("u1", "fast", at=T0 + timedelta(hours=30), reason="killed", served="azure/muse-special")


@pytest.mark.django_db
def test_hour_and_day_rows_sum_to_the_raw_records_and_a_rerun_changes_nothing(three_arms):
    _rows(three_arms)
    call_rollup_refresh()
    hours = CallRollup.objects.filter(span=RollupSpan.HOUR, experiment_id=three_arms.experiment.id)
    days = CallRollup.objects.filter(span=RollupSpan.DAY, experiment_id=three_arms.experiment.id)
    for qs in (hours, days):
        totals = qs.aggregate(
            calls=Sum("calls"), errors=Sum("errors"), killed=Sum("killed"), exposures=Sum("exposures")
        )
        assert totals == {"calls": 11, "errors": 1, "killed": 1, "exposures": 9}
    assert days.values("bucket").distinct().count() == 2  # 2026-01-01 and 2026-01-02 (UTC)
    control = hours.filter(variant_key="control", calls__gt=0, bucket=T0)
    assert control.get().errors == 1 and control.get().calls == 2
    latency = [0] * LATENCY_MS.size
    for h in days.filter(calls__gt=0).values_list("latency_hist", flat=True):
        latency = [a + b for a, b in zip(latency, h, strict=True)]
    assert sum(latency) == 10  # succeeded calls only
    assert latency[LATENCY_MS.index(100.0)] >= 1 and latency[LATENCY_MS.index(900.0)] >= 1
    cost = days.filter(calls__gt=0).values_list("cost_hist", flat=True)
    assert sum(h[COST_USD.index(0.001)] for h in cost) == 11
    before = sorted(
        CallRollup.objects.values_list("span", "bucket", "variant_key", "endpoint", "calls", "exposures")
    )
    call_rollup_refresh()
    after = sorted(
        CallRollup.objects.values_list("span", "bucket", "variant_key", "endpoint", "calls", "exposures")
    )
    assert before == after


@pytest.mark.django_db
def test_each_snapshot_stores_lift_points_for_both_populations(three_arms):
    _rows(three_arms)
    snapshot = results_compute(experiment=three_arms.experiment)
    points = LiftPoint.objects.filter(snapshot=snapshot)
    assert set(points.values_list("analysis", flat=True)) == {"itt", "served"}
    fast = points.get(analysis="itt", metric="latency_ms", variant_key="fast", cuped=False)
    comparison = next(
        c
        for m in snapshot.results["metrics"]
        if m["name"] == "latency_ms"
        for c in m["comparisons"]
        if c["variant"] == "fast"
    )
    assert fast.relative_lift == pytest.approx(comparison["relative_lift"])
    band = (comparison.get("sequential") or {}).get("relative_ci") or (None, None)
    assert (fast.sequential_low, fast.sequential_high) == (
        pytest.approx(band[0]) if band[0] is not None else None,
        pytest.approx(band[1]) if band[1] is not None else None,
    )
