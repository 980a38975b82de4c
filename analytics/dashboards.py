"""Reads behind the analyst pages: stored snapshots, the hourly call rollup and lift points.

Nothing here scans raw call records or exposures: a page costs a handful of indexed queries over
pre-aggregated rows (see ``bench/bench_pages.py``). Each builder returns :class:`Table` objects
(HTML and CSV/JSON export from one definition) and plain lists for the charts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, F, OuterRef, Q, Subquery, Sum, Window
from django.db.models.functions import RowNumber
from django.urls import reverse
from django.utils import timezone

from muse_experiments.experiments.models import Experiment, ExperimentPhase, Variant
from routing.circuit import breaker
from routing.killswitch import kill_state
from routing.models import KillScope, KillSwitch, ModelEndpoint

from . import histograms
from .formatting import milliseconds, money, number, percent, status_words
from .formatting import p_value as format_p
from .models import CallRollup, GuardrailAction, LiftPoint, ResultSnapshot, RollupSpan
from .rollups import local_day
from .stats import CupedStatus, power_estimate
from .tables import Column, Table

ENGINES = ("frequentist", "bayesian")
ANALYSES = ("itt", "served")
#: Most points per line on the cumulative-lift chart (older snapshots are thinned evenly).
MAX_LIFT_POINTS = 300


def endpoint_labels() -> dict[str, str]:
    """``{public id: version label}`` (the id itself when an endpoint has no label)."""
    return {
        pid: label or pid for pid, label in ModelEndpoint.objects.values_list("public_id", "version_label")
    }


# --- options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultsOptions:
    """What the results page shows (the switches). ``date_from``/``date_to`` are days in the
    reporting zone (inclusive) and bound the time series; ``target_lift`` is a fraction."""

    phase: int
    analysis: str = "itt"
    engine: str = "frequentist"
    cuped: bool = True
    metric: str = ""
    date_from: date | None = None
    date_to: date | None = None
    target_lift: float = 0.05


def results_options(*, query: Mapping[str, str], experiment: Experiment) -> tuple[ResultsOptions, list[str]]:
    """Parse the page's query string; bad values fall back to defaults and come back as messages."""
    errors: list[str] = []

    def pick(name: str, allowed: Iterable[str], default: str) -> str:
        value = query.get(name) or default
        if value not in allowed:
            errors.append(f"Unknown {name} {value!r}: showing {default}.")
            return default
        return value

    phase = experiment.phase or 0
    if query.get("phase"):
        try:
            asked = int(query["phase"])
        except ValueError:
            asked = -1
        if 1 <= asked <= phase:
            phase = asked
        else:
            errors.append(f"No phase {query['phase']!r}: showing phase {phase}.")

    def day(name: str) -> date | None:
        if not query.get(name):
            return None
        try:
            return date.fromisoformat(query[name])
        except ValueError:
            errors.append(f"{name} must be a date like 2026-12-01.")
            return None

    target = 0.05
    if query.get("target"):
        try:
            target = float(query["target"]) / 100.0
            if not (0 < target < 10):
                raise ValueError
        except ValueError:
            errors.append("Target lift must be a percentage above 0, e.g. 5.")
            target = 0.05
    start, end = day("from"), day("to")
    if start and end and start > end:
        errors.append("The date range ends before it starts: showing every day.")
        start = end = None
    return (
        ResultsOptions(
            phase=phase,
            analysis=pick("analysis", ANALYSES, "itt"),
            engine=pick("engine", ENGINES, "frequentist"),
            cuped=pick("cuped", ("on", "off"), "on") == "on",
            metric=query.get("metric", ""),
            date_from=start,
            date_to=end,
            target_lift=target,
        ),
        errors,
    )


def _bounds(options: ResultsOptions) -> tuple[datetime | None, datetime | None]:
    zone = timezone.get_current_timezone()
    start = datetime.combine(options.date_from, time.min, zone) if options.date_from else None
    end = datetime.combine(options.date_to + timedelta(days=1), time.min, zone) if options.date_to else None
    return start, end


