"""First exposures (a unit saw a variant in a phase) and the Redis sticky cache that remembers them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from muse_experiments.infra import config_version

from .. import sticky
from ..models import Exposure, PlatformConfig, new_sticky_namespace
from ..selectors import assignment_state
from .audit import audit_record


def exposure_record(
    *,
    experiment_id: int,
    phase: int,
    unit_id: str,
    variant_key: str,
    reason: str,
    exposed_at: datetime | None = None,
) -> Exposure:
    """Record a unit's first exposure in a phase (idempotent; the first variant wins and stays
    sticky). ``exposed_at``: when the unit was routed (default now); an exposure already stored
    keeps the earlier of its time and this one. After commit, the stored variant is written to the
    Redis sticky cache (QA-forced exposures are not: removing a pin returns the unit to normal
    hashing)."""
    exposed_at = exposed_at or timezone.now()
    try:
        with transaction.atomic():
            exposure, _ = Exposure.objects.get_or_create(
                experiment_id=experiment_id,
                phase=phase,
                unit_id=unit_id,
                defaults={"variant_key": variant_key, "reason": reason, "first_exposed_at": exposed_at},
            )
    except IntegrityError:  # a concurrent writer won the race: theirs is the sticky variant
        exposure = Exposure.objects.get(experiment_id=experiment_id, phase=phase, unit_id=unit_id)
    _keep_earliest([exposure], {(experiment_id, phase, unit_id): exposed_at})
    _remember_after_commit([exposure])
    return exposure


@dataclass(frozen=True)
class ExposureInput:
    """One exposure to record: a unit of an experiment phase saw ``variant_key`` because of
    ``reason``, routed at ``first_exposed_at`` (the call's start; None = when it is written, for
    payloads buffered before calls carried it)."""

    experiment_id: int
    phase: int
    unit_id: str
    variant_key: str
    reason: str
    first_exposed_at: datetime | None = None


def exposures_record_many(*, exposures: Sequence[ExposureInput]) -> list[Exposure]:
    """Record many first exposures at once (the bulk form of :func:`exposure_record`).

    Idempotent: an exposure already stored for ``(experiment, phase, unit)`` is kept (the first
    variant wins), so replaying a batch changes nothing. Its time is the earliest routing time
    seen for the unit (``first_exposed_at``, whatever order the calls are written in): the analysis
    counts outcomes from it on (:mod:`analytics.queries`), so it must not be the write's time,
    which comes after the answer. Two queries whatever the batch size (an
    ``INSERT … ON CONFLICT DO NOTHING`` and a read of the stored rows), plus one ``UPDATE`` per
    stored exposure whose time an earlier call lowers (rare: a unit's calls drained out of order);
    the stored variants go to the sticky cache after commit. Returns the stored exposures, one per
    distinct key.
    """
    now = timezone.now()
    wanted = {(e.experiment_id, e.phase, e.unit_id): e for e in reversed(exposures)}  # first wins
    if not wanted:
        return []
    earliest: dict[tuple[int, int, str], datetime] = {}
    for e in exposures:
        key, at = (e.experiment_id, e.phase, e.unit_id), e.first_exposed_at or now
        earliest[key] = min(earliest.get(key, at), at)
    Exposure.objects.bulk_create(
        [
            Exposure(
                experiment_id=e.experiment_id,
                phase=e.phase,
                unit_id=e.unit_id,
                variant_key=e.variant_key,
                reason=e.reason,
                first_exposed_at=earliest[(e.experiment_id, e.phase, e.unit_id)],
            )
            for e in reversed(list(wanted.values()))
        ],
        ignore_conflicts=True,
    )
    stored = [
        x
        for x in Exposure.objects.filter(
            experiment_id__in={k[0] for k in wanted}, unit_id__in={k[2] for k in wanted}
        )
        if (x.experiment_id, x.phase, x.unit_id) in wanted
    ]
    _keep_earliest(stored, earliest)
    _remember_after_commit(stored)
    return stored


def _keep_earliest(stored: Sequence[Exposure], earliest: dict[tuple[int, int, str], datetime]) -> None:
    """Lower the time of each stored exposure that an earlier routing time in ``earliest`` (keyed
    ``(experiment, phase, unit)``) precedes; the conditional ``UPDATE`` keeps the earliest time
    under concurrent writers too."""
    for x in stored:
        at = earliest.get((x.experiment_id, x.phase, x.unit_id))
        if at is not None and at < x.first_exposed_at:
            Exposure.objects.filter(pk=x.pk, first_exposed_at__gt=at).update(first_exposed_at=at)
            x.first_exposed_at = at


def _remember_after_commit(exposures: Sequence[Exposure]) -> None:
    """After commit, write the stored variants of these exposures to the Redis sticky cache."""
    sticky_ones = [x for x in exposures if x.reason != "forced"]
    if not sticky_ones:
        return
    namespace = assignment_state().sticky_namespace

    def remember_all() -> None:
        for x in sticky_ones:
            sticky.remember(
                namespace,
                unit_id=x.unit_id,
                experiment_id=x.experiment_id,
                phase=x.phase,
                variant_key=x.variant_key,
            )

    transaction.on_commit(remember_all)


@transaction.atomic
def sticky_cache_reset(*, actor: str) -> PlatformConfig:
    """Rotate the sticky-cache namespace so every cached sticky assignment is ignored (after
    restoring the database from a backup). Exposures in the database are untouched."""
    config_version.bump()
    platform = PlatformConfig.objects.select_for_update().get(pk=1)
    before = platform.sticky_namespace
    platform.sticky_namespace = new_sticky_namespace()
    platform.save(update_fields=["sticky_namespace"])
    audit_record(
        actor=actor,
        action="sticky_cache_reset",
        obj=platform,
        changes={"sticky_namespace": [before, platform.sticky_namespace]},
    )
    return platform
