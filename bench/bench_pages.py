"""Analyst pages at scale: server time of each page for an experiment with 1,000,000 units.

Run:  .venv/bin/python bench/bench_pages.py [--units 1000000] [--days 14] [--repeat 20] [--rebuild]
      (PostgreSQL at $BENCH_PG, default postgres://postgres@127.0.0.1:5432; creates and reuses the
      database $BENCH_PAGES_DB, default ``muse_bench_pages``; never part of the test suite)

What it does:

1. Generates the experiment with ``bench_analytics.generate`` (3 arms, 1 call per unit by
   default), then spreads exposures, calls and outcome events over ``--days`` days (a unit's call
   and event follow its first exposure), so the time series have realistic shapes.
2. Runs what the analytics task runs: ``results_compute`` (snapshot + lift points) and
   ``call_rollup_refresh`` (hourly rollup), timed. The schedule would have stored one snapshot
   every 15 minutes: the snapshot's lift points are copied at those times (CIs widened by
   sqrt(elapsed share)) so the cumulative-lift chart reads as many rows as it would in production.
3. Times each page through Django's test client in-process (server time: middleware, queries,
   templates; no network), ``--repeat`` times after one warm-up, and prints median / p95 / max
   against the 500 ms target, with the queries each page ran.

The pages never read raw call records: ``CaptureQueriesContext`` asserts that no page query
touches ``routing_callrecord`` or ``muse_experiments_exposure``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_analytics  # noqa: E402  (shares the generator of the results benchmark)

TARGET_MS = 500.0
RAW_TABLES = ("routing_callrecord", "muse_experiments_exposure", "analytics_outcomeevent")


def _spread(*, experiment, days: int) -> None:
    """Move first exposures, calls and events onto ``days`` days ending now (idempotent)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT max(first_exposed_at) - min(first_exposed_at) FROM muse_experiments_exposure "
            "WHERE experiment_id = %s",
            [experiment.id],
        )
        span = cur.fetchone()[0]
        if span is not None and span.total_seconds() > 86400:
            return
        t0 = time.perf_counter()
        seconds = days * 86400

        def offset(column: str) -> str:
            return f"((hashtext({column}) & 2147483647) %% {seconds}) * INTERVAL '1 second'"

        start = f"(date_trunc('hour', now()) - INTERVAL '{days} days')"
        cur.execute(
            f"UPDATE muse_experiments_exposure SET first_exposed_at = {start} + {offset('unit_id')} "
            "WHERE experiment_id = %s",
            [experiment.id],
        )
        cur.execute(
            f"UPDATE routing_callrecord SET created_at = {start} + {offset('session_id')} "
            "+ INTERVAL '5 seconds' WHERE experiment_id = %s",
            [experiment.id],
        )
        cur.execute(
            f"UPDATE analytics_outcomeevent SET occurred_at = {start} + {offset('session_id')} "
            "+ INTERVAL '10 minutes'",
            [],
        )
        from django.utils import timezone

        cur.execute(
            "UPDATE muse_experiments_experiment SET started_at = %s WHERE id = %s",
            [timezone.now() - timezone.timedelta(days=days), experiment.id],
        )
        cur.execute(
            "UPDATE muse_experiments_experimentphase SET started_at = %s WHERE experiment_id = %s",
            [timezone.now() - timezone.timedelta(days=days), experiment.id],
        )
        for table in RAW_TABLES:
            cur.execute(f"VACUUM ANALYZE {table}")
    print(f"spread over {days} days in {time.perf_counter() - t0:.1f} s")