# --- experiments list ------------------------------------------------------------------------


def _kills_by_experiment(experiments: list[Experiment]) -> dict[int, list[KillSwitch]]:
    """Active kill switches that touch each experiment (itself, a variant, an endpoint or provider
    it uses, or every external provider)."""
    active = list(KillSwitch.objects.filter(active=True))
    if not active:
        return {}
    variants = defaultdict(list)
    for v in Variant.objects.filter(experiment__in=experiments).select_related("endpoint__provider"):
        variants[v.experiment_id].append(v)
    out: dict[int, list[KillSwitch]] = {}
    for e in experiments:
        hits = []
        for k in active:
            vs = variants.get(e.id, [])
            if (
                (k.scope == KillScope.EXPERIMENT and k.target == e.key)
                or (k.scope == KillScope.VARIANT and k.target.split("/", 1)[0] == e.key)
                or (k.scope == KillScope.ENDPOINT and any(v.endpoint.public_id == k.target for v in vs))
                or (k.scope == KillScope.PROVIDER and any(v.endpoint.provider.key == k.target for v in vs))
                or (
                    k.scope == KillScope.ALL_EXTERNAL
                    and any(v.endpoint.provider.kind != "native" for v in vs)
                )
            ):
                hits.append(k)
        out[e.id] = hits
    return out


def _kill_text(k: KillSwitch) -> str:
    return f"{k.get_scope_display().split(' (')[0]}{': ' + k.target if k.target else ''}"


def _primary(results: Mapping[str, Any]) -> tuple[dict | None, list[dict]]:
    metric = next((m for m in results.get("metrics", []) if m.get("role") == "primary"), None)
    return metric, (metric or {}).get("comparisons", [])


def experiment_list(*, status: str = "", layer: str = "", search: str = "") -> Table:
    """Every experiment with its current phase's latest snapshot summarised (one row each)."""
    latest = ResultSnapshot.objects.filter(experiment=OuterRef("pk"), phase=OuterRef("phase")).order_by(
        "-computed_at", "-id"
    )
    qs = Experiment.objects.select_related("layer").annotate(snapshot_id=Subquery(latest.values("id")[:1]))
    if status:
        qs = qs.filter(status=status)
    if layer:
        qs = qs.filter(layer__key=layer)
    if search:
        qs = qs.filter(Q(key__icontains=search) | Q(name__icontains=search) | Q(owner__icontains=search))
    experiments = list(qs.order_by("-started_at", "key"))
    snapshots = ResultSnapshot.objects.defer("inputs").in_bulk(
        [e.snapshot_id for e in experiments if e.snapshot_id]
    )
    kills = _kills_by_experiment(experiments)
    alerts: dict[tuple[int, int], list[GuardrailAction]] = defaultdict(list)
    for a in GuardrailAction.objects.filter(experiment__in=experiments):
        alerts[(a.experiment_id, a.phase)].append(a)
    now = timezone.now()
    rows = []
    for e in experiments:
        snap = snapshots.get(e.snapshot_id)
        results = snap.results if snap else {}
        variants = results.get("variants", [])
        units = sum(v.get("units") or 0 for v in variants)
        split = " / ".join(f"{v['key']} {percent((v.get('units') or 0) / units)}" for v in variants if units)
        srm = results.get("srm") or {}
        metric, comparisons = _primary(results)
        verdict = "; ".join(
            f"{c['variant']} {percent(c.get('relative_lift'), signed=True)} ({status_words(c.get('verdict'))})"
            for c in comparisons
        )
        end = e.stopped_at if e.status != "running" and e.stopped_at else now
        rows.append(
            {
                "key": e.key,
                "key_href": reverse("results-page", args=[e.key]),
                "key_note": e.name if e.name != e.key else "",
                "name": e.name,
                "status": e.status,
                "layer": e.layer.key if e.layer else "",
                "phase": e.phase,
                "days_running": (end - e.started_at).total_seconds() / 86400 if e.started_at else None,
                "units": units if snap else None,
                "split": split,
                "srm": ("mismatch" if srm.get("flagged") else srm.get("status")) if srm else None,
                "srm_p": srm.get("p_value"),
                "primary_metric": e.primary_metric,
                "primary_verdict": verdict or (status_words((metric or {}).get("status")) if metric else ""),
                "kill_switches": "; ".join(_kill_text(k) for k in kills.get(e.id, [])),
                "guardrail_alerts": len(alerts.get((e.id, e.phase), [])),
                "snapshot_at": snap.computed_at if snap else None,
                "_class": "alert"
                if srm.get("flagged") or kills.get(e.id) or alerts.get((e.id, e.phase))
                else "",
            }
        )
    return Table(
        id="experiments",
        title="Experiments",
        row_class="_class",
        columns=[
            Column("key", "Experiment", "link"),
            Column("status", "Status", "status"),
            Column("layer", "Layer"),
            Column("days_running", "Running for", "days"),
            Column("units", "Units so far", "int"),
            Column("split", "Split (units per variant)"),
            Column("srm", "Sample ratio", "status", help="Chi-square test of the split against the weights"),
            Column("primary_metric", "Primary metric"),
            Column("primary_verdict", "Primary verdict (relative lift)"),
            Column("kill_switches", "Kill switches in force"),
            Column("guardrail_alerts", "Guardrail alerts", "int"),
            Column("snapshot_at", "Results as of", "when"),
        ],
        rows=rows,
    )


