"""The results page's call health from the call rollup: per-variant calls, latency, time to first
token, cost and token distributions, exposures per day.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from muse_experiments.experiments.models import Experiment

from .. import histograms
from ..formatting import milliseconds, money_per_thousand, number
from ..models import CallRollup, RollupSpan
from ..rollups import local_day
from ..tables import Column, Table
from .common import ResultsOptions, bounds

HISTOGRAMS = {
    "latency_hist": histograms.LATENCY_MS,
    "ttft_hist": histograms.LATENCY_MS,  # time to first token: streamed calls only
    "cost_hist": histograms.COST_USD,
    "tokens_hist": histograms.TOKENS,
}


def rollup_queryset(*, experiment: Experiment, phase: int, options: ResultsOptions):
    """The phase's day rollup rows inside the date range (days of the reporting zone, DST
    included); rows cut in another zone are left out until the refresh rebuilds them."""
    start, end = bounds(options)
    qs = CallRollup.objects.filter(
        experiment_id=experiment.id,
        phase=phase,
        span=RollupSpan.DAY,
        zone=timezone.get_default_timezone_name(),  # the zone the rollup cut its days in
    )
    if start:
        qs = qs.filter(bucket__gte=start)
    if end:
        qs = qs.filter(bucket__lt=end)
    return qs


def _summed_histograms(qs, key: str, field: str) -> dict[str, list[int]]:
    """``{key value: histogram}`` summed over the rollup rows of ``qs`` (bin-wise).

    PostgreSQL sums the JSON arrays itself (one grouped query, no row leaves the database);
    other databases (SQLite on a laptop) sum in Python.
    """
    size = HISTOGRAMS[field].size
    out: dict[str, list[int]] = defaultdict(lambda: [0] * size)
    if connection.vendor == "postgresql":
        ids_sql, params = qs.filter(calls__gt=0).values("id").query.sql_with_params()
        table = CallRollup._meta.db_table
        with connection.cursor() as cur:
            cur.execute(
                f'SELECT r."{key}", h.idx - 1, SUM(h.value::bigint) FROM {table} r '
                f'CROSS JOIN LATERAL jsonb_array_elements_text(r."{field}") WITH ORDINALITY AS h(value, idx) '
                f"WHERE r.id IN ({ids_sql}) GROUP BY 1, 2",
                params,
            )
            for k, i, n in cur.fetchall():
                if i < size:
                    out[k][i] += int(n)
        return out
    for k, hist in qs.filter(calls__gt=0).values_list(key, field):
        out[k] = histograms.merge([out[k], hist], size)
    return out


def rollup_by(qs, key: str, fields: Iterable[str] = tuple(HISTOGRAMS)) -> dict[str, dict[str, Any]]:
    """Per ``key`` (variant_key or endpoint): summed calls, errors, fallbacks, killed, cost (USD),
    tokens, and the summed histograms named in ``fields``."""
    out: dict[str, dict[str, Any]] = {}
    for r in (
        qs.filter(calls__gt=0)
        .values(key)
        .annotate(
            n=Sum("calls"),
            err=Sum("errors"),
            fb=Sum("fallbacks"),
            kill=Sum("killed"),
            cost=Sum("cost_usd"),
            tok=Sum("tokens"),
        )
    ):
        out[r[key]] = {
            "calls": r["n"] or 0,
            "errors": r["err"] or 0,
            "fallbacks": r["fb"] or 0,
            "killed": r["kill"] or 0,
            "cost": float(r["cost"] or 0.0),
            "tokens": int(r["tok"] or 0),
        }
    for field in fields:
        for k, hist in _summed_histograms(qs, key, field).items():
            if k in out:
                out[k][field] = hist
    return out


def _day(bucket: datetime) -> str:
    """The reporting-zone day of a day row, ``YYYY-MM-DD``."""
    return local_day(bucket, timezone.get_current_timezone()).isoformat()


def exposure_rows(qs) -> list[tuple[datetime, str, int]]:
    """``(hour, variant, units first exposed)`` of the rollup rows with exposures."""
    return list(
        qs.filter(exposures__gt=0).order_by("bucket").values_list("bucket", "variant_key", "exposures")
    )


def exposure_series(*, rows: list[tuple[datetime, str, int]], variants: list[str]) -> dict[str, Any]:
    """Units first exposed per day of the reporting zone per variant: ``{"labels", "series": {v: [...]}}``
    (``rows`` are day rows, see :func:`rollup_queryset`)."""
    per: dict[str, dict[str, int]] = {v: defaultdict(int) for v in variants}
    days: set[str] = set()
    for bucket, variant, n in rows:
        if variant in per:
            day = _day(bucket)
            days.add(day)
            per[variant][day] += n
    labels = sorted(days)
    return {"labels": labels, "series": {v: [per[v].get(d, 0) for d in labels] for v in variants}}


def call_table(*, totals: dict[str, dict[str, Any]], variants: list[str]) -> tuple[Table, dict[str, Any]]:
    """Per-variant call health (from :func:`rollup_by`) and the distributions for the charts:
    ``{histogram: {"labels": bin ranges, "series": {variant: [share of its calls per bin]}}}``
    (cost bins in USD per 1,000 calls; the table's ``cost_per_call`` is exported per call)."""
    empty = {"calls": 0, "errors": 0, "fallbacks": 0, "killed": 0, "cost": 0.0, "tokens": 0}
    merged = {
        v: {h: (totals.get(v) or {}).get(h) or [0] * g.size for h, g in HISTOGRAMS.items()} for v in variants
    }
    table_rows = []
    for v in variants:
        a, lat, ttft = totals.get(v) or empty, merged[v]["latency_hist"], merged[v]["ttft_hist"]
        n = a["calls"]
        table_rows.append(
            {
                "variant": v,
                "calls": n,
                "error_rate": a["errors"] / n if n else None,
                "fallback_share": a["fallbacks"] / n if n else None,
                "killed_share": a["killed"] / n if n else None,
                "latency_p50": histograms.LATENCY_MS.quantile(lat, 0.5),
                "latency_p95": histograms.LATENCY_MS.quantile(lat, 0.95),
                "ttft_p50": histograms.LATENCY_MS.quantile(ttft, 0.5),
                "ttft_p95": histograms.LATENCY_MS.quantile(ttft, 0.95),
                "cost_per_call": a["cost"] / n if n else None,
                "cost_total": a["cost"],
                "tokens_per_call": a["tokens"] / n if n else None,
            }
        )
    table = Table(
        id="calls",
        title="Calls per variant",
        note="Latency and time-to-first-token percentiles are read from log-spaced histograms (within "
        "one bin, about ±15 %); time to first token counts streamed calls only.",
        columns=[
            Column("variant", "Variant"),
            Column("calls", "Calls", "int"),
            Column("error_rate", "Failed", "pct"),
            Column("fallback_share", "Served by a fallback", "pct"),
            Column("killed_share", "Rerouted by a kill switch", "pct"),
            Column("latency_p50", "Latency p50", "ms"),
            Column("latency_p95", "Latency p95", "ms"),
            Column("ttft_p50", "First token p50", "ms"),
            Column("ttft_p95", "First token p95", "ms"),
            Column("cost_per_call", "Cost per 1,000 calls", "money_k"),
            Column("cost_total", "Cost", "money"),
            Column("tokens_per_call", "Tokens per call", "num"),
        ],
        rows=table_rows,
    )
    charts = {}
    # cost per call in dollars per 1,000 such calls ($0.00772, not $0.00000772)
    formats = {
        "latency_hist": milliseconds,
        "ttft_hist": milliseconds,
        "cost_hist": money_per_thousand,
        "tokens_hist": number,
    }
    for h, g in HISTOGRAMS.items():
        labels = g.range_labels(formats[h])
        used = [i for i in range(g.size) if any(merged[v][h][i] for v in variants)]
        lo, hi = (used[0], used[-1] + 1) if used else (0, 0)
        charts[h] = {
            "labels": labels[lo:hi],
            "series": {v: [c / (sum(merged[v][h]) or 1) for c in merged[v][h][lo:hi]] for v in variants},
        }
    return table, charts
