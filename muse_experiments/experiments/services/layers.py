"""How traffic is partitioned: layers (namespaces whose slices experiments take) and the global
holdout (users no experiment touches)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from muse_experiments.infra import config_version

from ..models import Experiment, Layer, PlatformConfig
from ..validation import is_finite_number
from .audit import audit_record
from .rules import add_error, full_clean

MAX_HOLDOUT_SHARE = 0.5


@transaction.atomic
def layer_save(*, layer: Layer, actor: str) -> Layer:
    """Create or edit a layer (namespace). Its key salts the layer hash and ``hash_version`` picks
    the hash, so neither can change once an experiment uses the layer. Raises ValidationError."""
    fields = ("key", "description", "hash_version")
    before = Layer.objects.filter(pk=layer.pk).values(*fields).first() if layer.pk else None
    if before and Experiment.objects.filter(layer_id=layer.pk).exists():
        if before["key"] != layer.key:
            raise ValidationError({"key": "A layer's key cannot change once experiments use it."})
        if before["hash_version"] != layer.hash_version:
            raise ValidationError({"hash_version": "A layer's hash cannot change once experiments use it."})
    full_clean(layer)
    layer.save()
    after = {name: getattr(layer, name) for name in fields}
    diff = {k: [before[k] if before else None, v] for k, v in after.items() if not before or before[k] != v}
    if diff:
        audit_record(actor=actor, action="update" if before else "create", obj=layer, changes=diff)
        config_version.bump()
    return layer


@transaction.atomic
def platform_config_update(
    *, actor: str, holdout_share: float | None = None, holdout_seed: str | None = None
) -> PlatformConfig:
    """Change the global holdout (share of users, 0–0.5, that no experiment touches; its seed).

    Changing either reshuffles which users are held out across every experiment. Raises
    ValidationError on a non-finite or out-of-range share or an empty seed.
    """
    config_version.bump()  # creates the singleton row when missing
    platform = PlatformConfig.objects.select_for_update().get(pk=1)
    errors: dict[str, list[str]] = {}
    if holdout_share is not None and (
        not is_finite_number(holdout_share) or not 0 <= holdout_share <= MAX_HOLDOUT_SHARE
    ):
        add_error(errors, "holdout_share", "The holdout share must be a finite number between 0 and 50 %.")
    if holdout_seed is not None and not holdout_seed.strip():
        add_error(errors, "holdout_seed", "The holdout seed cannot be empty.")
    if errors:
        raise ValidationError(errors)
    diff = {}
    for name, value in (("holdout_share", holdout_share), ("holdout_seed", holdout_seed)):
        if value is not None and getattr(platform, name) != value:
            diff[name] = [getattr(platform, name), value]
            setattr(platform, name, value)
    if diff:
        full_clean(platform)
        platform.save(update_fields=list(diff))
        audit_record(actor=actor, action="update", obj=platform, changes=diff)
    return platform