# --- experiment results ----------------------------------------------------------------------


def _metric_kind(metric: Mapping[str, Any]) -> str:
    """How to show a metric's values: pct for proportions, money for cost, ms for latency."""
    if metric.get("type") == "proportion":
        return "pct"
    call_value = (metric.get("definition") or {}).get("call_value") or ""
    if call_value == "cost_usd" or metric.get("name", "").startswith("cost"):
        return "money"
    if call_value == "latency_ms" or metric.get("name", "").startswith("latency"):
        return "ms"
    return "num"


def _effect(c: Mapping[str, Any], options: ResultsOptions, *, sequential: bool = False) -> dict[str, Any]:
    """The comparison numbers the switches ask for: engine and CUPED on/off.

    ``sequential``: show the always-valid sequential test (the test the guardrail rule uses,
    CUPED-adjusted when the metric has a covariate) instead of the fixed-horizon one. The p-value
    is always the one of the relative (delta-method) test whose CI is shown; with no relative CI
    (``relative_status`` says why) there is no p-value either."""
    base = c
    cuped_used = bool(c.get("cuped"))
    if sequential and c.get("sequential"):
        base = c["sequential"]
    elif cuped_used and not options.cuped and c.get("unadjusted"):
        base, cuped_used = c["unadjusted"], False
    ci = base.get("relative_ci")
    out = {
        "status": base.get("status"),
        "reason": base.get("reason"),
        "relative_status": base.get("relative_status"),
        "lift": base.get("relative_lift"),
        "ci": ci,
        "p": base.get("relative_p_value") if ci else None,
        "test": "sequential" if base is not c and sequential else "fixed",
        "interval": base.get("relative_interval_method") if ci else None,
        "cuped": cuped_used,
        "variance_reduction": base.get("variance_reduction"),
        "se": base.get("relative_std_error"),
        "chance": None,
        "risk": None,
        "risk_kind": "pct",
    }
    if options.engine == "bayesian":
        bayes = (c.get("bayesian") or {}) if base is c else {}
        relative = bayes.get("effect") == "relative"
        out.update(
            status=bayes.get("status") or base.get("status"),
            reason=bayes.get("reason") or base.get("reason"),
            lift=bayes.get("posterior_mean") if relative else base.get("relative_lift"),
            ci=bayes.get("credible_interval") if relative else None,
            interval=bayes.get("model", "gaussian") if relative and bayes.get("credible_interval") else None,
            chance=bayes.get("chance_to_beat_control"),
            risk=bayes.get("risk"),
            risk_kind="pct" if relative else "num",
            p=None,
            test="bayesian",
        )
    return out


