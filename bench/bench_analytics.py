"""Warehouse-scale results benchmark: 1,000,000 sessions, 10,000,000 routing records in PostgreSQL.

Run:  .venv/bin/python bench/bench_analytics.py [--units 1000000] [--calls-per-unit 10] [--rebuild]
      (needs PostgreSQL at $BENCH_PG, default postgres://postgres@127.0.0.1:5432; creates and reuses
      the database ``muse_bench``; never part of the test suite)

What it does:

1. Creates ``muse_bench`` (if missing), migrates it, seeds the catalogue and a 3-arm experiment
   (unit = session) with 6 metrics: task_success (primary, proportion), error_rate and latency_ms
   (guardrails: ratio, mean), cost_usd, output_tokens (99th-percentile capped), fallback_rate
   (ratio).
2. Generates the data with ``generate_series`` INSERTs straight into the real tables
   (``routing_completionjob``, ``routing_callrecord``, ``muse_experiments_exposure``,
   ``analytics_outcomeevent``): secondary indexes are dropped during the load and rebuilt after, FK
   triggers are off for the loading session (the rows are consistent by construction). 0.1 % of the
   units get one call under another variant (multiple exposure), ~1 % of calls are fallbacks.
   Reused on later runs unless ``--rebuild``.
3. Times ``results_compute`` (SQL aggregation + engine + snapshot write) — the time from
   "compute results" to a stored snapshot — and the SQL statement alone.
4. Takes the snapshot's per-variant sufficient statistics (6 metrics × 2 treatments) and times our
   engine per metric × variant next to GrowthBook ``gbstats`` 0.8.0 on the same inputs, run in its
   own virtualenv via ``bench/bench_gbstats_compare.py`` (created on first use).

Targets (issue 7): full results ≤ 30 s; engine ≥ 10× faster than gbstats per comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BENCH_DB = "muse_bench"
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
EXPERIMENT_KEY = "bench-scale"


def _create_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone():
            conn.execute(f"CREATE DATABASE {BENCH_DB}")


def _setup_django() -> None:
    os.environ["DATABASE_URL"] = f"{PG}/{BENCH_DB}"
    os.environ.setdefault("DJANGO_DEBUG", "true")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    os.environ.setdefault("MUSE_VAR_DIR", "/tmp/muse-bench")
    os.environ.setdefault("SIMULATED_UPSTREAMS", "127.0.0.1:9")  # the seed's address (never called)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _filler(cur, table: str, given: dict[str, str]) -> tuple[list[str], list[str]]:
    """Column names and SQL values for an INSERT … SELECT: ``given`` plus a neutral value for every
    other NOT NULL column (so the script survives columns other engineers add)."""
    cur.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        [table],
    )
    neutral = {
        "uuid": "gen_random_uuid()",
        "jsonb": "'{}'::jsonb",
        "boolean": "false",
        "timestamp with time zone": "now()",
        "text": "''",
        "character varying": "''",
    }
    cols, vals = [], []
    for name, dtype, nullable in cur.fetchall():
        if name == "id" and name not in given and dtype in ("bigint", "integer"):
            continue  # identity
        if name in given:
            cols.append(name)
            vals.append(given[name])
        elif nullable == "NO":
            cols.append(name)
            vals.append(neutral.get(dtype, "0"))
    return cols, vals


def _load(cur, table: str, given: dict[str, str], source: str) -> None:
    cols, vals = _filler(cur, table, given)
    cur.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(vals)} FROM {source}")


def _without_indexes(cur, tables: list[str]):
    """Drop the tables' secondary indexes (not primary keys / unique constraints); returns their DDL."""
    cur.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) AND indexname NOT IN "
        "(SELECT conname FROM pg_constraint WHERE contype IN ('p', 'u'))",
        [tables],
    )
    ddl = cur.fetchall()
    for name, _ in ddl:
        cur.execute(f'DROP INDEX IF EXISTS "{name}"')
    return [d for _, d in ddl]


