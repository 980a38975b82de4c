"""The results page's tables built from a stored snapshot: each metric × treatment (with the
forest plot), the split of units, power.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..formatting import number
from ..formatting import p_value as format_p
from ..stats import CupedStatus, power_estimate
from ..tables import Column, Table
from .common import ResultsOptions


def _metric_kind(metric: Mapping[str, Any]) -> str:
    """How to show a metric's values: pct for proportions, money_k for cost (USD per 1,000 units:
    a unit's cost is a fraction of a cent), ms for latency and time to first token."""
    if metric.get("type") == "proportion":
        return "pct"
    call_value = (metric.get("definition") or {}).get("call_value") or ""
    if call_value == "cost_usd" or metric.get("name", "").startswith("cost"):
        return "money_k"
    if call_value in ("latency_ms", "ttft_ms") or metric.get("name", "").startswith(("latency", "ttft")):
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


#: A metric's forest-plot scale reaches at most this many times the typical (lower-median) extent
#: of its treatments' intervals; an interval beyond it is clipped with a marker.
CLIP_FACTOR = 3.0


def forest_axis(intervals: Iterable[Any]) -> tuple[float, float] | None:
    """The forest-plot scale of one metric's rows (relative lifts): from its lowest to its highest
    bound, always with 0, padded 8 %, never below −100 %; None without any interval.

    Each metric gets its own scale, so a guardrail at +6,719 % no longer squeezes a primary
    metric's ±10 % to a dot. Inside a metric, a treatment whose interval reaches beyond
    :data:`CLIP_FACTOR` × the lower median of the treatments' extents (``max(|low|, |high|)``) is
    clipped there (the page draws a marker and prints the interval)."""
    cis = [(lo, hi) for lo, hi in intervals if lo is not None and hi is not None]
    if not cis:
        return None
    extents = sorted(max(abs(lo), abs(hi)) for lo, hi in cis)
    reach = max(extents[(len(extents) - 1) // 2] * CLIP_FACTOR, 0.01)
    lo = max(min(0.0, *(c[0] for c in cis)), -reach)
    hi = min(max(0.0, *(c[1] for c in cis)), reach)
    span = max(hi - lo, 0.02)
    return max(lo - 0.08 * span, -1.0), hi + 0.08 * span


def metric_table(*, body: Mapping[str, Any], options: ResultsOptions) -> Table:
    """One row per metric × treatment: values, relative lift, interval (drawn on its metric's
    scale, :func:`forest_axis`, and printed),
    p-value (frequentist) or chance to beat control (Bayesian), verdict; guardrails marked."""
    rows = []
    for m in body.get("metrics", []):
        kind = _metric_kind(m)
        label = (m.get("label") or m["name"]) + (", per 1,000 units" if kind == "money_k" else "")
        means = {v["key"]: v.get("mean") for v in m.get("variants", [])}
        control = next((v["key"] for v in body.get("variants", []) if v.get("is_control")), "")
        if m.get("status") != "ok" or not m.get("comparisons"):
            rows.append(
                {
                    "metric": label,
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
            if verdict == "zero_variance" and c.get("absolute_lift"):
                # both arms constant, different values: no test, the difference is certain
                better = (c["absolute_lift"] > 0) == bool(m.get("higher_is_better", True))
                verdict = "constant_better" if better else "constant_worse"
            if bayes and e["chance"] is not None:
                verdict = (
                    "better" if e["chance"] >= 0.95 else "worse" if e["chance"] <= 0.05 else "inconclusive"
                )
            ci = e["ci"] or (None, None)
            rows.append(
                {
                    "metric": label,
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
    by_metric: dict[str, list[dict]] = {}
    for r in rows:
        by_metric.setdefault(r["metric_name"], []).append(r)
    for metric_rows in by_metric.values():
        axis = forest_axis((r.get("ci_low"), r.get("ci_high")) for r in metric_rows)
        for r in metric_rows:
            if r.get("forest"):
                r["forest"]["axis"] = axis
    bayes = options.engine == "bayesian"
    ci_name = "credible interval" if bayes else "confidence interval"
    level = f"{(1 - (body.get('alpha') or 0.05)) * 100:g} %"
    columns = [
        Column("metric", "Metric"),
        Column("variant", "Treatment"),
        Column("control_value", "Control", "num"),
        Column("treatment_value", "Treatment value", "num"),
        Column("relative_lift", "Relative lift", "lift"),
        Column("forest", f"Lift with its {level} {ci_name} (scale per metric)", "forest"),
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