def _cuped_words(c: Mapping[str, Any], used: bool) -> str:
    """The CUPED cell: "yes", or "no" with why (no covariate, switched off, or the covariate
    failed the balance check, e.g. "no: covariate imbalanced (p < 0.001)")."""
    status = c.get("cuped_status")
    if used:
        return "yes"
    if status == CupedStatus.COVARIATE_IMBALANCED:
        balance = (c.get("extra") or {}).get("covariate_balance") or {}
        return f"no: covariate imbalanced ({_p_text(balance.get('p_value'))})"
    if status == CupedStatus.COVARIATE_MISSING:
        arm = ((c.get("extra") or {}).get("covariate_balance") or {}).get("constant_in") or "one"
        return f"no: covariate missing in the {arm} arm"
    if status == CupedStatus.APPLIED or c.get("cuped"):
        return "no: switched off"
    return "no: metric has no covariate"


def _p_text(p: float | None) -> str:
    """Text like ``p < 0.001`` or ``p = 0.032``."""
    text = format_p(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def cuped_warnings(body: Mapping[str, Any]) -> list[str]:
    """One sentence per metric × treatment where CUPED was asked for but not applied."""
    out = []
    for m in body.get("metrics", []):
        for c in m.get("comparisons", []):
            status = c.get("cuped_status")
            if status not in (CupedStatus.COVARIATE_IMBALANCED, CupedStatus.COVARIATE_MISSING):
                continue
            balance = (c.get("extra") or {}).get("covariate_balance") or {}
            means = (
                f"pre-period mean {number(balance.get('control_mean'))} in control, "
                f"{number(balance.get('treatment_mean'))} in {c['variant']}"
            )
            why = (
                f"its pre-period covariate differs between arms ({_p_text(balance.get('p_value'))}; {means})"
                if status == CupedStatus.COVARIATE_IMBALANCED
                else f"its pre-period covariate has no variation in the {balance.get('constant_in')} arm "
                f"(missing?; {means})"
            )
            out.append(
                f"CUPED not applied to {m.get('label') or m['name']} for {c['variant']}: {why}. "
                "The row shows the unadjusted result."
            )
    return out


def _verdict(e: Mapping[str, Any], tone: str, alpha: float, guardrail: bool) -> str:
    """The verdict of exactly the test whose p-value and CI the row shows: the status when no test
    ran; the relative status when there is no relative CI; better | worse | inconclusive by
    ``p < alpha`` (the CI excludes 0 iff it is, same test). A guardrail only flags harm, so its
    significant improvement is ``guardrail_no_harm`` and its no-difference ``guardrail_ok``."""
    if e["status"] != "ok":
        return e["status"]
    if not e["ci"]:
        rel = e.get("relative_status")
        return rel if rel and rel != "ok" else "not_computed"
    p = e["p"]
    verdict = "inconclusive" if p is None or p >= alpha else ("better" if tone == "good" else "worse")
    if guardrail and verdict != "worse":
        return "guardrail_no_harm" if verdict == "better" else "guardrail_ok"
    return verdict


def _tone(lift: float | None, ci: Any, higher_is_better: bool) -> str:
    """good/bad when the interval excludes 0 in the metric's direction, else neutral."""
    if lift is None or not ci or ci[0] is None or ci[1] is None or (ci[0] <= 0 <= ci[1]):
        return "neutral"
    return "good" if (lift > 0) == higher_is_better else "bad"


def _axis(intervals: Iterable[Any]) -> tuple[float, float]:
    """A shared, symmetric-enough domain for the forest plot that always includes 0."""
    lo, hi = 0.0, 0.0
    for ci in intervals:
        if ci[0] is not None and ci[1] is not None:
            lo, hi = min(lo, ci[0]), max(hi, ci[1])
    span = max(hi - lo, 0.02)
    lo, hi = max(lo - 0.08 * span, -1.0), hi + 0.08 * span
    return lo, hi


def metric_table(*, body: Mapping[str, Any], options: ResultsOptions) -> Table:
    """One row per metric × treatment: values, relative lift, interval (drawn on a shared axis),
    p-value (frequentist) or chance to beat control (Bayesian), verdict; guardrails marked."""
    rows = []
    for m in body.get("metrics", []):
        kind = _metric_kind(m)
        means = {v["key"]: v.get("mean") for v in m.get("variants", [])}
        control = next((v["key"] for v in body.get("variants", []) if v.get("is_control")), "")
        if m.get("status") != "ok" or not m.get("comparisons"):
            rows.append(
                {
                    "metric": m.get("label") or m["name"],
                    "metric_name": m["name"],
                    "role": m.get("role"),
                    "variant": "",
                    "verdict": m.get("status"),
                    "verdict_why": m.get("reason") or "",
                    "reason": m.get("reason") or "",
                    "_class": "guardrail" if m.get("role") == "guardrail" else "",
                }
            )
            continue
        for c in m["comparisons"]:
            guardrail = m.get("role") == "guardrail"
            bayes = options.engine == "bayesian"
            e = _effect(c, options, sequential=guardrail and not bayes)
            tone = _tone(e["lift"], e["ci"], bool(m.get("higher_is_better", True)))
            verdict = _verdict(e, tone, c.get("alpha") or 0.05, guardrail)
            if bayes and e["chance"] is not None:
                verdict = (
                    "better" if e["chance"] >= 0.95 else "worse" if e["chance"] <= 0.05 else "inconclusive"
                )
            ci = e["ci"] or (None, None)
            rows.append(
                {
                    "metric": m.get("label") or m["name"],
                    "metric_name": m["name"],
                    "role": m.get("role"),
                    "direction": "higher is better" if m.get("higher_is_better", True) else "lower is better",
                    "variant": c["variant"],
                    "control_value": means.get(control),
                    "control_value__kind": kind,
                    "treatment_value": means.get(c["variant"]),
                    "treatment_value__kind": kind,
                    "units": (c.get("control_n") or 0) + (c.get("treatment_n") or 0),
                    "relative_lift": e["lift"],
                    "ci_low": ci[0],
                    "ci_high": ci[1],
                    "forest": {"lift": e["lift"], "low": ci[0], "high": ci[1], "tone": tone},
                    "p_value": e["p"],
                    "test": e["test"],
                    "chance_to_beat_control": e["chance"],
                    "risk": e["risk"],
                    "risk__kind": e["risk_kind"],
                    "interval": e["interval"],
                    "cuped": _cuped_words(c, e["cuped"]),
                    "cuped_status": c.get("cuped_status"),
                    "verdict": verdict,
                    "verdict_why": e["reason"] or "",
                    "reason": e["reason"] or "",
                    "_class": " ".join(
                        x for x in ("guardrail" if m.get("role") == "guardrail" else "", f"tone-{tone}") if x
                    ),
                }
            )
    bayes = options.engine == "bayesian"
    ci_name = "credible interval" if bayes else "confidence interval"
    level = f"{(1 - (body.get('alpha') or 0.05)) * 100:g} %"
    columns = [
        Column("metric", "Metric"),
        Column("variant", "Treatment"),
        Column("control_value", "Control", "num"),
        Column("treatment_value", "Treatment value", "num"),
        Column("relative_lift", "Relative lift", "lift"),
        Column("forest", f"Lift with its {level} {ci_name} (shared axis)", "forest"),
        Column(
            "interval",
            "Interval",
            "status",
            help="How the interval was built: Wilson-based MOVER-R for conversion rates (valid with 0 "
            "or all conversions in an arm), the delta method for means and ratios, an always-valid "
            "sequence for guardrails, Beta posteriors (Bayesian conversion rates)",
        ),
    ]
    if bayes:
        columns += [
            Column("chance_to_beat_control", "Chance to beat control", "pct"),
            Column("risk", "Risk", "pct", help="Expected relative loss if the treatment is chosen"),
        ]
    else:
        columns += [
            Column("p_value", "p-value", "p"),
            Column(
                "test",
                "Test",
                "status",
                help="The test behind the row's p-value, interval and verdict: fixed horizon for "
                "primary/secondary metrics; guardrails use the always-valid "
                "sequential test (safe under continuous monitoring) and only flag harm",
            ),
        ]
    columns += [Column("cuped", "CUPED"), Column("verdict", "Verdict", "status")]
    return Table(
        id="metrics",
        title="Each metric × treatment against control",
        columns=columns,
        rows=rows,
        row_class="_class",
        export_extra=(
            "metric_name",
            "role",
            "direction",
            "units",
            "ci_low",
            "ci_high",
            "cuped_status",
            "reason",
        ),
        axis=_axis((r.get("ci_low"), r.get("ci_high")) for r in rows),
    )


def srm_table(*, body: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> Table:
    """Observed vs expected split of the analysed units. ``labels``: ``{public id: version label}``
    (see :func:`endpoint_labels`), exported as ``endpoint_label``."""
    labels = labels if labels is not None else {}
    variants = body.get("variants", [])
    total_units = sum(v.get("units") or 0 for v in variants)
    total_weight = sum(v.get("weight") or 0 for v in variants) or 1.0
    return Table(
        id="split",
        title="Units per variant: observed vs expected",
        columns=[
            Column("variant", "Variant"),
            Column("endpoint", "Model", "model"),
            Column("expected", "Expected share", "pct"),
            Column("observed", "Observed share", "pct"),
            Column("units", "Analysed units", "int"),
            Column("exposed", "Exposed", "int"),
            Column("multiple_exposure", "Saw several variants", "int"),
            Column("deviating", "Not served as assigned", "int"),
        ],
        rows=[
            {
                "variant": v["key"] + (" (control)" if v.get("is_control") else ""),
                "endpoint": v.get("endpoint"),
                "endpoint_label": labels.get(v.get("endpoint") or "", v.get("endpoint") or ""),
                "expected": (v.get("weight") or 0) / total_weight,
                "observed": (v.get("units") or 0) / total_units if total_units else None,
                "units": v.get("units"),
                "exposed": v.get("exposed"),
                "multiple_exposure": v.get("multiple_exposure"),
                "deviating": v.get("deviating"),
            }
            for v in variants
        ],
    )


HISTOGRAMS = {
    "latency_hist": histograms.LATENCY_MS,
    "cost_hist": histograms.COST_USD,
    "tokens_hist": histograms.TOKENS,
}


def _rollup_queryset(*, experiment: Experiment, phase: int, options: ResultsOptions):
    """The phase's day rollup rows inside the date range (days of the reporting zone, DST
    included); rows cut in another zone are left out until the refresh rebuilds them."""
    start, end = _bounds(options)
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
    (``rows`` are day rows, see :func:`_rollup_queryset`)."""
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
    """Per-variant call health (from :func:`rollup_by`) and the distributions for the charts."""
    empty = {"calls": 0, "errors": 0, "fallbacks": 0, "killed": 0, "cost": 0.0, "tokens": 0}
    merged = {
        v: {h: (totals.get(v) or {}).get(h) or [0] * g.size for h, g in HISTOGRAMS.items()} for v in variants
    }
    table_rows = []
    for v in variants:
        a, lat = totals.get(v) or empty, merged[v]["latency_hist"]
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
                "cost_per_call": a["cost"] / n if n else None,
                "cost_total": a["cost"],
                "tokens_per_call": a["tokens"] / n if n else None,
            }
        )
    table = Table(
        id="calls",
        title="Calls per variant",
        note="Latency percentiles are read from log-spaced histograms (within one bin, about ±15 %).",
        columns=[
            Column("variant", "Variant"),
            Column("calls", "Calls", "int"),
            Column("error_rate", "Failed", "pct"),
            Column("fallback_share", "Served by a fallback", "pct"),
            Column("killed_share", "Rerouted by a kill switch", "pct"),
            Column("latency_p50", "Latency p50", "ms"),
            Column("latency_p95", "Latency p95", "ms"),
            Column("cost_per_call", "Cost per call", "money"),
            Column("cost_total", "Cost", "money"),
            Column("tokens_per_call", "Tokens per call", "num"),
        ],
        rows=table_rows,
    )
    charts = {}
    formats = {"latency_hist": milliseconds, "cost_hist": money, "tokens_hist": number}
    for h, g in HISTOGRAMS.items():
        labels = g.labels(formats[h])
        used = [i for i in range(g.size) if any(merged[v][h][i] for v in variants)]
        lo, hi = (used[0], used[-1] + 1) if used else (0, 0)
        charts[h] = {
            "labels": labels[lo:hi],
            "series": {v: [c / (sum(merged[v][h]) or 1) for c in merged[v][h][lo:hi]] for v in variants},
        }
    return table, charts


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
    points where the metric has them; off (or a metric without covariate) the unadjusted ones."""
    start, end = _bounds(options)
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
                    "t": at.astimezone(zone).strftime("%Y-%m-%d %H:%M"),
                    "lift": lift,
                    "low": band[0],
                    "high": band[1],
                    "units": units,
                }
            )
        series[variant] = out
    return {"series": series, "zone": timezone.get_current_timezone_name()}


