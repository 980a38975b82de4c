"""The results page of one experiment phase: everything it shows, and the cumulative lift series."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from muse_experiments.experiments.models import Experiment, ExperimentPhase

from ..formatting import guardrail_breach
from ..models import GuardrailAction, LiftPoint, ResultSnapshot
from ..rollups import local_day
from ..tables import Column, Table
from .calls import call_table, exposure_rows, exposure_series, rollup_by, rollup_queryset
from .common import ResultsOptions, bounds, endpoint_labels, kill_text, kills_by_experiment
from .metrics import cuped_warnings, metric_table, power_table, srm_table

MAX_LIFT_POINTS = 300


def _thin(points: list, most: int) -> list:
    """At most ``most`` points, evenly spaced, always keeping the newest."""
    if len(points) <= most:
        return points
    step = len(points) / most
    picked = [points[int(i * step)] for i in range(most - 1)]
    return [*picked, points[-1]]


LIFT_FIELDS = (
    "variant_key",
    "computed_at",
    "relative_lift",
    "ci_low",
    "ci_high",
    "sequential_low",
    "sequential_high",
    "units",
)


def lift_series(*, experiment: Experiment, options: ResultsOptions, metric: str) -> dict[str, Any]:
    """Cumulative relative lift per treatment over snapshot times, with the sequential
    (always-valid) band when stored, else the fixed-horizon interval. CUPED on reads the adjusted
    points where the metric has them; off (or a metric without covariate) the unadjusted ones.

    Returns ``{"series": {treatment: [{"x": ms since the epoch, "t": local time text, "lift",
    "low", "high", "units"}]}, "zone": IANA name}``: the chart plots ``x`` on a time scale (one
    panel per treatment), so snapshots taken at uneven times sit at their times."""
    start, end = bounds(options)
    qs = LiftPoint.objects.filter(
        experiment=experiment, phase=options.phase, analysis=options.analysis, metric=metric
    )
    if start:
        qs = qs.filter(computed_at__gte=start)
    if end:
        qs = qs.filter(computed_at__lt=end)
    cuped = options.cuped and qs.filter(cuped=True).exists()
    qs = qs.filter(cuped=cuped)
    # Thin in the database: every step-th snapshot per treatment (and the newest), so a page reads
    # at most ~MAX_LIFT_POINTS rows per line however long the experiment has run.
    per_line = max(qs.values("variant_key").annotate(n=Count("id")).values_list("n", flat=True), default=0)
    step = max(1, math.ceil(per_line / MAX_LIFT_POINTS))
    if step > 1:
        qs = qs.annotate(
            rn=Window(RowNumber(), partition_by=[F("variant_key")], order_by=F("computed_at").desc())
        ).filter(Q(rn=1) | Q(rn__in=range(1 + step, per_line + 1, step)))
    by_variant: dict[str, list[tuple]] = defaultdict(list)
    for row in sorted(qs.values_list(*LIFT_FIELDS), key=lambda r: r[1]):
        by_variant[row[0]].append(row)
    zone = timezone.get_current_timezone()
    series = {}
    for variant, points in by_variant.items():
        out = []
        for _, at, lift, lo, hi, seq_lo, seq_hi, units in _thin(points, MAX_LIFT_POINTS):
            band = (seq_lo, seq_hi) if seq_lo is not None and seq_hi is not None else (lo, hi)
            out.append(
                {
                    "x": round(at.timestamp() * 1000),
                    "t": at.astimezone(zone).strftime("%Y-%m-%d %H:%M"),
                    "lift": lift,
                    "low": band[0],
                    "high": band[1],
                    "units": units,
                }
            )
        series[variant] = out
    return {"series": series, "zone": timezone.get_current_timezone_name()}


def _daily_units(rows: list[tuple[datetime, str, int]]) -> float | None:
    """New units per day over the last 7 days (reporting zone) of the rollup, from the first of
    them that has exposures."""
    if not rows:
        return None
    zone = timezone.get_current_timezone()
    days = [(local_day(r[0], zone), r[2]) for r in rows]
    last = max(d for d, _ in days)
    recent = [(d, n) for d, n in days if (last - d).days < 7]
    total = sum(n for _, n in recent)
    return total / ((last - min(d for d, _ in recent)).days + 1) if total else None


def kills_table(*, experiment: Experiment) -> Table:
    """Kill switches in force on this experiment, with when each started (reporting zone)."""
    kills = kills_by_experiment([experiment]).get(experiment.id, [])
    return Table(
        id="kills",
        title="Kill switches in force",
        columns=[
            Column("switch", "Switch"),
            Column("reason", "Reason"),
            Column("by", "By"),
            Column("since", "Since", "when"),
        ],
        rows=[
            {
                "switch": kill_text(k),
                "reason": k.reason,
                "by": k.updated_by,
                "since": k.active_since or k.updated_at,
            }
            for k in kills
        ],
    )


def _health(call_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Calls in the range, and the shares served by a fallback or rerouted by a kill switch."""
    calls = sum(r["calls"] for r in call_rows)

    def share(key: str) -> float | None:
        return sum(r["calls"] * (r[key] or 0) for r in call_rows) / calls if calls else None

    return {"calls": calls, "fallback_share": share("fallback_share"), "killed_share": share("killed_share")}


