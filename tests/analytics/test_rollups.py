"""The dashboards' pre-aggregation (analytics/rollups.py) against the raw rows it summarises."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from analytics.dashboards import ResultsOptions, results_dashboard, routing_health
from analytics.histograms import COST_USD, LATENCY_MS, TOKENS
from analytics.models import CallRollup, LiftPoint, RollupSpan
from analytics.rollups import call_rollup_refresh
from analytics.services import results_compute
from tests.analytics.conftest import T0
from tests.factories import user_in_group


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


def _calls_row(raw, variant: str, **dates) -> dict:
    options = ResultsOptions(phase=raw.phase, **dates)
    table = results_dashboard(experiment=raw.experiment, options=options)["tables"]["calls"]
    return next(r for r in table.rows if r["variant"] == variant)


@pytest.mark.django_db
def test_tokens_per_call_counts_reasoning_once(three_arms):
    """Issue 32: 1,000 input and 300 output tokens (200 of them reasoning) is 1,300 tokens, not
    1,500: the providers' output count already includes the reasoning tokens."""
    three_arms.expose("u1", "fast")
    three_arms.call("u1", "fast", input_tokens=1000, output_tokens=300, reasoning_tokens=200)
    call_rollup_refresh()
    for span in (RollupSpan.HOUR, RollupSpan.DAY):
        row = CallRollup.objects.get(span=span, experiment_id=three_arms.experiment.id, calls=1)
        assert row.tokens == 1300
        assert row.tokens_hist[TOKENS.index(1300)] == 1 and sum(row.tokens_hist) == 1
    assert _calls_row(three_arms, "fast")["tokens_per_call"] == 1300


NEW_YORK = ZoneInfo("America/New_York")


def _day_rows(raw) -> dict[str, int]:
    """``{local day: calls}`` of the experiment's day rows, days read in the current zone."""
    zone = timezone.get_current_timezone()
    out: dict[str, int] = {}
    for bucket, calls in CallRollup.objects.filter(
        span=RollupSpan.DAY, experiment_id=raw.experiment.id, calls__gt=0
    ).values_list("bucket", "calls"):
        local = bucket.astimezone(zone)
        assert (local.hour, local.minute) == (0, 0)  # a day row starts at a local midnight
        out[local.date().isoformat()] = out.get(local.date().isoformat(), 0) + calls
    return out


@pytest.mark.django_db
def test_a_late_evening_new_york_exposure_counts_on_its_new_york_day(three_arms, settings):
    """Issue 32: a 23:30 New York exposure on 12-02 (04:30 UTC on 12-03) belongs to 12-02 in every
    day bucket: day rows, the daily chart, the date range of the calls table and its CSV export."""
    settings.TIME_ZONE = "America/New_York"  # what MUSE_REPORTING_TIME_ZONE sets
    at = datetime(2026, 12, 2, 23, 30, tzinfo=NEW_YORK)
    three_arms.expose("u1", "fast", at=at)
    three_arms.call("u1", "fast", at=at + timedelta(minutes=1))
    call_rollup_refresh()
    assert _day_rows(three_arms) == {"2026-12-02": 1}
    days = CallRollup.objects.filter(span=RollupSpan.DAY, experiment_id=three_arms.experiment.id)
    assert set(days.values_list("bucket", "zone")) == {
        (datetime(2026, 12, 2, 5, 0, tzinfo=UTC), "America/New_York")
    }
    data = results_dashboard(experiment=three_arms.experiment, options=ResultsOptions(phase=three_arms.phase))
    assert data["exposures"]["labels"] == ["2026-12-02"]
    assert data["exposures"]["series"]["fast"] == [1]
    assert (
        _calls_row(three_arms, "fast", date_from=date(2026, 12, 2), date_to=date(2026, 12, 2))["calls"] == 1
    )
    assert _calls_row(three_arms, "fast", date_from=date(2026, 12, 3))["calls"] == 0


