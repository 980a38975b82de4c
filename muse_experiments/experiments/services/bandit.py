"""Bandit updates: the weights a scheduled update decided become a new phase (same seed, so units
keep their arm through the sticky scope), recorded as a :class:`~..models.BanditUpdate` and in
the audit. A winner's update gives it all but the other arms' floors (decided in ``analytics``);
the experiment keeps running, and no further update is due in that seed run.

The statistics that decide the weights live in ``analytics`` (this app never imports it); the
analytics task calls :func:`bandit_update_record` with what it decided.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from muse_experiments.infra import config_version

from ..bandit_config import update_slot
from ..models import BanditUpdate, Experiment, ExperimentStatus, ExperimentType, PhaseReason, Variant
from ..selectors import sticky_scope
from .audit import audit_record
from .edits import experiment_lock
from .variants import WEIGHT_TOLERANCE, phase_current_seed, phase_open

BANDIT_ACTOR = "bandit"


def bandit_winner(*, experiment: Experiment) -> BanditUpdate | None:
    """The update that declared the winner of the current seed run (the phases sharing the
    current seed, :func:`~..selectors.sticky_scope`), or None."""
    first, _ = sticky_scope(experiment)
    return (
        BanditUpdate.objects.filter(experiment=experiment, phase__gte=first)
        .exclude(winner="")
        .order_by("slot")
        .first()
    )


def bandit_slot_due(*, experiment: Experiment, now: datetime) -> int | None:
    """The update slot ``now`` falls in when the bandit is running, has no winner yet and that
    slot has no update yet, else None (a cheap check before any statistics are computed). Slots
    are ``update_every_minutes`` minutes of ``BANDIT_MINUTE_S`` seconds (60)."""
    if experiment.type != ExperimentType.BANDIT or experiment.status != ExperimentStatus.RUNNING:
        return None
    if experiment.started_at is None or not experiment.bandit:
        return None
    slot = update_slot(
        started_at=experiment.started_at,
        now=now,
        every_minutes=experiment.bandit["update_every_minutes"],
        minute_s=settings.BANDIT_MINUTE_S,
    )
    if BanditUpdate.objects.filter(experiment=experiment, slot=slot).exists():
        return None
    if bandit_winner(experiment=experiment) is not None:
        return None
    return slot


def _check_weights(weights: Mapping[str, float], keys: list[str]) -> None:
    if set(weights) != set(keys):
        raise ValidationError({"weights": [f"Weights must name exactly the variants {sorted(keys)}."]})
    values = list(weights.values())
    if not all(isinstance(w, float | int) and math.isfinite(w) and 0 <= w <= 1 for w in values):
        raise ValidationError({"weights": ["Weights must be finite numbers in [0, 1]."]})
    if abs(math.fsum(values) - 1.0) > WEIGHT_TOLERANCE:
        raise ValidationError({"weights": [f"Weights must sum to 1, got {math.fsum(values)}."]})


@transaction.atomic
def bandit_update_record(
    *,
    experiment: Experiment,
    slot: int,
    now: datetime,
    decision: str,
    weights: Mapping[str, float],
    probability_best: Mapping[str, float],
    units: Mapping[str, int],
    winner: str = "",
    message: str = "",
    cost: Mapping[str, Any] | None = None,
) -> BanditUpdate | None:
    """Apply one scheduled update: new weights (a new phase, reason ``bandit``, when they changed),
    a :class:`BanditUpdate` row and an audit entry (action ``bandit_winner`` with a ``winner``,
    whose weights the caller gives; the experiment keeps running). ``cost``: the cost-cap check
    (``{"cap_usd_per_call", "arms": {arm: {...}}}``), kept in the audit entry.

    Idempotent: returns None without writing when the experiment is no longer a running bandit,
    ``slot`` already has an update or a winner was declared (checked under the experiment's row
    lock, so two workers running the same slot write once). ``weights`` are shares summing to 1 (±1e-6), on the
    hash's 1e-4 grid. Raises ValidationError for weights that do not name exactly the variants.
    """
    experiment = experiment_lock(experiment=experiment)
    if experiment.type != ExperimentType.BANDIT or experiment.status != ExperimentStatus.RUNNING:
        return None
    if BanditUpdate.objects.filter(experiment=experiment, slot=slot).exists():
        return None
    if bandit_winner(experiment=experiment) is not None:
        return None
    variants = list(experiment.variants.all())
    _check_weights(weights, [v.key for v in variants])
    before = {v.key: v.weight for v in variants}
    changes: dict = {"slot": slot, "decision": decision, "probability_best": dict(probability_best)}
    if cost:
        changes["cost"] = dict(cost)
    if any(abs(before[k] - float(w)) > 1e-9 for k, w in weights.items()):
        for v in variants:
            Variant.objects.filter(pk=v.pk).update(weight=float(weights[v.key]))
        phase = phase_open(
            experiment=experiment, seed=phase_current_seed(experiment), reason=PhaseReason.BANDIT
        )
        experiment.version += 1
        experiment.save(update_fields=["phase", "updated_at", "version"])
        changes["weights"] = [before, {k: float(w) for k, w in weights.items()}]
        changes["phase"] = [phase.number - 1, phase.number]
    update = BanditUpdate.objects.create(
        experiment=experiment,
        slot=slot,
        at=now,
        phase=experiment.phase,
        decision=decision,
        weights={k: float(w) for k, w in weights.items()},
        probability_best={k: float(p) for k, p in probability_best.items()},
        units={k: int(n) for k, n in units.items()},
        winner=winner,
        message=message[:300],
    )
    audit_record(
        actor=BANDIT_ACTOR,
        action="bandit_winner" if winner else "bandit_update",
        obj=experiment,
        changes={
            **changes,
            **({"winner": winner} if winner else {}),
            **({"message": message[:300]} if message else {}),
        },
    )
    config_version.bump()
    return update
