"""SQL that turns exposures, events and call records into per-variant sufficient statistics.

The database does the heavy lifting: an inner query computes one value per unit, the outer one
reduces them to ``(n, sum, sum of squares)`` per variant, so Python only sees a few numbers per
variant and metric however many units there are. Works on PostgreSQL and SQLite.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from muse_experiments.models import Exposure
from routing.models import CallRecord

from .models import OutcomeEvent


@dataclass(frozen=True)
class VariantAggregate:
    """Per-variant sufficient statistics of one metric: ``n`` units, Σv, Σv²."""

    variant_key: str
    n: int
    sum: float
    sum_squares: float


@dataclass(frozen=True)
class MetricDefinition:
    """A built-in metric. ``kind``: ``proportion`` or ``mean``; ``source``: ``event`` or ``call``."""

    name: str
    kind: str
    source: str
    column: str = ""  # CallRecord column for call metrics
    higher_is_better: bool = True


BUILTIN_METRICS: dict[str, MetricDefinition] = {
    "task_success": MetricDefinition("task_success", "proportion", "event"),
    "rating": MetricDefinition("rating", "mean", "event"),
    "latency_ms": MetricDefinition("latency_ms", "mean", "call", "latency_ms", higher_is_better=False),
    "cost_usd": MetricDefinition("cost_usd", "mean", "call", "cost_usd", higher_is_better=False),
    "output_tokens": MetricDefinition(
        "output_tokens", "mean", "call", "output_tokens", higher_is_better=False
    ),
}


def exposure_counts(*, experiment_id: int, phase: int) -> dict[str, int]:
    """Units per variant in a phase (forced QA units excluded)."""
    sql = f"""
        SELECT variant_key, COUNT(*) FROM {Exposure._meta.db_table}
        WHERE experiment_id = %s AND phase = %s AND reason <> 'forced'
        GROUP BY variant_key
    """
    with connection.cursor() as cur:
        cur.execute(sql, [experiment_id, phase])
        return {key: int(n) for key, n in cur.fetchall()}


def metric_aggregates(
    *, experiment_id: int, phase: int, unit_type: str, metric: MetricDefinition
) -> list[VariantAggregate]:
    """Per-variant ``(n, Σ, Σ²)`` of a metric's per-unit values.

    Event metrics: a unit's value is the maximum value of that event name (0 when absent), so every
    exposed unit counts. Call metrics: a unit's value is the mean of the column over its successful
    calls in this experiment and phase; units with no successful call are left out.
    """
    exposure = Exposure._meta.db_table
    if metric.source == "event":
        unit_col = "session_id" if unit_type == "session" else "user_id"
        per_unit = f"""
            SELECT x.variant_key AS variant_key, x.unit_id AS unit_id, COALESCE(MAX(ev.value), 0) AS v
            FROM {exposure} x
            LEFT JOIN {OutcomeEvent._meta.db_table} ev ON ev.{unit_col} = x.unit_id AND ev.name = %s
            WHERE x.experiment_id = %s AND x.phase = %s AND x.reason <> 'forced'
            GROUP BY x.variant_key, x.unit_id
        """
        params = [metric.name, experiment_id, phase]
    else:
        column = metric.column
        if column not in {f.column for f in CallRecord._meta.fields}:
            raise ValueError(f"unknown call column {column!r}")
        per_unit = f"""
            SELECT x.variant_key AS variant_key, x.unit_id AS unit_id, AVG(CAST(c.{column} AS REAL)) AS v
            FROM {exposure} x
            JOIN {CallRecord._meta.db_table} c
              ON c.experiment_id = x.experiment_id AND c.phase = x.phase AND c.unit_id = x.unit_id
             AND c.status = 'succeeded'
            WHERE x.experiment_id = %s AND x.phase = %s AND x.reason <> 'forced'
            GROUP BY x.variant_key, x.unit_id
        """
        params = [experiment_id, phase]
    sql = f"""
        SELECT u.variant_key, COUNT(*), COALESCE(SUM(u.v), 0), COALESCE(SUM(u.v * u.v), 0)
        FROM ({per_unit}) u GROUP BY u.variant_key ORDER BY u.variant_key
    """
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [VariantAggregate(k, int(n), float(s), float(ss)) for k, n, s, ss in cur.fetchall()]
