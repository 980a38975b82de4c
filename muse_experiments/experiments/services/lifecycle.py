"""An experiment's lifecycle (:data:`ALLOWED_TRANSITIONS`)::

    draft ──start──▶ running ◀──start/pause──▶ paused
      │                 │                         │
      └──archive──┐     └─────stop──▶ stopped ◀───┘
                  ▼                      │
               archived ◀───archive──────┘

The first start opens phase 1; re-randomising opens a phase with a new seed (:mod:`.variants`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from muse_experiments.infra import config_version

from ..bandit_config import equal_weights, floor_errors
from ..models import (
    Experiment,
    ExperimentPhase,
    ExperimentStatus,
    ExperimentType,
    PhaseReason,
    Rollout,
    RolloutState,
    Variant,
)
from .audit import audit_record
from .edits import experiment_lock, rollout_key_of
from .rules import EDITABLE_FIELDS, LIVE_STATUSES, full_clean, validate_experiment_fields
from .shadow import shadow_tests_stop_for_source
from .variants import VariantInput, phase_current_seed, phase_open, validate_variants

ALLOWED_TRANSITIONS: Mapping[str, frozenset[str]] = {
    ExperimentStatus.DRAFT: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.ARCHIVED}),
    ExperimentStatus.RUNNING: frozenset({ExperimentStatus.PAUSED, ExperimentStatus.STOPPED}),
    ExperimentStatus.PAUSED: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.STOPPED}),
    ExperimentStatus.STOPPED: frozenset({ExperimentStatus.ARCHIVED}),
    ExperimentStatus.ARCHIVED: frozenset(),
}


def _transition(
    *, experiment: Experiment, to: str, expected_version: int | None = None
) -> tuple[Experiment, str]:
    experiment = experiment_lock(experiment=experiment, expected_version=expected_version)
    if to not in ALLOWED_TRANSITIONS[experiment.status]:
        raise ValidationError({"status": f"Cannot go from {experiment.status} to {to}."})
    if to in (ExperimentStatus.PAUSED, ExperimentStatus.STOPPED, ExperimentStatus.ARCHIVED):
        _refuse_behind_live_rollout(experiment, to)
    before = experiment.status
    experiment.status = to
    experiment.version += 1
    return experiment, before


def _refuse_behind_live_rollout(experiment: Experiment, to: str) -> None:
    """A running or paused rollout drives its experiment's traffic (and reads its data): pausing,
    stopping or archiving the experiment by hand would leave the rollout reporting a ramp that no
    longer serves anyone. Raises ValidationError naming the rollout's own actions; once the rollout
    is rolled back or completed, the experiment is the product manager's again."""
    live = (
        Rollout.objects.filter(experiment=experiment, state__in=(RolloutState.RUNNING, RolloutState.PAUSED))
        .values_list("key", flat=True)
        .first()
    )
    if live is not None:
        raise ValidationError(
            {
                "status": f"This experiment is rollout {live!r}'s ramp, which is still live: pause or "
                f"roll back the rollout instead (it cannot be {to} by hand)."
            }
        )


