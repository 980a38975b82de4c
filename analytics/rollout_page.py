"""The rollout section of an experiment's results page: state, the ramp with each decision and its
evidence, and the alert when a guardrail rolled the candidate back (reads only)."""

from __future__ import annotations

from typing import Any

from muse_experiments.experiments.models import Experiment, Rollout, RolloutState

from .rollout_policy import CONSTANT_STATUSES
from .tables import Column, Table


def _evidence_text(evidence: dict[str, Any]) -> str:
    """The guardrail tests of one decision in a line: metric, relative lift, always-valid p; a
    guardrail constant in both arms (standard error 0) says so instead of a p-value: "same value
    in both arms", or its certain difference."""
    parts = []
    for g in evidence.get("guardrails", []):
        p = g.get("always_valid_p")
        lift = g.get("relative_lift")
        constant = g.get("status") in CONSTANT_STATUSES or (
            g.get("status") == "ok" and g.get("std_error") == 0
        )
        if constant and g.get("certain"):
            bits = [f"{g['metric']}: both arms constant, difference {g.get('estimate'):+.4g} certain (SE 0)"]
        elif constant:
            bits = [f"{g['metric']}: same value in both arms (SE 0)"]
        else:
            bits = [f"{g['metric']}: {g.get('status')}"]
        if lift is not None:
            bits.append(f"lift {lift:+.1%}")
        if p is not None and not constant:
            bits.append(f"p={p:.2g}")
        parts.append(" ".join(bits) + (" WORSE" if g.get("worse") else ""))
    return "; ".join(parts)


def rollout_section(*, experiment: Experiment) -> dict[str, Any] | None:
    """``{"rollout", "state_label", "alert", "table"}`` for an experiment a rollout drives, else None.

    ``alert`` is the message of the guardrail rollback (None otherwise); ``table`` lists every
    history entry: when, from % → to %, the decision, who, and the evidence (guardrail tests with
    their always-valid p-values and the level they were held to).
    """
    rollout = Rollout.objects.filter(experiment=experiment).select_related("candidate", "current").first()
    if rollout is None:
        return None
    history = list(rollout.history.all())
    rows = [
        {
            "at": h.at,
            "from_percent": h.from_percent / 100.0,
            "to_percent": h.to_percent / 100.0,
            "reason": h.reason,
            "message": h.message,
            "actor": h.actor,
            "evidence": _evidence_text(h.evidence),
            "level": h.evidence.get("level"),
            "row_class": "alert" if h.reason.startswith("rolled_back") else "",
        }
        for h in history
    ]
    alert = next(
        (h.message for h in reversed(history) if h.reason == "rolled_back_guardrail"),
        None,
    )
    table = Table(
        id="rollout",
        title="Rollout ramp",
        note=(
            f"{rollout.candidate.public_id} replacing {rollout.current.public_id}: steps "
            f"{', '.join(f'{s:g} %' for s in rollout.steps)}, each held ≥ {rollout.step_min_minutes} min and "
            f"≥ {rollout.step_min_units} candidate units; guardrails {', '.join(rollout.guardrails)} tested at "
            "every check with the always-valid sequential test (level = alpha / (guardrails × steps))."
        ),
        columns=[
            Column("at", "When", "when"),
            Column("from_percent", "From", "pct"),
            Column("to_percent", "To", "pct"),
            Column("reason", "Decision"),
            Column("message", "Why"),
            Column("evidence", "Evidence (guardrail tests)"),
            Column("level", "Test level", "p"),
            Column("actor", "By"),
        ],
        rows=rows,
        row_class="row_class",
    )
    return {
        "rollout": rollout,
        "state_label": RolloutState(rollout.state).label,
        "alert": alert,
        "table": table,
    }