def generate(*, units: int, calls_per_unit: int, rebuild: bool):
    """The experiment, generating its rows when missing (or ``rebuild``)."""
    from django.db import connection, transaction

    from analytics.models import ExperimentAnalysisSettings, MetricDefinition
    from muse_experiments.experiments.models import Experiment
    from muse_experiments.experiments.services.edits import experiment_create
    from muse_experiments.experiments.services.lifecycle import experiment_start
    from muse_experiments.experiments.services.variants import VariantInput
    from routing.catalogue import avocado_id, endpoint_seeds, provider_seeds
    from routing.models import ModelEndpoint
    from routing.ops_services import catalogue_seed

    experiment = Experiment.objects.filter(key=EXPERIMENT_KEY).first()
    with connection.cursor() as cur:
        if experiment is not None and not rebuild:
            cur.execute("SELECT COUNT(*) FROM routing_callrecord WHERE experiment_id = %s", [experiment.id])
            if cur.fetchone()[0] == units * calls_per_unit:
                print(f"reusing {units:,} units / {units * calls_per_unit:,} call records in {BENCH_DB}")
                return experiment
        for table in (
            "routing_attempt",
            "routing_callrecord",
            "routing_completionjob",
            "muse_experiments_exposure",
            "analytics_outcomeevent",
            "analytics_resultsnapshot",
            "analytics_guardrailaction",
        ):
            cur.execute(f"TRUNCATE {table} CASCADE")
    Experiment.objects.filter(key=EXPERIMENT_KEY).delete()
    if not ModelEndpoint.objects.exists():
        catalogue_seed(
            providers=provider_seeds("http://127.0.0.1:9"), endpoints=endpoint_seeds(), actor="bench"
        )
    eps = {e.public_id: e for e in ModelEndpoint.objects.all()}
    arms = [("control", avocado_id(14)), ("t1", avocado_id(15)), ("t2", "azure/muse-special")]
    experiment = experiment_create(
        key=EXPERIMENT_KEY,
        name="scale benchmark",
        actor="bench",
        variants=[
            VariantInput(key=k, weight=1 / 3, endpoint=eps[pid], is_control=(i == 0))
            for i, (k, pid) in enumerate(arms)
        ],
        primary_metric="task_success",
        guardrail_metrics=["error_rate", "latency_ms"],
    )
    experiment = experiment_start(experiment=experiment, actor="bench")
    ExperimentAnalysisSettings.objects.update_or_create(
        experiment=experiment,
        defaults={"secondary_metrics": ["output_tokens", "fallback_rate"], "sequential_tuning": float(units)},
    )
    MetricDefinition.objects.filter(name="output_tokens").update(capping="percentile", cap_value=0.99)

    n_calls = units * calls_per_unit
    endpoint_of = dict(arms)
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")  # no FK triggers while loading
        cur.execute("SET LOCAL maintenance_work_mem = '512MB'")
        cur.execute("SELECT setseed(0.42)")
        tables = [
            "routing_completionjob",
            "routing_callrecord",
            "muse_experiments_exposure",
            "analytics_outcomeevent",
        ]
        ddl = _without_indexes(cur, tables)
        exp_id, phase = experiment.id, experiment.phase
        variant_sql = "(CASE g.u % 3 WHEN 0 THEN 'control' WHEN 1 THEN 't1' ELSE 't2' END)"
        _load(
            cur,
            "muse_experiments_exposure",
            {
                "experiment_id": str(exp_id),
                "phase": str(phase),
                "unit_id": "'s' || g.u",
                "variant_key": variant_sql,
                "reason": "'assigned'",
                "first_exposed_at": "TIMESTAMPTZ '2026-01-01 00:00:00+00'",
            },
            f"(SELECT u FROM generate_series(0, {units - 1}) u) g",
        )
        print(f"  exposures: {time.perf_counter() - t0:6.1f} s")
        _load(
            cur,
            "routing_completionjob",
            {
                "id": "md5('job' || g.i)::uuid",
                "session_id": "'s' || (g.i % " + str(units) + ")",
                "user_id": "'u' || (g.i % " + str(units) + ")",
                "request": "'{}'::jsonb",
                "status": "'succeeded'",
                "created_at": "TIMESTAMPTZ '2026-01-01 00:00:00+00' + g.i * INTERVAL '1 millisecond'",
            },
            f"generate_series(0, {n_calls - 1}) AS g(i)",
        )
        print(f"  completion jobs: {time.perf_counter() - t0:6.1f} s")
        # One row per call: unit u = i mod units; the unit's 10th call sometimes carries another
        # variant (multiple exposure); failures, fallbacks, latency, cost, tokens, tool calls vary.
        vk = (
            f"(CASE WHEN g.i >= {n_calls - units} AND g.u % 1000 = 7 THEN "
            "(CASE g.u % 3 WHEN 0 THEN 't1' WHEN 1 THEN 't2' ELSE 'control' END) ELSE "
            + variant_sql
            + " END)"
        )
        ep_case = "CASE {v} " + " ".join(f"WHEN '{k}' THEN '{p}'" for k, p in endpoint_of.items()) + " END"
        _load(
            cur,
            "routing_callrecord",
            {
                "job_id": "md5('job' || g.i)::uuid",
                "session_id": "'s' || g.u",
                "user_id": "'u' || g.u",
                "subagent": "'coder'",
                "experiment_id": str(exp_id),
                "experiment_key": f"'{EXPERIMENT_KEY}'",
                "phase": str(phase),
                "variant_key": "g.vk",
                "unit_id": "'s' || g.u",
                "assigned_endpoint": ep_case.format(v="g.vk"),
                "served_endpoint": f"CASE WHEN g.r1 < 0.02 + 0.01 * (g.u % 3) THEN '' WHEN g.r2 < 0.01 THEN "
                f"'anthropic/claude-haiku-5-5' ELSE {ep_case.format(v='g.vk')} END",
                "reason": "CASE WHEN g.r1 >= 0.02 + 0.01 * (g.u % 3) AND g.r2 < 0.01 THEN 'error_fallback' ELSE 'assigned' END",
                "status": "CASE WHEN g.r1 < 0.02 + 0.01 * (g.u % 3) THEN 'failed' ELSE 'succeeded' END",
                "error_kind": "''",
                "latency_ms": "CASE WHEN g.r1 < 0.02 + 0.01 * (g.u % 3) THEN NULL ELSE "
                "150 + 200 * g.r3 * g.r3 - 5 * (g.u % 3) END",
                "input_tokens": "(200 + 800 * g.r4)::int",
                "output_tokens": "(50 + 400 * g.r3 + 10 * (g.u % 3))::int",
                "reasoning_tokens": "0",
                "cached_input_tokens": "0",
                "cache_write_tokens": "0",
                "cost_usd": "round((0.0004 + 0.001 * g.r4)::numeric, 8)",
                "tool_calls": "CASE WHEN g.r2 > 0.8 THEN 1 ELSE 0 END",
                "created_at": "TIMESTAMPTZ '2026-01-01 00:00:01+00' + g.i * INTERVAL '1 millisecond'",
            },
            f"(SELECT i, i % {units} AS u, random() AS r1, random() AS r2, random() AS r3, random() AS r4, "
            f"{vk.replace('g.i', 'i').replace('g.u', '(i % ' + str(units) + ')')} AS vk "
            f"FROM generate_series(0, {n_calls - 1}) AS i) g",
        )
        print(f"  call records: {time.perf_counter() - t0:6.1f} s")
        _load(
            cur,
            "analytics_outcomeevent",
            {
                "event_id": "'ts-' || g.u",
                "name": "'task_success'",
                "session_id": "'s' || g.u",
                "user_id": "'u' || g.u",
                "value": "CASE WHEN random() < 0.30 + 0.005 * (g.u % 3) THEN 1.0 ELSE 0.0 END",
                "occurred_at": "TIMESTAMPTZ '2026-01-02 00:00:00+00'",
                "received_at": "now()",
            },
            f"(SELECT u FROM generate_series(0, {units - 1}) u) g",
        )
        print(f"  events: {time.perf_counter() - t0:6.1f} s")
        for statement in ddl:
            cur.execute(statement)
        print(f"  indexes rebuilt: {time.perf_counter() - t0:6.1f} s")
    with connection.cursor() as cur:
        for table in (
            "routing_callrecord",
            "routing_completionjob",
            "muse_experiments_exposure",
            "analytics_outcomeevent",
        ):
            cur.execute(f"VACUUM ANALYZE {table}")
    print(f"generated {units:,} units / {n_calls:,} call records in {time.perf_counter() - t0:.1f} s")
    return experiment