def _compute(*, experiment, days: int) -> None:
    """What the analytics task does, timed; then the schedule's lift-point history."""
    from django.db import connection

    from analytics.models import CallRollup, LiftPoint, ResultSnapshot
    from analytics.rollups import call_rollup_refresh
    from analytics.services import results_compute

    ResultSnapshot.objects.filter(experiment=experiment).delete()
    CallRollup.objects.all().delete()
    t0 = time.perf_counter()
    snapshot = results_compute(experiment=experiment, apply_guardrails=False)
    t1 = time.perf_counter()
    rows = call_rollup_refresh()
    t2 = time.perf_counter()
    print(
        f"analytics task: results_compute {t1 - t0:.1f} s; call_rollup_refresh {t2 - t1:.1f} s ({rows:,} rollup rows)"
    )
    points = 4 * 24 * days  # one snapshot every 15 minutes
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO analytics_liftpoint (snapshot_id, experiment_id, phase, computed_at, analysis, metric, "
            "variant_key, cuped, units, relative_lift, ci_low, ci_high, sequential_low, sequential_high) "
            "SELECT snapshot_id, experiment_id, phase, now() - (k * INTERVAL '15 minutes'), analysis, metric, "
            "variant_key, cuped, (units * (1 - k::float / %s))::int, relative_lift, "
            "relative_lift - (relative_lift - ci_low) * sqrt(%s / (%s - k::float)), "
            "relative_lift + (ci_high - relative_lift) * sqrt(%s / (%s - k::float)), "
            "relative_lift - (relative_lift - sequential_low) * sqrt(%s / (%s - k::float)), "
            "relative_lift + (sequential_high - relative_lift) * sqrt(%s / (%s - k::float)) "
            "FROM analytics_liftpoint, generate_series(1, %s - 1) AS k WHERE snapshot_id = %s",
            [points] * 9 + [points, snapshot.pk],
        )
    print(
        f"lift points: {LiftPoint.objects.filter(experiment=experiment).count():,} (one snapshot per 15 min)"
    )


def _time_pages(*, experiment, repeat: int) -> list[tuple[str, float, float, float, int]]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.signals import request_started
    from django.db import connection, reset_queries
    from django.test import Client

    request_started.disconnect(reset_queries)  # keep every query of a request for the check below
    user, _ = get_user_model().objects.get_or_create(username="bench-analyst", defaults={"is_staff": True})
    user.groups.add(Group.objects.get(name="Analyst"))  # the pages' view permissions (README "Roles")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    key = experiment.key
    pages = [
        ("experiments list", "/results/"),
        ("results (default)", f"/results/{key}/"),
        ("results, Bayesian, served", f"/results/{key}/?engine=bayesian&analysis=served"),
        ("results, latency, CUPED off", f"/results/{key}/?metric=latency_ms&cuped=off"),
        ("results, last 3 days", f"/results/{key}/?from={_days_ago(3)}"),
        ("results metric table as CSV", f"/results/{key}/?export=csv&table=metrics"),
        ("routing health", "/routing/health/"),
    ]
    out = []
    for name, url in pages:
        seen: list[str] = []

        def record(execute, sql, params, many, context, seen=seen):
            seen.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(record):
            response = client.get(url)  # warm-up, recording every statement
        assert response.status_code == 200, (url, response.status_code)
        raw = [sql for sql in seen if any(t in sql for t in RAW_TABLES)]
        assert not raw, f"{url} read raw rows: {raw[0][:200]}"
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - t) * 1000.0)
        times.sort()
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        out.append((name, statistics.median(times), p95, times[-1], len(seen)))
    return out


def _days_ago(n: int) -> str:
    from django.utils import timezone

    return (timezone.localdate() - timezone.timedelta(days=n)).isoformat()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=1_000_000)
    ap.add_argument("--calls-per-unit", type=int, default=1)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument(
        "--reuse-snapshot", action="store_true", help="skip the analytics task when a snapshot exists"
    )
    args = ap.parse_args()
    bench_analytics.BENCH_DB = os.environ.get("BENCH_PAGES_DB", "muse_bench_pages")
    bench_analytics._create_database()
    bench_analytics._setup_django()
    experiment = bench_analytics.generate(
        units=args.units, calls_per_unit=args.calls_per_unit, rebuild=args.rebuild
    )
    _spread(experiment=experiment, days=args.days)
    from analytics.models import ResultSnapshot

    if not (args.reuse_snapshot and ResultSnapshot.objects.filter(experiment=experiment).exists()):
        _compute(experiment=experiment, days=args.days)
    from muse_experiments.experiments.models import Exposure

    units = Exposure.objects.filter(experiment=experiment).count()
    print(
        f"\n{units:,} units; server time per page over {args.repeat} requests (target ≤ {TARGET_MS:.0f} ms):"
    )
    print(f"{'page':34} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'queries':>8}  verdict")
    for name, median, p95, worst, queries in _time_pages(experiment=experiment, repeat=args.repeat):
        verdict = "ok" if p95 <= TARGET_MS else "OVER TARGET"
        print(f"{name:34} {median:10.1f} {p95:8.1f} {worst:8.1f} {queries:8d}  {verdict}")


if __name__ == "__main__":
    main()
