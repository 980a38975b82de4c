"""Services: every write to experiments goes through these functions (Django-Styleguide).

Each is keyword-only, runs in one transaction, records an :class:`AuditEntry`, and bumps the
configuration version so every routing process picks the change up within about a second.
Invalid input raises :class:`django.core.exceptions.ValidationError` with field errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import config_version
from .models import (
    AuditEntry,
    Experiment,
    ExperimentPhase,
    ExperimentStatus,
    Exposure,
    Variant,
)

WEIGHT_TOLERANCE = 1e-6

ALLOWED_TRANSITIONS: Mapping[str, frozenset[str]] = {
    ExperimentStatus.DRAFT: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.ARCHIVED}),
    ExperimentStatus.RUNNING: frozenset({ExperimentStatus.PAUSED, ExperimentStatus.STOPPED}),
    ExperimentStatus.PAUSED: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.STOPPED}),
    ExperimentStatus.STOPPED: frozenset({ExperimentStatus.ARCHIVED}),
    ExperimentStatus.ARCHIVED: frozenset(),
}


@dataclass(frozen=True)
class VariantInput:
    """A variant as submitted: ``weight`` is a share in [0, 1]; ``endpoint`` a ModelEndpoint."""

    key: str
    weight: float
    endpoint: Any
    is_control: bool = False
    name: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)


def validate_variants(variants: Sequence[VariantInput]) -> None:
    """Check a variant set: ≥2 variants, unique keys, finite weights in [0, 1] summing to 1 (±1e-6),
    exactly one control. Raises ValidationError keyed by field."""
    errors: dict[str, list[str]] = {}
    if len(variants) < 2:
        errors.setdefault("variants", []).append("An experiment needs at least two variants.")
    keys = [v.key for v in variants]
    if len(set(keys)) != len(keys):
        errors.setdefault("variants", []).append("Variant keys must be unique.")
    for v in variants:
        if not isinstance(v.weight, int | float) or not math.isfinite(v.weight) or not 0 <= v.weight <= 1:
            errors.setdefault("weight", []).append(
                f"Variant {v.key!r}: weight must be a finite number in 0–1."
            )
    if "weight" not in errors:
        total = sum(v.weight for v in variants)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            errors.setdefault("weight", []).append(
                f"Weights must sum to 100% (they sum to {total * 100:.4g}%)."
            )
    controls = sum(1 for v in variants if v.is_control)
    if controls != 1:
        errors.setdefault("is_control", []).append(
            f"Exactly one variant must be the control (found {controls})."
        )
    if errors:
        raise ValidationError(errors)


def _audit(*, actor: str, action: str, obj: Any, changes: Mapping[str, Any] | None = None) -> None:
    AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=str(obj.pk),
        changes=dict(changes or {}),
    )


@transaction.atomic
def experiment_create(
    *,
    key: str,
    name: str,
    variants: Sequence[VariantInput],
    actor: str,
    unit_type: str = "session",
    coverage: float = 1.0,
    hypothesis: str = "",
    owner: str = "",
    condition: Mapping[str, Any] | None = None,
    primary_metric: str = "task_success",
    guardrail_metrics: Iterable[str] = (),
    seed: str = "",
) -> Experiment:
    """Create a draft experiment with its variants. Raises ValidationError on bad input."""
    validate_variants(variants)
    experiment = Experiment(
        key=key,
        name=name,
        unit_type=unit_type,
        coverage=coverage,
        hypothesis=hypothesis,
        owner=owner,
        condition=dict(condition or {}),
        primary_metric=primary_metric,
        guardrail_metrics=list(guardrail_metrics),
        seed=seed,
    )
    experiment.full_clean()
    experiment.save()
    for position, v in enumerate(variants):
        variant = Variant(
            experiment=experiment,
            key=v.key,
            name=v.name or v.key,
            weight=v.weight,
            endpoint=v.endpoint,
            is_control=v.is_control,
            overrides=dict(v.overrides),
            position=position,
        )
        variant.full_clean(exclude=["experiment"])
        variant.save()
    _audit(actor=actor, action="create", obj=experiment, changes={"variants": [v.key for v in variants]})
    config_version.bump()
    return experiment


def _transition(*, experiment: Experiment, to: str, actor: str) -> tuple[Experiment, str]:
    experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
    if to not in ALLOWED_TRANSITIONS[experiment.status]:
        raise ValidationError({"status": f"Cannot go from {experiment.status} to {to}."})
    before = experiment.status
    experiment.status = to
    return experiment, before


@transaction.atomic
def experiment_start(*, experiment: Experiment, actor: str) -> Experiment:
    """draft/paused → running. The first start opens phase 1. Raises ValidationError when the
    transition is illegal or a variant's model is disabled."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.RUNNING, actor=actor)
    variants = list(experiment.variants.select_related("endpoint"))
    validate_variants(
        [
            VariantInput(key=v.key, weight=v.weight, endpoint=v.endpoint, is_control=v.is_control)
            for v in variants
        ]
    )
    disabled = [v.endpoint.public_id for v in variants if not v.endpoint.enabled]
    if disabled:
        raise ValidationError(
            {"variants": f"Disabled model(s) cannot serve a running experiment: {', '.join(disabled)}."}
        )
    now = timezone.now()
    if experiment.phase == 0:
        experiment.phase = 1
        experiment.started_at = now
        ExperimentPhase.objects.create(
            experiment=experiment,
            number=1,
            seed=experiment.hash_seed,
            coverage=experiment.coverage,
            weights={v.key: v.weight for v in variants},
            started_at=now,
        )
    experiment.save(update_fields=["status", "phase", "started_at", "updated_at"])
    _audit(actor=actor, action="start", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_pause(*, experiment: Experiment, actor: str) -> Experiment:
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.PAUSED, actor=actor)
    experiment.save(update_fields=["status", "updated_at"])
    _audit(actor=actor, action="pause", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_stop(*, experiment: Experiment, actor: str) -> Experiment:
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.STOPPED, actor=actor)
    experiment.stopped_at = timezone.now()
    ExperimentPhase.objects.filter(experiment=experiment, ended_at__isnull=True).update(
        ended_at=experiment.stopped_at
    )
    experiment.save(update_fields=["status", "stopped_at", "updated_at"])
    _audit(actor=actor, action="stop", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


def exposure_record(
    *, experiment_id: int, phase: int, unit_id: str, variant_key: str, reason: str
) -> Exposure:
    """Record a unit's first exposure in a phase (idempotent; the first variant wins and stays sticky)."""
    try:
        with transaction.atomic():
            exposure, _ = Exposure.objects.get_or_create(
                experiment_id=experiment_id,
                phase=phase,
                unit_id=unit_id,
                defaults={"variant_key": variant_key, "reason": reason},
            )
    except IntegrityError:  # a concurrent writer won the race: theirs is the sticky variant
        exposure = Exposure.objects.get(experiment_id=experiment_id, phase=phase, unit_id=unit_id)
    return exposure