def _case_arm(kind: str, s: dict) -> dict:
    if kind == "ratio":
        return {
            "n": s["n"],
            "m_sum": s["numerator_sum"],
            "m_ss": s["numerator_sum_squares"],
            "d_sum": s["denominator_sum"],
            "d_ss": s["denominator_sum_squares"],
            "md": s["sum_of_products"],
        }
    return dict(s)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=1_000_000)
    ap.add_argument("--calls-per-unit", type=int, default=10)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--runs", type=int, default=2, help="timed results computations")
    args = ap.parse_args()
    _create_database()
    _setup_django()
    from bench_gbstats_compare import compare_report, ours_one, run_gbstats, time_ours

    from analytics.models import ResultSnapshot
    from analytics.services import results_compute

    experiment = generate(units=args.units, calls_per_unit=args.calls_per_unit, rebuild=args.rebuild)
    ResultSnapshot.objects.filter(experiment=experiment).delete()
    timings = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        snapshot = results_compute(experiment=experiment)
        timings.append(time.perf_counter() - t0)
    r = snapshot.results
    print(
        f"\ncompute results → stored snapshot ({args.units:,} units, {args.units * args.calls_per_unit:,} calls, "
        f"{len(r['metrics'])} metrics × {len(r['variants']) - 1} treatments, ITT + served):"
    )
    print(
        "  runs: "
        + ", ".join(f"{t:.2f} s" for t in timings)
        + f"   (service-measured {snapshot.duration_ms / 1000:.2f} s)"
    )
    print(f"  population: {r['population']}")
    print(f"  SRM: p={r['srm']['p_value']}, flagged={r['srm']['flagged']}")
    for m in r["metrics"]:
        for c in m["comparisons"]:
            print(
                f"  {m['name']:<14} {c['variant']:<4} {c['status']:<12} lift {c.get('relative_lift') or 0:+.4%}  "
                f"p={c.get('p_value')}  seq p={c['sequential']['p_value']}  caps={r['caps'].get(m['name'])}"
            )

    kinds = {"proportion": "proportion", "mean": "mean", "ratio": "ratio"}
    cases = []
    for m in r["metrics"]:
        inputs = snapshot.inputs["metrics"]["itt"][m["name"]]
        for v in r["variants"]:
            if v["is_control"]:
                continue
            kind = kinds[m["type"]]
            control = next(x for x in r["variants"] if x["is_control"])["key"]
            cases.append(
                {
                    "kind": kind,
                    "metric": m["name"],
                    "control": _case_arm(kind, inputs[control]),
                    "treatment": _case_arm(kind, inputs[v["key"]]),
                    "tuning": r["sequential_tuning"],
                }
            )
    repeat = 20
    gb = run_gbstats(cases, repeat=repeat)
    ours = [ours_one(c) for c in cases]
    mine = time_ours(cases, repeat=repeat)
    n = len(cases)
    print(f"\nengine per metric × variant on the snapshot's inputs ({n} comparisons, best of {repeat}):")
    print(
        f"  full (fixed + sequential + Bayesian): ours {mine['seconds_full'] / n * 1e6:8.1f} µs   "
        f"gbstats {gb['version']} {gb['seconds_full'] / n * 1e6:8.1f} µs   ×{gb['seconds_full'] / mine['seconds_full']:.1f}"
    )
    print(
        f"  frequentist only:                     ours {mine['seconds_frequentist'] / n * 1e6:8.1f} µs   "
        f"gbstats {gb['seconds_frequentist'] / n * 1e6:8.1f} µs   ×{gb['seconds_frequentist'] / mine['seconds_frequentist']:.1f}"
    )
    if mine["vectorised_cases"]:
        per = mine["seconds_vectorised"] / mine["vectorised_cases"]
        print(
            f"  frequentist vectorised (means+props): ours {per * 1e6:8.2f} µs   "
            f"gbstats {gb['seconds_frequentist'] / n * 1e6:8.1f} µs   ×{gb['seconds_frequentist'] / n / per:.0f}"
        )
    print("\nagreement with gbstats on these inputs:")
    for kind, f, d, verdict in compare_report(cases, ours, gb["results"]):
        if verdict != "agrees":
            print(f"  {kind:<11}{f:<24}{d:.2e}  {verdict}")
    print("  (all other kind × field pairs agree to < 1e-6 relative)")


if __name__ == "__main__":
    main()
