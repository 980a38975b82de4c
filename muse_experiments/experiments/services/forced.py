"""QA pins (forced assignments): a unit always gets a chosen variant, and is left out of analysis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import models, transaction

from muse_experiments.infra import config_version

from ..models import Experiment, ForcedAssignment
from .audit import audit_record
from .rules import add_error


@dataclass(frozen=True)
class ForcedInput:
    """A QA pin: ``unit_id`` (the id the experiment hashes) always gets ``variant_key``."""

    unit_id: str
    variant_key: str
    note: str = ""


@transaction.atomic
def forced_assignments_replace(
    *, experiment: Experiment, pins: Sequence[ForcedInput], actor: str
) -> list[ForcedAssignment]:
    """Make the experiment's QA pins equal ``pins``. Forced units are excluded from analysis
    (their exposures carry reason ``forced``). No-op when nothing changes. Raises ValidationError
    for an unknown variant, an empty or duplicated unit id."""
    variants = {v.key: v for v in experiment.variants.all()}
    errors: dict[str, list[str]] = {}
    units = [p.unit_id.strip() for p in pins]
    if any(not u for u in units):
        add_error(errors, "unit_id", "A pinned unit id cannot be empty.")
    if len(set(units)) != len(units):
        add_error(errors, "unit_id", "A unit id can be pinned only once per experiment.")
    for p in pins:
        if p.variant_key not in variants:
            add_error(errors, "variant", f"Unknown variant {p.variant_key!r}.")
    if errors:
        raise ValidationError(errors)
    existing = {f.unit_id: f for f in experiment.forced.select_related("variant")}
    before = {u: f.variant.key for u, f in existing.items()}
    after = {u: p.variant_key for u, p in zip(units, pins, strict=True)}
    notes_changed = any(existing[u].note != p.note for u, p in zip(units, pins, strict=True) if u in existing)
    if before == after and not notes_changed:
        return list(existing.values())
    ForcedAssignment.objects.filter(experiment=experiment).exclude(unit_id__in=units).delete()
    out = []
    for unit, p in zip(units, pins, strict=True):
        pin, _ = ForcedAssignment.objects.update_or_create(
            experiment=experiment, unit_id=unit, defaults={"variant": variants[p.variant_key], "note": p.note}
        )
        out.append(pin)
    diff = {
        u: [before.get(u), after.get(u)]
        for u in sorted(set(before) | set(after))
        if before.get(u) != after.get(u)
    }
    Experiment.objects.filter(pk=experiment.pk).update(version=models.F("version") + 1)
    audit_record(actor=actor, action="forced_assignments", obj=experiment, changes={"forced": diff})
    config_version.bump()
    return out
