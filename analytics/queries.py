"""SQL that turns exposures, events and call records into per-variant sufficient statistics.

The database does the heavy lifting in **one statement per analysis**, on PostgreSQL and SQLite:

1. ``x``  — the phase's exposures (first exposure = the assigned variant; forced QA units out).
2. ``c``  — one row per unit over its call records in the phase: per-component aggregates
   (sum / mean / count / any of a whitelisted per-call expression), whether the unit's calls carry
   another variant key than its exposure (*multiple exposure*), and whether any call was not
   served as assigned (*deviates*: routing reason not ``assigned``/``sticky``, or served by another
   endpoint than the variant's).
3. ``e``  — one row per unit over its outcome events at or after its first exposure.
4. ``pc``/``pe`` — pre-exposure windows of calls / events for CUPED covariates.
5. ``u``  — one row per exposed unit with every component's value ``y`` (and covariate ``x``).
6. ``capN`` — percentile caps: the nearest-rank quantile (rank ``ceil(q·n)``) over the analysed
   units of all arms, with window functions (both databases have them).
7. final — ``GROUP BY variant, multiple, deviates``: units, and per component ``n, Σy, Σy²``
   (+ ``Σx, Σx², Σxy``) and the units with data (an observation of the component: a unit
   with no event of its name has ``y = 0`` but no data), and ``Σ y_a·y_b`` for ratio pairs.

Python only sees a handful of numbers per variant and metric, whatever the number of units, and
derives the intent-to-treat and served-as-assigned populations from the same rows
(:meth:`Aggregates.population`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import connection

from muse_experiments.experiments.models import Exposure
from routing.models import FALLBACK_REASONS, CallRecord

from .models import OutcomeEvent
from .sums import ComponentSums, GroupRow, VariantStats

#: What one call contributes, as SQL over the ``c`` alias (double precision; NULL = no value).
CALL_VALUE_SQL: dict[str, str] = {
    "latency_ms": "CAST(c.latency_ms AS DOUBLE PRECISION)",
    "ttft_ms": "CAST(c.ttft_ms AS DOUBLE PRECISION)",
    "cost_usd": "CAST(c.cost_usd AS DOUBLE PRECISION)",
    "input_tokens": "CAST(c.input_tokens AS DOUBLE PRECISION)",
    "cached_input_tokens": "CAST(c.cached_input_tokens AS DOUBLE PRECISION)",
    "output_tokens": "CAST(c.output_tokens AS DOUBLE PRECISION)",
    "reasoning_tokens": "CAST(c.reasoning_tokens AS DOUBLE PRECISION)",
    "tool_calls": "CAST(c.tool_calls AS DOUBLE PRECISION)",
    "calls": "1.0",
    "error": "CASE WHEN c.status = 'failed' THEN 1.0 ELSE 0.0 END",
    "fallback": f"CASE WHEN c.reason IN ({', '.join(repr(str(r)) for r in sorted(FALLBACK_REASONS))}) "
    "THEN 1.0 ELSE 0.0 END",
    "has_tool_call": "CASE WHEN c.tool_calls > 0 THEN 1.0 ELSE 0.0 END",
    "succeeded": "CASE WHEN c.status = 'succeeded' THEN 1.0 ELSE 0.0 END",
}
#: Routing reasons that mean "served by the assigned variant's own chain".
AS_ASSIGNED_REASONS = ("assigned", "sticky")
#: Tolerance on ``q·n`` when ranking for a percentile cap (so 0.99·100 is rank 99, not 100).
RANK_EPS = 1e-9


@dataclass(frozen=True)
class Component:
    """One per-unit value to aggregate (a non-ratio metric, or one side of a ratio).

    ``aggregation``: sum | mean | count | any. ``capping``: none | fixed | percentile with
    ``cap_value`` (the cap, or a quantile in (0, 1)). ``covariate_days`` > 0 adds a pre-exposure
    covariate over that many days before the unit's first exposure.
    """

    key: str
    source: str  # "event" | "call"
    aggregation: str
    event_name: str = ""
    call_value: str = ""
    capping: str = "none"
    cap_value: float | None = None
    covariate_days: int = 0

    def __post_init__(self) -> None:
        if self.source == "call" and self.call_value not in CALL_VALUE_SQL:
            raise ValueError(f"unknown call value {self.call_value!r}")
        if self.source not in ("call", "event"):
            raise ValueError(f"unknown source {self.source!r}")
        if self.aggregation not in ("sum", "mean", "count", "any"):
            raise ValueError(f"unknown aggregation {self.aggregation!r}")
        if self.capping not in ("none", "fixed", "percentile"):
            raise ValueError(f"unknown capping {self.capping!r}")


@dataclass
class Aggregates:
    """Everything one SQL statement returned, plus the caps it applied (``{component key: cap}``)."""

    rows: list[GroupRow]
    caps: dict[str, float | None]

    def population(self, *, include_multiple: bool, served_only: bool) -> dict[str, VariantStats]:
        """Per-variant sums of the analysed units.

        Intent-to-treat (``served_only=False``) keeps every unit under its assigned variant;
        served-as-assigned drops units with any deviating call. Units exposed to several variants
        are dropped unless ``include_multiple``.
        """
        out: dict[str, VariantStats] = {}
        for row in self.rows:
            if (row.multi and not include_multiple) or (row.deviates and served_only):
                continue
            agg = out.setdefault(row.variant_key, VariantStats())
            agg.units += row.units
            for key, sums in row.components.items():
                agg.components.setdefault(key, ComponentSums()).add(sums)
            for pair, value in row.cross.items():
                agg.cross[pair] = agg.cross.get(pair, 0.0) + value
        return out

    def counts(self) -> dict[str, dict[str, int]]:
        """``{variant: {"units", "multiple_exposure", "deviating", "deviating_analysed"}}`` over all units."""
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            c = out.setdefault(row.variant_key, {"units": 0, "multiple_exposure": 0, "deviating": 0})
            c["units"] += row.units
            if row.multi:
                c["multiple_exposure"] += row.units
            if row.deviates:
                c["deviating"] += row.units
        return out


class _Sql:
    """SQL text with its parameters kept in textual order."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list[object] = []

    def add(self, text: str, *params: object) -> _Sql:
        if text.count("%s") != len(params):
            raise AssertionError(f"placeholder/parameter mismatch in {text!r}")
        self.parts.append(text)
        self.params.extend(params)
        return self

    @property
    def text(self) -> str:
        return "\n".join(self.parts)