@pytest.mark.django_db
def test_the_calls_csv_export_of_a_new_york_day_holds_its_late_evening_calls(three_arms, settings, client):
    settings.TIME_ZONE = "America/New_York"
    three_arms.call("u1", "fast", at=datetime(2026, 12, 2, 23, 30, tzinfo=NEW_YORK))
    three_arms.call("u2", "fast", at=datetime(2026, 12, 3, 0, 30, tzinfo=NEW_YORK))
    call_rollup_refresh()
    client.force_login(user_in_group("Analyst"))
    export = client.get(
        f"/results/{three_arms.experiment.key}/",
        {"export": "csv", "table": "calls", "from": "2026-12-02", "to": "2026-12-02"},
    )
    rows = {r["variant"]: r for r in csv.DictReader(io.StringIO(export.content.decode()))}
    assert rows["fast"]["calls"] == "1"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("day", "first_utc", "hours"),
    [
        (date(2026, 3, 8), datetime(2026, 3, 8, 5, 0, tzinfo=UTC), 23),  # clocks go forward
        (date(2026, 11, 1), datetime(2026, 11, 1, 4, 0, tzinfo=UTC), 25),  # clocks go back
    ],
)
def test_a_dst_change_day_is_one_local_day_of_23_or_25_hours(three_arms, settings, day, first_utc, hours):
    settings.TIME_ZONE = "America/New_York"
    early = datetime.combine(day, datetime.min.time(), NEW_YORK) + timedelta(minutes=30)
    late = first_utc + timedelta(hours=hours, minutes=-30)  # 23:30 local, after the change
    assert late.astimezone(NEW_YORK).date() == day and late.astimezone(NEW_YORK).hour == 23
    for i, at in enumerate((early, late, late + timedelta(hours=1))):
        three_arms.expose(f"u{i}", "fast", at=at)
        three_arms.call(f"u{i}", "fast", at=at)
    call_rollup_refresh()
    following = (day + timedelta(days=1)).isoformat()
    assert _day_rows(three_arms) == {day.isoformat(): 2, following: 1}
    buckets = sorted(
        CallRollup.objects.filter(span=RollupSpan.DAY, experiment_id=three_arms.experiment.id)
        .values_list("bucket", flat=True)
        .distinct()
    )
    assert buckets == [first_utc, first_utc + timedelta(hours=hours)]
    data = results_dashboard(experiment=three_arms.experiment, options=ResultsOptions(phase=three_arms.phase))
    assert data["exposures"]["labels"] == [day.isoformat(), following]
    assert data["exposures"]["series"]["fast"] == [2, 1]
    assert _calls_row(three_arms, "fast", date_from=day, date_to=day)["calls"] == 2


@pytest.mark.django_db
def test_a_half_hour_zone_cuts_the_hour_at_its_midnight(three_arms, settings):
    """Asia/Kolkata is UTC+5:30: the UTC hour 18:00-19:00 straddles local midnight."""
    settings.TIME_ZONE = "Asia/Kolkata"
    three_arms.call("u1", "fast", at=datetime(2026, 12, 2, 18, 10, tzinfo=UTC))  # 23:40 on 12-02
    three_arms.call("u2", "fast", at=datetime(2026, 12, 2, 18, 40, tzinfo=UTC))  # 00:10 on 12-03
    call_rollup_refresh()
    assert _day_rows(three_arms) == {"2026-12-02": 1, "2026-12-03": 1}
    hours = CallRollup.objects.filter(span=RollupSpan.HOUR, experiment_id=three_arms.experiment.id)
    assert sorted(hours.values_list("bucket", "calls")) == [
        (datetime(2026, 12, 2, 18, 0, tzinfo=UTC), 1),
        (datetime(2026, 12, 2, 18, 30, tzinfo=UTC), 1),
    ]
    health = routing_health(now=datetime(2026, 12, 2, 19, 5, tzinfo=UTC))
    assert sum(health["chart"]["series"]["avocado-v15"]) == 2


@pytest.mark.django_db
def test_the_routing_health_chart_has_the_24_hours_of_its_window_and_no_future_hour(three_arms):
    three_arms.call("u1", "fast", at=datetime(2026, 12, 2, 19, 1, tzinfo=UTC))  # the current hour
    three_arms.call("u2", "fast", at=datetime(2026, 12, 1, 19, 59, tzinfo=UTC))  # before the window
    call_rollup_refresh()
    chart = routing_health(now=datetime(2026, 12, 2, 19, 5, tzinfo=UTC))["chart"]
    assert len(chart["labels"]) == len(chart["hours"]) == 24
    assert chart["hours"][0] == "2026-12-01T20:00:00+00:00"
    assert chart["hours"][-1] == "2026-12-02T19:00:00+00:00" and chart["labels"][-1] == "19:00"
    assert chart["series"]["avocado-v15"] == [0] * 23 + [1]


@pytest.mark.django_db
def test_rows_cut_in_another_zone_are_rebuilt_never_mixed(three_arms, settings):
    """After the reporting zone changes (or rows from before days followed it: zone ""), the next
    refresh rebuilds every row; until then the pages read none of them."""
    at = datetime(2026, 12, 2, 23, 30, tzinfo=NEW_YORK)
    three_arms.expose("u1", "fast", at=at)
    three_arms.call("u1", "fast", at=at, input_tokens=1000, output_tokens=300, reasoning_tokens=200)
    call_rollup_refresh()
    assert _day_rows(three_arms) == {"2026-12-03": 1}  # a UTC day: the zone is UTC
    CallRollup.objects.update(zone="", tokens=1500)  # as migration 0008 finds the rows
    settings.TIME_ZONE = "America/New_York"
    options = ResultsOptions(phase=three_arms.phase)
    assert results_dashboard(experiment=three_arms.experiment, options=options)["exposures"]["labels"] == []
    call_rollup_refresh()
    assert set(CallRollup.objects.values_list("zone", flat=True)) == {"America/New_York"}
    assert _day_rows(three_arms) == {"2026-12-02": 1}
    assert set(CallRollup.objects.filter(calls=1).values_list("tokens", flat=True)) == {1300}
    data = results_dashboard(experiment=three_arms.experiment, options=options)
    assert data["exposures"]["labels"] == ["2026-12-02"]


