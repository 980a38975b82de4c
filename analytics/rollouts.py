"""The scheduled check of progressive rollouts: test the step's guardrails, then roll back, hold
or advance (:mod:`analytics.rollout_policy` decides; the experiments app's rollout services write).

One check of one rollout (:func:`rollout_check`), under a row lock so two workers never act twice:

1. a kill switch touching the rollout's experiment (the experiment, a variant, an endpoint or
   provider serving one) wins: the rollout holds (a ``held_kill_switch`` history entry, once);
2. otherwise a results snapshot of the current step (its experiment phase) is computed and each
   guardrail's comparison becomes a :class:`~analytics.rollout_policy.GuardrailReading`;
3. the decision is applied: rollback (weights to 0 %, history with evidence, audit entry,
   ``muse_rollout_rollbacks_total``), advance, or hold; a hold for a guardrail still waiting for
   data (e.g. no outcome event yet) is written to the history once per step, with its evidence.

Idempotent and safe late: every check reads all the step's data so far (a missed check loses no
data and skips no guardrail), a step advances at most once per check, and an advance opens a new
phase whose clock starts at the check, so running the check twice in a row advances once.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from prometheus_client import Counter

from muse_experiments.experiments.models import Rollout, RolloutState
from muse_experiments.experiments.services.rollouts import (
    CHECKED_STATES,
    rollout_advance,
    rollout_checked,
    rollout_hold_record,
    rollout_roll_back,
)
from routing.selectors import experiment_kills_in_force

from .models import SnapshotTrigger
from .rollout_policy import WAITING_FOR_DATA, GuardrailReading, RolloutDecision, rollout_decide
from .services import results_compute

log = logging.getLogger(__name__)
ROLLOUT_ACTOR = "analytics:rollouts"
ROLLBACKS = Counter(
    "muse_rollout_rollbacks", "Rollouts rolled back by a guardrail breach.", ["rollout", "metric"]
)


def readings_from(results: dict, guardrails: list[str]) -> list[GuardrailReading]:
    """One reading per guardrail from a snapshot's intent-to-treat results (``status="missing"``
    when the snapshot has no comparison for it), with each arm's units with data (None in
    snapshots stored before they were counted)."""
    by_name = {m["name"]: m for m in results.get("metrics", [])}
    control = next((v["key"] for v in results.get("variants", []) if v.get("is_control")), None)
    out = []
    for name in guardrails:
        metric = by_name.get(name)
        comparison = (metric or {}).get("comparisons") or [{}]
        c = comparison[0]
        with_data = {v["key"]: v.get("units_with_data") for v in (metric or {}).get("variants", [])}
        out.append(
            GuardrailReading(
                metric=name,
                status=c.get("status", "missing") if metric else "missing",
                higher_is_better=bool((metric or {}).get("higher_is_better", True)),
                control_n=int(c.get("control_n") or 0),
                treatment_n=int(c.get("treatment_n") or 0),
                estimate=c.get("absolute_lift"),
                std_error=c.get("std_error"),
                relative_lift=c.get("relative_lift"),
                control_with_data=with_data.get(control),
                treatment_with_data=with_data.get(c.get("variant")),
            )
        )
    return out


def rollout_check(*, rollout_id: int, now: datetime | None = None) -> RolloutDecision | None:
    """Check one rollout now (see the module docstring); returns the decision, or None when the
    rollout is not running or paused (or is gone)."""
    now = now or timezone.now()
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update()
            .select_related("experiment", "candidate", "current")
            .filter(pk=rollout_id, state__in=CHECKED_STATES)
            .first()
        )
        if rollout is None:
            return None
        rollout_checked(rollout=rollout, now=now)
        kills = experiment_kills_in_force(experiment_key=rollout.experiment.key)
        if kills:
            names = ", ".join(f"{k.scope}:{k.target or '*'}" for k in kills)
            decision = RolloutDecision("hold", "held_kill_switch", f"kill switch in force ({names})")
            rollout_hold_record(
                rollout=rollout,
                actor=ROLLOUT_ACTOR,
                reason=decision.reason,
                message=decision.message,
                now=now,
            )
            return decision
        snapshot = results_compute(
            experiment=rollout.experiment, trigger=SnapshotTrigger.SCHEDULE, apply_guardrails=False
        )
        readings = readings_from(snapshot.results, list(rollout.guardrails))
        candidate_units = next(
            (v.get("units", 0) for v in snapshot.results.get("variants", []) if v["key"] == "candidate"), 0
        )
        held = (now - rollout.step_started_at).total_seconds() / 60.0 if rollout.step_started_at else 0.0
        decision = rollout_decide(
            readings=readings,
            steps=[float(s) for s in rollout.steps],
            percent=rollout.percent,
            held_minutes=held,
            min_minutes=rollout.step_min_minutes,
            min_units=rollout.step_min_units,
            candidate_units=int(candidate_units),
            paused=rollout.state == RolloutState.PAUSED,
            alpha=snapshot.results.get("alpha") or 0.05,
        )
        evidence = {**decision.evidence, "snapshot": snapshot.pk, "phase": snapshot.phase}
        if decision.action == "rollback":
            rollout_roll_back(
                rollout=rollout,
                actor=ROLLOUT_ACTOR,
                reason=decision.reason,
                message=decision.message,
                evidence=evidence,
                now=now,
            )
            worst = min(
                (g for g in decision.evidence["guardrails"] if g["worse"]), key=lambda g: g["always_valid_p"]
            )
            transaction.on_commit(lambda: ROLLBACKS.labels(rollout.key, worst["metric"]).inc())
            log.warning("rollout %s rolled back: %s", rollout.key, decision.message)
        elif decision.action == "advance":
            rollout_advance(rollout=rollout, actor=ROLLOUT_ACTOR, evidence=evidence, now=now)
        elif decision.reason == WAITING_FOR_DATA:
            rollout_hold_record(
                rollout=rollout,
                actor=ROLLOUT_ACTOR,
                reason=decision.reason,
                message=decision.message,
                evidence=evidence,
                now=now,
            )
    return decision


def rollouts_to_check() -> list[int]:
    """Ids of the rollouts the scheduled check looks at (running or paused)."""
    return list(Rollout.objects.filter(state__in=CHECKED_STATES).values_list("pk", flat=True))
