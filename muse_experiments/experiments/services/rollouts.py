"""Progressive rollouts: create, start, pause, advance and roll back (writes; one transaction each).

A rollout drives a two-variant experiment of the same key: ``current`` is the control, the
``candidate`` the treatment (positioned last, coverage 1). Its weights are ``[1 − p, p]`` for
the step's percent ``p``: GrowthBook bucket ranges put the candidate at ``[1 − p, 1)`` of the
hash space, a range that only grows with ``p``, so a unit on the candidate keeps it at every later
step (the experiment's seed never changes). Each weight change opens a new phase, so every step's
guardrails are tested on the step's own units.

The scheduled check that decides to advance or roll back is in the analytics app
(:func:`analytics.rollouts.rollout_check`); it calls :func:`rollout_advance` /
:func:`rollout_roll_back` here. Every change writes a :class:`~..models.RolloutEvent` (the ramp's
history, with evidence) and an :class:`~..models.AuditEntry`. Invalid input or an illegal
transition raises :class:`django.core.exceptions.ValidationError` with field errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from ..models import Experiment, Rollout, RolloutEvent, RolloutState
from .audit import audit_record
from .edits import experiment_create, experiment_update
from .lifecycle import experiment_start
from .rules import metric_names, repeated_guardrails_error
from .variants import VariantInput

CONTROL_KEY, CANDIDATE_KEY = "current", "candidate"
#: States the scheduled check looks at (a paused rollout still rolls back on a breach).
CHECKED_STATES = (RolloutState.RUNNING, RolloutState.PAUSED)
#: At most this many steps: each is a phase, and each guardrail is tested at
#: ``alpha / (guardrails × steps)``, so a longer ramp could never detect a breach.
MAX_STEPS = 20


def rollout_steps_errors(steps: Any) -> list[str]:
    """Why ``steps`` is not a valid ramp (percent values, strictly increasing, in (0, 100], last
    100, at most :data:`MAX_STEPS`); empty when valid."""
    if not isinstance(steps, list | tuple) or not steps:
        return ["Give the steps as a non-empty list of percents, e.g. [1, 5, 25, 50, 100]."]
    if len(steps) > MAX_STEPS:
        return [
            f"At most {MAX_STEPS} steps (got {len(steps)}): each guardrail is tested at alpha / (guardrails × steps)."
        ]
    if not all(isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) for s in steps):
        return ["Every step is a number (percent of units on the candidate)."]
    errors = []
    if any(not 0 < s <= 100 for s in steps):
        errors.append("Every step is a percent in (0, 100].")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        errors.append("Steps must be strictly increasing.")
    if steps[-1] != 100:
        errors.append("The last step must be 100 (the candidate serves every unit).")
    return errors


def _model_name(endpoint: Any) -> str:
    """A model as people name it: its version label (``avocado-v15``), else its public id (whose
    32 hex digits, unbreakable, overflowed the results list's name column)."""
    return endpoint.version_label or endpoint.public_id


def _variants(rollout_or_models: Mapping[str, Any], percent: float) -> list[VariantInput]:
    share = percent / 100.0
    return [
        VariantInput(
            key=CONTROL_KEY, weight=1.0 - share, endpoint=rollout_or_models["current"], is_control=True
        ),
        VariantInput(key=CANDIDATE_KEY, weight=share, endpoint=rollout_or_models["candidate"]),
    ]


def _event(
    rollout: Rollout, *, at: datetime, to: float, reason: str, actor: str, message: str = "", evidence=None
) -> RolloutEvent:
    return RolloutEvent.objects.create(
        rollout=rollout,
        at=at,
        from_percent=rollout.percent,
        to_percent=to,
        reason=reason,
        message=message[:500],
        actor=actor,
        evidence=dict(evidence or {}),
    )


@transaction.atomic
def rollout_create(
    *,
    key: str,
    candidate: Any,
    current: Any,
    steps: Sequence[float],
    step_min_minutes: int,
    step_min_units: int,
    guardrails: Sequence[str],
    actor: str,
) -> Rollout:
    """A draft rollout and its draft experiment (key ``key``) at the first step's weights.

    ``candidate`` / ``current``: ``routing.ModelEndpoint`` rows; ``guardrails``: distinct metric
    names. Raises ValidationError keyed by ``key``, ``model``, ``replaces``, ``steps``,
    ``guardrails``.
    """
    errors: dict[str, list[str]] = {}
    if Rollout.objects.filter(key=key).exists() or Experiment.objects.filter(key=key).exists():
        errors.setdefault("key", []).append(f"A rollout or experiment {key!r} already exists.")
    if candidate.pk == current.pk:
        errors.setdefault("replaces", []).append("The candidate must differ from the model it replaces.")
    steps_errors = rollout_steps_errors(list(steps))
    if steps_errors:
        errors["steps"] = steps_errors
    known = metric_names()
    names = list(guardrails)
    if not names:
        errors.setdefault("guardrails", []).append("Name at least one guardrail metric.")
    unknown = sorted({n for n in names if known is not None and n not in known})
    if unknown:
        errors.setdefault("guardrails", []).append(f"Unknown guardrail metric(s): {', '.join(unknown)}.")
    repeated = repeated_guardrails_error(names)
    if repeated:
        errors.setdefault("guardrails", []).append(repeated)
    if errors:
        raise ValidationError(errors)
    experiment = experiment_create(
        key=key,
        name=f"Rollout of {_model_name(candidate)} replacing {_model_name(current)}",
        hypothesis="The candidate is no worse than the current model on every guardrail.",
        variants=_variants({"candidate": candidate, "current": current}, float(steps[0])),
        actor=actor,
        primary_metric=names[0],
        guardrail_metrics=names,
    )
    rollout = Rollout.objects.create(
        key=key,
        experiment=experiment,
        candidate=candidate,
        current=current,
        steps=[float(s) if not float(s).is_integer() else int(s) for s in steps],
        step_min_minutes=step_min_minutes,
        step_min_units=step_min_units,
        guardrails=names,
    )
    audit_record(actor=actor, action="rollout_create", obj=rollout, changes={"steps": rollout.steps})
    return rollout


def _state_words(rollout: Rollout) -> str:
    """The state as a word of a sentence: ``rolled-back``, not the code ``rolled_back``."""
    return rollout.state.replace("_", "-")


def _locked(rollout: Rollout) -> Rollout:
    return (
        Rollout.objects.select_for_update()
        .select_related("experiment", "candidate", "current")
        .get(pk=rollout.pk)
    )


def _set_percent(rollout: Rollout, percent: float, actor: str) -> None:
    models = {"candidate": rollout.candidate, "current": rollout.current}
    experiment_update(
        experiment=rollout.experiment, actor=actor, variants=_variants(models, percent), ramp=True
    )


@transaction.atomic
def rollout_start(*, rollout: Rollout, actor: str, now: datetime | None = None) -> Rollout:
    """draft → running at the first step (starts the experiment); paused → running (resumes; the
    step's clock keeps running). Raises ValidationError on another state."""
    now = now or timezone.now()
    rollout = _locked(rollout)
    if rollout.state == RolloutState.DRAFT:
        experiment_start(experiment=rollout.experiment, actor=actor, ramp=True)
        first = float(rollout.steps[0])
        _event(rollout, at=now, to=first, reason="started", actor=actor)
        rollout.state, rollout.step, rollout.percent, rollout.step_started_at = (
            RolloutState.RUNNING,
            0,
            first,
            now,
        )
    elif rollout.state == RolloutState.PAUSED:
        _event(rollout, at=now, to=rollout.percent, reason="resumed", actor=actor)
        rollout.state = RolloutState.RUNNING
    else:
        raise ValidationError({"state": f"A {_state_words(rollout)} rollout cannot be started."})
    rollout.save()
    audit_record(actor=actor, action="rollout_start", obj=rollout, changes={"state": rollout.state})
    return rollout


@transaction.atomic
def rollout_pause(*, rollout: Rollout, actor: str, now: datetime | None = None) -> Rollout:
    """running → paused: holds the step (no advance); guardrails are still checked."""
    rollout = _locked(rollout)
    if rollout.state != RolloutState.RUNNING:
        raise ValidationError({"state": f"A {_state_words(rollout)} rollout cannot be paused."})
    _event(rollout, at=now or timezone.now(), to=rollout.percent, reason="paused", actor=actor)
    rollout.state = RolloutState.PAUSED
    rollout.save()
    audit_record(actor=actor, action="rollout_pause", obj=rollout, changes={"state": rollout.state})
    return rollout


@transaction.atomic
def rollout_roll_back(
    *,
    rollout: Rollout,
    actor: str,
    reason: str = "rolled_back_manual",
    message: str = "",
    evidence: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Rollout:
    """running/paused → rolled_back: the candidate's weight goes to 0 (every unit on the current
    model), with the reason and evidence in the history and the audit log."""
    rollout = _locked(rollout)
    if rollout.state not in CHECKED_STATES:
        raise ValidationError({"state": f"A {_state_words(rollout)} rollout cannot be rolled back."})
    _set_percent(rollout, 0.0, actor)
    _event(
        rollout,
        at=now or timezone.now(),
        to=0.0,
        reason=reason,
        actor=actor,
        message=message,
        evidence=evidence,
    )
    before = rollout.percent
    rollout.state, rollout.percent = RolloutState.ROLLED_BACK, 0.0
    rollout.save()
    audit_record(
        actor=actor,
        action="rollout_roll_back",
        obj=rollout,
        changes={"percent": [before, 0.0], "reason": reason, "message": message[:500]},
    )
    return rollout


@transaction.atomic
def rollout_advance(
    *, rollout: Rollout, actor: str, evidence: Mapping[str, Any] | None = None, now: datetime | None = None
) -> Rollout:
    """running → the next step (completed when it is 100 %). Raises ValidationError when the
    rollout is not running."""
    now = now or timezone.now()
    rollout = _locked(rollout)
    if rollout.state != RolloutState.RUNNING or rollout.step + 1 >= len(rollout.steps):
        raise ValidationError(
            {"state": f"A {_state_words(rollout)} rollout at step {rollout.step} cannot advance."}
        )
    target = float(rollout.steps[rollout.step + 1])
    _set_percent(rollout, target, actor)
    done = target >= 100.0
    _event(
        rollout, at=now, to=target, reason="completed" if done else "advanced", actor=actor, evidence=evidence
    )
    before = rollout.percent
    rollout.step, rollout.percent, rollout.step_started_at = rollout.step + 1, target, now
    if done:
        rollout.state = RolloutState.COMPLETED
    rollout.save()
    audit_record(actor=actor, action="rollout_advance", obj=rollout, changes={"percent": [before, target]})
    return rollout


def rollout_hold_record(
    *, rollout: Rollout, actor: str, reason: str, message: str, evidence=None, now: datetime | None = None
) -> RolloutEvent | None:
    """Record a hold (e.g. a kill switch in force) once per step and reason; None when the last
    event already says so."""
    last = rollout.history.order_by("-at", "-id").first()
    if last is not None and last.reason == reason and last.to_percent == rollout.percent:
        return None
    return _event(
        rollout,
        at=now or timezone.now(),
        to=rollout.percent,
        reason=reason,
        actor=actor,
        message=message,
        evidence=evidence,
    )


def rollout_checked(*, rollout: Rollout, now: datetime) -> None:
    """Stamp the time of the last check."""
    Rollout.objects.filter(pk=rollout.pk).update(last_checked_at=now)