@pytest.mark.django_db
def test_the_rebuild_command_recomputes_every_row(three_arms, settings):
    three_arms.call("u1", "fast", at=T0)
    call_rollup_refresh()
    CallRollup.objects.update(tokens=0)
    out = io.StringIO()
    call_command("analytics_rollup_rebuild", stdout=out)
    assert "days in UTC" in out.getvalue()
    assert set(CallRollup.objects.filter(calls=1).values_list("tokens", flat=True)) == {30}


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["error_fallback", "circuit_open", "cooling", "unsupported_contract"])
def test_every_fallback_reason_counts_as_a_fallback(three_arms, reason):
    three_arms.expose("u1", "fast", at=T0)
    three_arms.call("u1", "fast", at=T0 + timedelta(minutes=1), reason=reason, served="azure/muse-special")
    call_rollup_refresh()
    rows = CallRollup.objects.filter(span=RollupSpan.DAY, experiment_id=three_arms.experiment.id)
    assert rows.aggregate(fallbacks=Sum("fallbacks"))["fallbacks"] == 1


def _hour(experiment, bucket, **values):
    qs = CallRollup.objects.filter(span=RollupSpan.HOUR, experiment_id=experiment.id, bucket=bucket)
    return qs.aggregate(calls=Sum("calls"), exposures=Sum("exposures"))


@pytest.mark.django_db
def test_a_row_written_after_its_hour_was_rolled_up_is_counted_by_the_next_run(three_arms):
    from analytics.models import RollupMark
    from analytics.tasks import refresh_call_rollup

    _rows(three_arms)  # hours T0 .. T0+8h and T0+30h: the newest stored hour is T0+30h
    refresh_call_rollup()
    experiment = three_arms.experiment
    assert _hour(experiment, T0) == {"calls": 2, "exposures": 1}
    # drained late: a call and a first exposure of the hour T0, long rolled up
    three_arms.expose("late", "fast", at=T0 + timedelta(minutes=30))
    three_arms.call("late", "fast", at=T0 + timedelta(minutes=31))
    refresh_call_rollup()
    assert _hour(experiment, T0) == {"calls": 3, "exposures": 2}
    day = CallRollup.objects.filter(span=RollupSpan.DAY, experiment_id=experiment.id).aggregate(
        calls=Sum("calls"), exposures=Sum("exposures")
    )
    assert day == {"calls": 12, "exposures": 10}
    refresh_call_rollup()  # run twice (or late): the same rows
    assert _hour(experiment, T0) == {"calls": 3, "exposures": 2}

    # a row whose id a refresh's mark already covers but whose transaction committed after it
    # (ids are allocated before commit): the next refresh scans from an older mark and counts it
    RollupMark.objects.create(
        taken_at=timezone.now(),
        call_record_id=RollupMark.objects.order_by("-pk").first().call_record_id + 1000,
        exposure_id=RollupMark.objects.order_by("-pk").first().exposure_id + 1000,
    )
    three_arms.call("u1", "fast", at=T0 + timedelta(hours=1, minutes=2))
    assert _hour(experiment, T0 + timedelta(hours=1))["calls"] == 1
    refresh_call_rollup()
    assert _hour(experiment, T0 + timedelta(hours=1))["calls"] == 2


@pytest.mark.django_db
def test_marks_older_than_the_one_scanned_from_are_pruned(three_arms):
    from analytics.models import RollupMark
    from analytics.rollups import LATE_ROW_GRACE

    _rows(three_arms)
    now = timezone.now()
    for minutes in (60, 30, 15, 5):  # marks of earlier refreshes
        RollupMark.objects.create(taken_at=now - timedelta(minutes=minutes))
    call_rollup_refresh()
    # the scanned mark: the newest taken >= LATE_ROW_GRACE before the newest one (5 min ago)
    kept = sorted(
        round((now - t).total_seconds() / 60) for t in RollupMark.objects.values_list("taken_at", flat=True)
    )
    assert timedelta(minutes=10) == LATE_ROW_GRACE
    assert kept == [0, 5, 15]