def power_table(*, body: Mapping[str, Any], options: ResultsOptions, daily_units: float | None) -> Table:
    """Per primary/guardrail metric × treatment: the relative MDE now (80 % power) and the days
    still needed for the target lift to become detectable at the current rate of new units."""
    alpha = body.get("alpha") or 0.05
    rows = []
    for m in body.get("metrics", []):
        if m.get("role") not in ("primary", "guardrail"):
            continue
        for c in m.get("comparisons", []):
            e = _effect(c, ResultsOptions(phase=options.phase, cuped=options.cuped))
            se, units = e["se"], (c.get("control_n") or 0) + (c.get("treatment_n") or 0)
            estimate = power_estimate(units_now=units, std_error=se, effect=options.target_lift, alpha=alpha)
            mde, needed, days = estimate.mde, estimate.units_needed, None
            if needed is not None:
                remaining = max(needed - units, 0.0)
                if remaining == 0:
                    days = 0.0
                elif daily_units:
                    days = remaining / daily_units
            rows.append(
                {
                    "metric": m.get("label") or m["name"],
                    "variant": c["variant"],
                    "units": units,
                    "mde": mde,
                    "target": options.target_lift,
                    "units_needed": needed if needed is not None and math.isfinite(needed) else None,
                    "days_needed": days,
                }
            )
    return Table(
        id="power",
        title="Power",
        note=(
            f"MDE: smallest relative lift detectable now with 80 % power at alpha {alpha:g} "
            "(two-sided; (z₁₋α/₂ + z₀.₈) × standard error). Days: at the rate of new units over the "
            "last 7 days of the rollup, until the target lift is the MDE."
        ),
        columns=[
            Column("metric", "Metric"),
            Column("variant", "Treatment"),
            Column("units", "Units (both arms)", "int"),
            Column("mde", "MDE now", "pct"),
            Column("target", "Target lift", "pct"),
            Column("units_needed", "Units needed", "int"),
            Column("days_needed", "Days still needed", "days"),
        ],
        rows=rows,
    )


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
    kills = _kills_by_experiment([experiment]).get(experiment.id, [])
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
                "switch": _kill_text(k),
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
    qs = _rollup_queryset(experiment=experiment, phase=options.phase, options=options)
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
    out["guardrail_actions"] = list(
        GuardrailAction.objects.filter(experiment=experiment, phase=options.phase)[:20]
    )
    return out