def _window_start(column: str, days_param: bool) -> str:
    """SQL for ``column − %s days`` (one parameter)."""
    assert days_param
    if connection.vendor == "postgresql":
        return f"({column} - (%s * INTERVAL '1 day'))"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', {column}, '-' || %s || ' days')"


def _agg(aggregation: str, cond: str, value: str) -> str:
    """Aggregate ``value`` over rows where ``cond`` holds (NULL when no row qualifies, except count)."""
    if aggregation == "sum":
        return f"SUM(CASE WHEN {cond} THEN {value} END)"
    if aggregation == "mean":
        return f"AVG(CASE WHEN {cond} THEN {value} END)"
    if aggregation == "count":
        return f"COUNT(CASE WHEN {cond} THEN {value} END)"
    return f"MAX(CASE WHEN {cond} THEN (CASE WHEN {value} > 0 THEN 1.0 ELSE 0.0 END) END)"


def aggregate(
    *,
    experiment_id: int,
    phase: int,
    unit_type: str,
    variant_endpoints: Mapping[str, str],
    components: Sequence[Component],
    cross_products: Sequence[tuple[str, str]] = (),
    include_multiple: bool = False,
    first_exposures_only: bool = False,
    calls_through_phase: int | None = None,
) -> Aggregates:
    """Run the aggregation statement (see module docstring) and return its grouped sums.

    Args:
        variant_endpoints: ``{variant key: endpoint public id}`` for the served-as-assigned flag.
        components: per-unit values to aggregate (keys must be unique SQL-safe identifiers).
        cross_products: pairs of component keys whose ``Σ y_a·y_b`` is needed (ratio metrics).
        include_multiple: percentile caps are computed over all units (True) or only units
            exposed to a single variant (False, the default analysis).
        first_exposures_only: keep only units hashed in ``phase`` (no ``sticky`` exposure: units
            that entered in an earlier phase of the seed run are left to that phase) -- a
            bandit's period of first exposure.
        calls_through_phase: count the units' calls of phases ``phase`` to this one (the rest of
            the seed run), not only of ``phase``.

    Raises:
        ValueError: duplicate/unsafe component keys, unknown cross-product keys, no variants.
    """
    keys = [comp.key for comp in components]
    if len(set(keys)) != len(keys) or not all(k.isidentifier() and k.isascii() for k in keys):
        raise ValueError(f"component keys must be unique identifiers, got {keys}")
    if any(a not in keys or b not in keys for a, b in cross_products):
        raise ValueError("cross products must name known components")
    if not variant_endpoints:
        raise ValueError("at least one variant is needed")
    exposure, calls, events = (
        Exposure._meta.db_table,
        CallRecord._meta.db_table,
        OutcomeEvent._meta.db_table,
    )
    unit_col = "user_id" if unit_type == "user" else "session_id"
    call_comps = [c for c in components if c.source == "call"]
    event_comps = [c for c in components if c.source == "event"]
    cov_calls = [c for c in call_comps if c.covariate_days > 0]
    cov_events = [c for c in event_comps if c.covariate_days > 0]

    sticky_filter = " AND x.reason <> 'sticky'" if first_exposures_only else ""
    q = _Sql()
    q.add(
        f"""WITH x AS (
  SELECT x.unit_id AS unit_id, x.variant_key AS variant_key, x.first_exposed_at AS first_exposed_at
  FROM {exposure} x WHERE x.experiment_id = %s AND x.phase = %s AND x.reason <> 'forced'{sticky_filter}
),""",
        experiment_id,
        phase,
    )
    # Per-unit call aggregates + multiple-exposure / deviation flags.
    endpoint_case = " ".join("WHEN %s THEN %s" for _ in variant_endpoints)
    endpoint_params = [p for kv in variant_endpoints.items() for p in kv]
    reasons = ", ".join("%s" for _ in AS_ASSIGNED_REASONS)
    cols = [
        "MIN(NULLIF(c.variant_key, '')) AS vk_min",
        "MAX(NULLIF(c.variant_key, '')) AS vk_max",
    ]
    dev = (
        f"MAX(CASE WHEN c.reason NOT IN ({reasons}) OR (c.served_endpoint <> '' AND "
        f"c.served_endpoint <> (CASE c.variant_key {endpoint_case} END)) THEN 1 ELSE 0 END) AS deviates"
    )
    cols.append(dev)
    cols += [
        f"{_agg(comp.aggregation, '1 = 1', CALL_VALUE_SQL[comp.call_value])} AS {comp.key}"
        for comp in call_comps
    ]
    q.add(
        f"""c AS (
  SELECT c.unit_id AS unit_id, {", ".join(cols)}
  FROM {calls} c WHERE c.experiment_id = %s AND c.phase BETWEEN %s AND %s
  GROUP BY c.unit_id
),""",
        *AS_ASSIGNED_REASONS,
        *endpoint_params,
        experiment_id,
        phase,
        max(phase, calls_through_phase or phase),
    )
    joins = ["LEFT JOIN c ON c.unit_id = x.unit_id"]
    if event_comps:
        ecols, eparams = [], []
        for comp in event_comps:
            ecols.append(f"{_agg(comp.aggregation, 'ev.name = %s', 'ev.value')} AS {comp.key}")
            eparams.append(comp.event_name)
        names = sorted({c.event_name for c in event_comps})
        q.add(
            f"""e AS (
  SELECT x.unit_id AS unit_id, {", ".join(ecols)}
  FROM x JOIN {events} ev ON ev.{unit_col} = x.unit_id AND ev.occurred_at >= x.first_exposed_at
  WHERE ev.name IN ({", ".join("%s" for _ in names)})
  GROUP BY x.unit_id
),""",
            *eparams,
            *names,
        )
        joins.append("LEFT JOIN e ON e.unit_id = x.unit_id")
    if cov_calls:
        pcols, pparams = [], []
        for comp in cov_calls:
            cond = f"c.created_at >= {_window_start('x.first_exposed_at', True)}"
            pcols.append(f"{_agg(comp.aggregation, cond, CALL_VALUE_SQL[comp.call_value])} AS {comp.key}")
            pparams.append(comp.covariate_days)
        longest = max(c.covariate_days for c in cov_calls)
        q.add(
            f"""pc AS (
  SELECT x.unit_id AS unit_id, {", ".join(pcols)}
  FROM x JOIN {calls} c ON c.{unit_col} = x.unit_id AND c.created_at < x.first_exposed_at
   AND c.created_at >= {_window_start("x.first_exposed_at", True)}
  GROUP BY x.unit_id
),""",
            *pparams,
            longest,
        )
        joins.append("LEFT JOIN pc ON pc.unit_id = x.unit_id")
    if cov_events:
        pcols, pparams = [], []
        for comp in cov_events:
            cond = f"ev.name = %s AND ev.occurred_at >= {_window_start('x.first_exposed_at', True)}"
            pcols.append(f"{_agg(comp.aggregation, cond, 'ev.value')} AS {comp.key}")
            pparams += [comp.event_name, comp.covariate_days]
        longest = max(c.covariate_days for c in cov_events)
        names = sorted({c.event_name for c in cov_events})
        q.add(
            f"""pe AS (
  SELECT x.unit_id AS unit_id, {", ".join(pcols)}
  FROM x JOIN {events} ev ON ev.{unit_col} = x.unit_id AND ev.occurred_at < x.first_exposed_at
   AND ev.occurred_at >= {_window_start("x.first_exposed_at", True)}
  WHERE ev.name IN ({", ".join("%s" for _ in names)})
  GROUP BY x.unit_id
),""",
            *pparams,
            longest,
            *names,
        )
        joins.append("LEFT JOIN pe ON pe.unit_id = x.unit_id")

    ucols = [
        "x.variant_key AS variant_key",
        "CASE WHEN c.vk_min IS NOT NULL AND (c.vk_min <> x.variant_key OR c.vk_max <> x.variant_key) "
        "THEN 1 ELSE 0 END AS multi",
        "COALESCE(c.deviates, 0) AS deviates",
    ]
    for comp in components:
        src = "c" if comp.source == "call" else "e"
        y = f"{src}.{comp.key}" if comp.aggregation == "mean" else f"COALESCE({src}.{comp.key}, 0.0)"
        ucols.append(f"{y} AS y_{comp.key}")
        observed = (
            f"COALESCE({src}.{comp.key}, 0) > 0"
            if comp.aggregation == "count"
            else f"{src}.{comp.key} IS NOT NULL"
        )
        ucols.append(f"CASE WHEN {observed} THEN 1 ELSE 0 END AS o_{comp.key}")
        if comp.covariate_days > 0:
            pre = "pc" if comp.source == "call" else "pe"
            x = f"COALESCE({pre}.{comp.key}, 0.0)"
            if comp.aggregation == "mean":  # units without a value have no covariate either
                x = f"CASE WHEN {y} IS NULL THEN NULL ELSE {x} END"
            ucols.append(f"{x} AS x_{comp.key}")
    q.add(f"u AS (\n  SELECT {', '.join(ucols)}\n  FROM x {' '.join(joins)}\n)")

    caps_cte, cap_joins, cap_expr = [], [], {}
    population = "1 = 1" if include_multiple else "u.multi = 0"
    for comp in components:
        if comp.capping == "fixed":
            cap_expr[comp.key] = "%s"
        elif comp.capping == "percentile":
            name = f"cap_{comp.key}"
            caps_cte.append(
                (
                    f""",{name} AS (
  SELECT MIN(t.v) AS cap FROM (
    SELECT u.y_{comp.key} AS v, ROW_NUMBER() OVER (ORDER BY u.y_{comp.key}) AS rn, COUNT(*) OVER () AS cnt
    FROM u WHERE {population} AND u.y_{comp.key} IS NOT NULL
  ) t WHERE t.rn + {RANK_EPS} >= %s * t.cnt
)""",
                    comp.cap_value,
                )
            )
            cap_joins.append(f"CROSS JOIN {name}")
            cap_expr[comp.key] = f"{name}.cap"
    for text, param in caps_cte:
        q.add(text, param)

    inner, inner_params = ["u.variant_key AS variant_key", "u.multi AS multi", "u.deviates AS deviates"], []
    for comp in components:
        inner.append(f"u.o_{comp.key} AS o_{comp.key}")
        for side in ("y", "x"):
            if side == "x" and comp.covariate_days <= 0:
                continue
            col = f"u.{side}_{comp.key}"
            if comp.key in cap_expr:
                cap = cap_expr[comp.key]
                inner.append(f"CASE WHEN {col} > {cap} THEN {cap} ELSE {col} END AS {side}_{comp.key}")
                if comp.capping == "fixed":
                    inner_params += [comp.cap_value, comp.cap_value]
            else:
                inner.append(f"{col} AS {side}_{comp.key}")
    outer = ["v.variant_key", "v.multi", "v.deviates", "COUNT(*)"]
    for comp in components:
        y = f"v.y_{comp.key}"
        outer += [f"COUNT({y})", f"SUM({y})", f"SUM({y} * {y})"]
        if comp.covariate_days > 0:
            xx = f"v.x_{comp.key}"
            outer += [f"SUM({xx})", f"SUM({xx} * {xx})", f"SUM({xx} * {y})"]
        outer.append(f"SUM(v.o_{comp.key})")
    for a, b in cross_products:
        outer.append(f"SUM(v.y_{a} * v.y_{b})")
    pct = [comp for comp in components if comp.capping == "percentile"]
    for comp in pct:
        inner.append(f"cap_{comp.key}.cap AS cap_{comp.key}")
        outer.append(f"MAX(v.cap_{comp.key})")
    q.add(
        f"""SELECT {", ".join(outer)} FROM (
  SELECT {", ".join(inner)} FROM u {" ".join(cap_joins)}
) v GROUP BY v.variant_key, v.multi, v.deviates ORDER BY v.variant_key, v.multi, v.deviates""",
        *inner_params,
    )

    with connection.cursor() as cur:
        cur.execute(q.text, q.params)
        raw = cur.fetchall()
    caps: dict[str, float | None] = {
        comp.key: comp.cap_value for comp in components if comp.capping == "fixed"
    }
    caps.update({comp.key: None for comp in pct})
    rows = []
    for record in raw:
        it = iter(record)
        row = GroupRow(
            variant_key=next(it), multi=bool(next(it)), deviates=bool(next(it)), units=int(next(it))
        )
        for comp in components:
            sums = ComponentSums(
                n=int(next(it)), sum=float(next(it) or 0.0), sum_squares=float(next(it) or 0.0)
            )
            if comp.covariate_days > 0:
                sums.sum_x, sums.sum_x2, sums.sum_xy = (float(next(it) or 0.0) for _ in range(3))
            sums.with_data = int(next(it) or 0)
            row.components[comp.key] = sums
        for pair in cross_products:
            row.cross[pair] = float(next(it) or 0.0)
        for comp in pct:
            value = next(it)
            caps[comp.key] = None if value is None else float(value)
        rows.append(row)
    return Aggregates(rows=rows, caps=caps)


def exposure_counts(*, experiment_id: int, phase: int) -> dict[str, dict[str, int]]:
    """``{variant: {"exposed", "forced"}}``: units first exposed per variant in a phase, forced QA apart."""
    sql = f"""
        SELECT variant_key, CASE WHEN reason = 'forced' THEN 1 ELSE 0 END, COUNT(*)
        FROM {Exposure._meta.db_table} WHERE experiment_id = %s AND phase = %s GROUP BY 1, 2
    """
    out: dict[str, dict[str, int]] = {}
    with connection.cursor() as cur:
        cur.execute(sql, [experiment_id, phase])
        for key, forced, n in cur.fetchall():
            slot = out.setdefault(key, {"exposed": 0, "forced": 0})
            slot["forced" if forced else "exposed"] += int(n)
    return out
