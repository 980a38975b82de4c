"""The bandit part of the results page: weights over time, probability best per update, and the
period-stratified lift, as :class:`~analytics.tables.Table` rows and chart series built from
:func:`analytics.bandits.bandit_results`."""

from __future__ import annotations

from typing import Any

from .tables import Column, Table


def _minute(iso: str | None) -> str:
    """``2026-01-01T12:00:00+00:00`` → ``2026-01-01 12:00`` (UTC, as stored)."""
    return iso[:16].replace("T", " ") if iso else "open"


def bandit_page(results: dict[str, Any]) -> dict[str, Any]:
    """``{"tables": {"bandit_weights", "bandit_updates", "bandit_lifts"[, "bandit_cost"]},
    "weights_chart", "probability_chart", "winner", "winner_update", "cost", "status", "reason"}``:
    the charts are ``{"labels", "series": {arm: [values]}}`` as ``dashboard.js`` draws them
    (stacked bars: weights per period, P(best) per update); ``bandit_cost`` (with a cost cap) is
    each arm's cost per call against the cap."""
    periods, updates = results["periods"], results["updates"]
    arms = list(periods[0]["weights"]) if periods else list(updates[0]["weights"] if updates else {})
    weight_rows = []
    for p in periods:
        srm = p.get("srm") or {}
        row = {
            "phase": p["phase"],
            "started": _minute(p["started_at"]),
            "ended": _minute(p["ended_at"]),
            "srm_p": srm.get("p_value"),
            "srm": srm.get("status", "—"),
        }
        for arm in arms:
            row[f"w_{arm}"] = p["weights"].get(arm)
            row[f"n_{arm}"] = p["units"].get(arm)
        weight_rows.append(row)
    weights = Table(
        id="bandit_weights",
        title="Weights over time (one row per period)",
        columns=[
            Column("phase", "Phase", "int"),
            Column("started", "Started (UTC)"),
            Column("ended", "Ended (UTC)"),
            *[Column(f"w_{a}", f"{a} weight", "pct") for a in arms],
            *[Column(f"n_{a}", f"{a} new units", "int") for a in arms],
            Column("srm_p", "SRM p", "p", "New units of the period against the weights in force then"),
            Column("srm", "SRM", "status"),
        ],
        rows=weight_rows,
        note="A unit counts in the period of its first exposure; returning units keep their arm.",
    )
    update_rows = []
    for u in updates:
        row = {"at": _minute(u["at"]), "decision": u["decision"], "phase": u["phase"], "winner": u["winner"]}
        row.update({f"p_{a}": u["probability_best"].get(a) for a in arms})
        row.update({f"w_{a}": u["weights"].get(a) for a in arms})
        update_rows.append(row)
    update_table = Table(
        id="bandit_updates",
        title="Updates: probability that each arm is best",
        columns=[
            Column("at", "When (UTC)"),
            Column("decision", "Decision", "status"),
            Column("phase", "Phase", "int"),
            *[Column(f"p_{a}", f"P({a} best)", "pct") for a in arms],
            *[Column(f"w_{a}", f"{a} weight", "pct") for a in arms],
            Column("winner", "Winner"),
        ],
        rows=update_rows,
    )
    lift_rows = [
        {
            "variant": lift["variant"],
            "status": lift.get("status"),
            "control_mean": lift.get("control_mean"),
            "treatment_mean": lift.get("treatment_mean"),
            "absolute_lift": lift.get("absolute_lift"),
            "ci_low": (lift.get("absolute_ci") or [None, None])[0],
            "ci_high": (lift.get("absolute_ci") or [None, None])[1],
            "relative_lift": lift.get("relative_lift"),
            "p_value": lift.get("p_value"),
            "periods_used": lift.get("periods_used"),
        }
        for lift in results["lifts"]
    ]
    lifts = Table(
        id="bandit_lifts",
        title="Lift against control, stratified by period",
        columns=[
            Column("variant", "Variant"),
            Column("status", "Status", "status"),
            Column("control_mean", "Control", "num"),
            Column("treatment_mean", "Variant", "num"),
            Column("absolute_lift", "Absolute lift", "num"),
            Column("ci_low", "CI low", "num"),
            Column("ci_high", "CI high", "num"),
            Column("relative_lift", "Relative lift", "lift"),
            Column("p_value", "p", "p"),
            Column("periods_used", "Periods", "int"),
        ],
        rows=lift_rows,
        note="Each period's difference weighted by the period's share of units (as GrowthBook does), so "
        "moving weights do not bias the lift; the interval is at the analysis settings' level.",
    )
    tables = [weights, update_table, lifts]
    cost = results.get("cost")
    if cost:
        tables.append(
            Table(
                id="bandit_cost",
                title=f"Cost per call against the cap of ${cost['cap_usd_per_call']:g}",
                columns=[
                    Column("variant", "Variant"),
                    Column("cost_per_call", "Cost per call (USD)", "num"),
                    Column("probability_over", "P(cost > cap)", "pct"),
                    Column("over_cap", "Over the cap", "status"),
                ],
                rows=[
                    {
                        "variant": arm,
                        "cost_per_call": c["cost_per_call"],
                        "probability_over": c["probability_over"],
                        "over_cap": "over" if c["over_cap"] else "ok",
                    }
                    for arm, c in cost["arms"].items()
                ],
                note="Σ cost / Σ calls of the arm's units, every period; an arm is over when the "
                "posterior probability that its cost per call exceeds the cap is above 0.95 (a normal "
                "posterior around the ratio with its delta-method standard error). Over: floor only, "
                "cannot win.",
            )
        )
    return {
        "tables": {t.id: t for t in tables},
        "weights_chart": {
            "labels": [f"phase {p['phase']}" for p in periods],
            "series": {a: [p["weights"].get(a) for p in periods] for a in arms},
        },
        "probability_chart": {
            "labels": [_minute(u["at"]) for u in updates],
            "series": {a: [u["probability_best"].get(a) for u in updates] for a in arms},
        },
        "winner": results.get("winner", ""),
        "winner_update": results.get("winner_update"),
        "cost": cost,
        "status": results.get("status"),
        "reason": results.get("reason"),
    }