# --- model catalogue and routing health ------------------------------------------------------


def routing_health(*, now: datetime | None = None) -> dict[str, Any]:
    """Per endpoint over the last hour and day (rollup hours): calls, failure rate, p50/p95
    latency, cost; with circuit and kill state; and calls per hour for the chart."""
    now = now or timezone.now()
    hour_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    day_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    base = CallRollup.objects.filter(span=RollupSpan.HOUR).exclude(endpoint="")
    windows = {
        "hour": rollup_by(base.filter(bucket__gte=hour_start), "endpoint", ("latency_hist",)),
        "day": rollup_by(base.filter(bucket__gte=day_start), "endpoint", ("latency_hist",)),
    }
    hourly: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for bucket, endpoint, calls in base.filter(bucket__gte=day_start, calls__gt=0).values_list(
        "bucket", "endpoint", "calls"
    ):
        hourly[endpoint][bucket.replace(minute=0)] += calls  # hours cut at a half-hour local midnight
    kills = kill_state()
    cb = breaker()
    grid = histograms.LATENCY_MS
    table_rows = []
    for e in ModelEndpoint.objects.select_related("provider").order_by("provider__key", "public_id"):
        entry: dict[str, Any] = {
            "endpoint": e.public_id,
            "endpoint_label": e.version_label or e.public_id,
            "provider": e.provider.key,
            "enabled": "yes" if e.enabled and e.provider.enabled else "no",
            "circuit": cb.state(e.public_id),
            "killed": "killed"
            if kills.endpoint_killed(
                public_id=e.public_id, provider_key=e.provider.key, is_external=e.provider.kind != "native"
            )
            else "live",
            "price_in": float(e.price_input_per_mtok),
            "price_out": float(e.price_output_per_mtok),
        }
        for name in ("hour", "day"):
            a = windows[name].get(e.public_id) or {"calls": 0, "errors": 0, "cost": 0.0}
            lat = a.get("latency_hist") or [0] * grid.size
            n = a["calls"]
            entry.update(
                {
                    f"calls_{name}": n,
                    f"error_rate_{name}": a["errors"] / n if n else None,
                    f"p50_{name}": grid.quantile(lat, 0.5),
                    f"p95_{name}": grid.quantile(lat, 0.95),
                    f"cost_{name}": a["cost"],
                }
            )
        entry["_class"] = "alert" if entry["circuit"] != "closed" or entry["killed"] == "killed" else ""
        table_rows.append(entry)
    zone = timezone.get_current_timezone()
    since_hour = hour_start.astimezone(zone).strftime("%H:%M %Z")
    since_day = day_start.astimezone(zone).strftime("%-d %b %H:%M %Z")
    cols = [
        Column("endpoint", "Model", "model"),
        Column("provider", "Provider"),
        Column("enabled", "Enabled"),
        Column("circuit", "Circuit", "status"),
        Column("killed", "Kill switch", "status"),
    ]
    for name, label in (("hour", f"since {since_hour}"), ("day", f"since {since_day}")):
        cols += [
            Column(f"calls_{name}", f"Calls {label}", "int"),
            Column(f"error_rate_{name}", f"Failed {label}", "pct"),
            Column(f"p50_{name}", f"p50 {label}", "ms"),
            Column(f"p95_{name}", f"p95 {label}", "ms"),
            Column(f"cost_{name}", f"Cost {label}", "money"),
        ]
    cols += [
        Column("price_in", "Input $/M tokens", "money"),
        Column("price_out", "Output $/M tokens", "money"),
    ]
    hours = [day_start + timedelta(hours=i) for i in range(24 + 1)]
    busiest = sorted(hourly, key=lambda k: -sum(hourly[k].values()))[:8]
    labels = endpoint_labels()
    chart = {
        "labels": [h.astimezone(zone).strftime("%H:%M") for h in hours],
        "series": {labels.get(k, k): [hourly[k].get(h, 0) for h in hours] for k in busiest},
        "zone": timezone.get_current_timezone_name(),
    }
    return {
        "table": Table(
            id="endpoints",
            title="Model catalogue and routing health",
            columns=cols,
            rows=sorted(table_rows, key=lambda r: (-r["calls_day"], r["endpoint_label"])),
            row_class="_class",
            note=f"Windows are whole rollup hours: 'since {since_hour}' is the current hour and the one "
            f"before it (60 to 120 minutes, read at {now.astimezone(zone).strftime('%H:%M %Z')}); "
            f"'since {since_day}' is the last 24 rollup hours. "
            "Latency percentiles from log-spaced histograms (about ±15 %).",
        ),
        "chart": chart,
        "kills": list(KillSwitch.objects.filter(active=True).order_by("-updated_at")),
    }
