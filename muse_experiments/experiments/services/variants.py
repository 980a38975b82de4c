"""The variant set of an experiment (its checks and its writes) and the phases it runs in.

Phases: the first start opens phase 1. While running or paused, a change of weights, coverage,
the layer slice or the variant set (keys, models, overrides, control) closes the current phase
and opens the next with the same seed: analysis reads one phase, and units exposed earlier keep
their variant (sticky through the run of phases sharing a seed, see
``selectors.sticky_scope``). :func:`~.lifecycle.experiment_rerandomise` opens a phase with a new
seed, which ends stickiness: every unit is hashed afresh.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from ..models import Experiment, ExperimentPhase, Variant
from ..validation import is_finite_number, overrides_errors
from .rules import add_error, full_clean

WEIGHT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class VariantInput:
    """A variant as submitted.

    ``weight`` is a share in [0, 1] (the admin converts percentages); ``endpoint`` a
    ``routing.ModelEndpoint``; ``overrides`` follows :func:`validation.overrides_errors`; ``id``
    names an existing variant being edited (so a renamed key stays the same variant).
    """

    key: str
    weight: float
    endpoint: Any
    is_control: bool = False
    name: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    id: int | None = None


def endpoint_is_available(endpoint: Any) -> bool:
    """True when the model endpoint and its provider are both enabled (not kill-switched)."""
    provider = getattr(endpoint, "provider", None)
    return bool(endpoint.enabled and (provider is None or provider.enabled))


def validate_variants(variants: Sequence[VariantInput], *, require_enabled: bool = False) -> None:
    """Check a variant set.

    Rules: at least two variants, unique keys, finite weights in [0, 1] summing to 1 (±1e-6),
    exactly one control, valid overrides; with ``require_enabled`` (running experiments) every
    model endpoint with a weight above 0 and its provider must be enabled (a 0 % variant serves
    no unit: a rollout rolled back from a disabled candidate must still be able to save). Raises ValidationError keyed by ``variants``,
    ``weight``, ``is_control``, ``overrides`` and ``endpoint``.
    """
    errors: dict[str, list[str]] = {}
    if len(variants) < 2:
        add_error(errors, "variants", "An experiment needs at least two variants.")
    keys = [v.key for v in variants]
    if len(set(keys)) != len(keys):
        add_error(errors, "variants", "Variant keys must be unique.")
    for v in variants:
        if not is_finite_number(v.weight) or not 0 <= v.weight <= 1:
            add_error(errors, "weight", f"Variant {v.key!r}: weight must be a finite number in 0–100%.")
    if "weight" not in errors and variants:
        total = math.fsum(v.weight for v in variants)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            add_error(errors, "weight", f"Weights must sum to 100% (they sum to {total * 100:.4g}%).")
    controls = sum(1 for v in variants if v.is_control)
    if controls != 1:
        add_error(errors, "is_control", f"Exactly one variant must be the control (found {controls}).")
    for v in variants:
        for message in overrides_errors(v.overrides):
            add_error(errors, "overrides", f"Variant {v.key!r}: {message}")
    if require_enabled:
        disabled = sorted(
            {v.endpoint.public_id for v in variants if v.weight > 0 and not endpoint_is_available(v.endpoint)}
        )
        if disabled:
            add_error(
                errors,
                "endpoint",
                f"Disabled model(s) cannot serve a running experiment: {', '.join(disabled)}.",
            )
    if errors:
        raise ValidationError(errors)


def variants_write(
    *, experiment: Experiment, variants: Sequence[VariantInput], rows: Mapping[int, int]
) -> None:
    """Make the experiment's variants equal ``variants``; ``rows`` maps input positions to the
    existing variants they edit (:attr:`.edits.ChangePlan.variant_rows`), the rest are deleted."""
    existing = {v.pk: v for v in experiment.variants.all()}
    for pk, v in existing.items():
        if pk not in rows.values():
            v.delete()
    # Renames go through a temporary key so swapping two keys never trips the unique constraint.
    for i, pk in rows.items():
        if existing[pk].key != variants[i].key:
            Variant.objects.filter(pk=pk).update(key=f"__renaming-{pk}")
    for position, vi in enumerate(variants):
        pk = rows.get(position)
        variant = existing[pk] if pk is not None else Variant(experiment=experiment)
        variant.key = vi.key
        variant.name = vi.name or vi.key
        variant.weight = float(vi.weight)
        variant.endpoint = vi.endpoint
        variant.is_control = vi.is_control
        variant.overrides = dict(vi.overrides)
        variant.position = position
        full_clean(variant, exclude=["experiment"], validate_unique=False)
        variant.save()


def phase_current_seed(experiment: Experiment) -> str:
    """The seed of the experiment's current phase (its hash seed before the first start)."""
    phase = ExperimentPhase.objects.filter(experiment=experiment, number=experiment.phase).first()
    return phase.seed if phase else experiment.hash_seed


def phase_open(*, experiment: Experiment, seed: str, reason: str) -> ExperimentPhase:
    """Close the open phase (if any) and open the next one with the current weights/coverage."""
    now = timezone.now()
    ExperimentPhase.objects.filter(experiment=experiment, ended_at__isnull=True).update(ended_at=now)
    experiment.phase += 1
    return ExperimentPhase.objects.create(
        experiment=experiment,
        number=experiment.phase,
        seed=seed,
        coverage=experiment.coverage,
        weights={v.key: v.weight for v in experiment.variants.all()},
        reason=reason,
        started_at=now,
    )