@transaction.atomic
def experiment_start(*, experiment: Experiment, actor: str, ramp: bool = False) -> Experiment:
    """draft/paused → running. The first start opens phase 1 with the experiment's seed (a
    bandit's first start sets equal weights, recorded in the audit entry). A rollout's draft
    experiment starts only with its rollout (which passes ``ramp=True``); resuming it is allowed.

    Raises ValidationError when a bandit's weight floor times its arms exceeds 100 %, the transition is illegal, the variant set is invalid, a
    variant's model (or its provider) is disabled, or the layer slice overlaps another experiment.
    """
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.RUNNING)
    rollout_key = None if ramp or before != ExperimentStatus.DRAFT else rollout_key_of(experiment)
    if rollout_key is not None:
        raise ValidationError(
            {"status": f"This experiment is rollout {rollout_key!r}'s ramp: start the rollout instead."}
        )
    variants = list(experiment.variants.select_related("endpoint__provider"))
    validate_variants(
        [
            VariantInput(
                key=v.key,
                weight=v.weight,
                endpoint=v.endpoint,
                is_control=v.is_control,
                overrides=v.overrides,
            )
            for v in variants
        ],
        require_enabled=True,
    )
    validate_experiment_fields(
        {name: getattr(experiment, name) for name in EDITABLE_FIELDS}, exclude_id=experiment.pk
    )
    changes: dict[str, Any] = {"status": [before, experiment.status]}
    if experiment.type == ExperimentType.BANDIT and experiment.phase == 0:
        messages = floor_errors(experiment.bandit, len(variants))
        if messages:
            raise ValidationError({"bandit": messages})
        equal = equal_weights([v.key for v in variants])
        before_weights = {v.key: v.weight for v in variants}
        if equal != before_weights:
            for v in variants:
                Variant.objects.filter(pk=v.pk).update(weight=equal[v.key])
            changes["weights"] = [before_weights, equal]
    if experiment.phase == 0:
        experiment.started_at = timezone.now()
        phase_open(experiment=experiment, seed=experiment.hash_seed, reason=PhaseReason.START)
        changes["phase"] = [0, 1]
    experiment.save(update_fields=["status", "phase", "started_at", "updated_at", "version"])
    audit_record(
        actor=actor,
        action="start" if before == ExperimentStatus.DRAFT else "resume",
        obj=experiment,
        changes=changes,
    )
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_pause(*, experiment: Experiment, actor: str) -> Experiment:
    """running → paused: traffic stops entering; the phase stays open. Raises ValidationError."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.PAUSED)
    experiment.save(update_fields=["status", "updated_at", "version"])
    audit_record(actor=actor, action="pause", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_stop(*, experiment: Experiment, actor: str) -> Experiment:
    """running/paused → stopped: closes the open phase and stops the running shadow tests on its
    variants (:func:`.shadow.shadow_tests_stop_for_source`). Raises ValidationError."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.STOPPED)
    experiment.stopped_at = timezone.now()
    ExperimentPhase.objects.filter(experiment=experiment, ended_at__isnull=True).update(
        ended_at=experiment.stopped_at
    )
    experiment.save(update_fields=["status", "stopped_at", "updated_at", "version"])
    audit_record(actor=actor, action="stop", obj=experiment, changes={"status": [before, experiment.status]})
    shadow_tests_stop_for_source(experiment=experiment, actor=actor)
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_archive(*, experiment: Experiment, actor: str) -> Experiment:
    """draft/stopped → archived: hidden from layer overlap checks; read-only. A draft's running
    shadow tests stop (:func:`.shadow.shadow_tests_stop_for_source`). Raises ValidationError."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.ARCHIVED)
    experiment.save(update_fields=["status", "updated_at", "version"])
    audit_record(
        actor=actor, action="archive", obj=experiment, changes={"status": [before, experiment.status]}
    )
    shadow_tests_stop_for_source(experiment=experiment, actor=actor)
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_rerandomise(*, experiment: Experiment, actor: str, seed: str = "") -> Experiment:
    """Open a new phase with a new seed (running or paused experiments): every unit is hashed
    afresh and no earlier sticky assignment applies. ``seed`` defaults to ``<key>-<8 hex>``.
    Raises ValidationError when the experiment is not running or paused, or is a rollout's ramp
    (whose units on the candidate keep it from step to step)."""
    experiment = experiment_lock(experiment=experiment)
    if experiment.status not in LIVE_STATUSES:
        raise ValidationError(
            {"status": f"Only running or paused experiments can be re-randomised, not {experiment.status}."}
        )
    rollout_key = rollout_key_of(experiment)
    if rollout_key is not None:
        raise ValidationError(
            {
                "status": f"This experiment is rollout {rollout_key!r}'s ramp: a new seed would move units "
                "on the candidate back to the current model (roll the rollout back instead)."
            }
        )
    old_seed = phase_current_seed(experiment)
    new_seed = seed or f"{experiment.key}-{secrets.token_hex(4)}"
    if new_seed == old_seed:
        raise ValidationError({"seed": "The new seed must differ from the current one."})
    experiment.seed = new_seed
    experiment.version += 1
    full_clean(experiment)
    phase = phase_open(experiment=experiment, seed=new_seed, reason=PhaseReason.RERANDOMISE)
    experiment.save(update_fields=["seed", "phase", "updated_at", "version"])
    audit_record(
        actor=actor,
        action="rerandomise",
        obj=experiment,
        changes={"seed": [old_seed, new_seed], "phase": [phase.number - 1, phase.number]},
    )
    config_version.bump()
    return experiment