def results_dashboard(*, experiment: Experiment, options: ResultsOptions) -> dict[str, Any]:
    """Everything the results page shows for one phase (see the template for the layout)."""
    snapshot = (
        ResultSnapshot.objects.filter(experiment=experiment, phase=options.phase)
        .defer("inputs")  # the sufficient statistics: large, and the pages never show them
        .order_by("-computed_at", "-id")
        .first()
        if options.phase
        else None
    )
    phase_row = ExperimentPhase.objects.filter(experiment=experiment, number=options.phase).first()
    out: dict[str, Any] = {"snapshot": snapshot, "phase_row": phase_row, "tables": {}}
    out["tables"]["kills"] = kills_table(experiment=experiment)
    variants = [v.key for v in experiment.variants.order_by("position", "id")]
    qs = rollup_queryset(experiment=experiment, phase=options.phase, options=options)
    exposures = exposure_rows(qs) if options.phase else []
    out["exposures"] = exposure_series(rows=exposures, variants=variants)
    totals = rollup_by(qs, "variant_key") if options.phase else {}
    out["tables"]["calls"], out["distributions"] = call_table(totals=totals, variants=variants)
    out["health"] = _health(out["tables"]["calls"].rows)
    if snapshot is None:
        return out
    results = snapshot.results
    body = (
        results if options.analysis == "itt" else {**results, **results.get("analyses", {}).get("served", {})}
    )
    out["body"] = body
    metrics = [m["name"] for m in body.get("metrics", [])]
    out["metric_names"] = [(m["name"], m.get("label") or m["name"]) for m in body.get("metrics", [])]
    metric = options.metric if options.metric in metrics else (metrics[0] if metrics else "")
    out["metric"] = metric
    out["tables"]["split"] = srm_table(body=body, labels=endpoint_labels())
    out["tables"]["metrics"] = metric_table(body=body, options=options)
    out["cuped_warnings"] = cuped_warnings(body) if options.cuped else []
    out["tables"]["power"] = power_table(body=body, options=options, daily_units=_daily_units(exposures))
    out["lift"] = lift_series(experiment=experiment, options=options, metric=metric)
    out["guardrail_actions"] = guardrail_action_lines(experiment=experiment, body=body, phase=options.phase)
    out["same_populations"] = same_populations(results)
    return out


def same_populations(results: dict[str, Any]) -> int | None:
    """The number of analysed units when intent-to-treat and served-as-assigned count exactly the
    same units (no unit was served by another variant than its own), else None."""
    variants = results.get("variants", [])
    if not variants or any(v.get("deviating") for v in variants):
        return None
    return sum(v.get("units") or 0 for v in variants)


def guardrail_action_lines(*, experiment: Experiment, body: dict[str, Any], phase: int) -> list[dict]:
    """The phase's latest 20 guardrail actions as ``{"created_at", "decision", "text",
    "message"}``: ``text`` worded and numbered as the metric table does (metric labels, p-values
    like ``< 0.001``, lifts in %) from the action's evidence; ``message`` is the stored text."""
    labels = {m["name"]: m.get("label") or m["name"] for m in body.get("metrics", [])}
    lines = []
    for a in GuardrailAction.objects.filter(experiment=experiment, phase=phase)[:20]:
        evidence = a.evidence or {}
        text = guardrail_breach(
            metric=labels.get(a.metric, a.metric),
            variant=a.variant_key,
            p=evidence.get("sequential_p_value"),
            lift=evidence.get("relative_lift"),
        )
        lines.append({"created_at": a.created_at, "decision": a.decision, "text": text, "message": a.message})
    return lines
