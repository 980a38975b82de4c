"""Selectors: reads of experiment configuration for routing and analytics.

:func:`assignment_snapshot` is on the path of every model call: it returns an immutable
:class:`~muse_experiments.assignment.engine.ConfigSnapshot` cached in process and rebuilt only
when the configuration version changes (see :mod:`muse_experiments.config_version`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .assignment.engine import ConfigSnapshot, ExperimentSpec, HoldoutSpec, LayerSpec, VariantSpec
from .config_version import VersionedSnapshot, current
from .models import Experiment, ExperimentStatus, Exposure, PlatformConfig


def build_assignment_snapshot() -> ConfigSnapshot:
    """Read every running experiment with variants, layer and forced assignments (3 queries)."""
    experiments = (
        Experiment.objects.filter(status=ExperimentStatus.RUNNING)
        .select_related("layer")
        .prefetch_related("variants__endpoint", "forced__variant", "phases")
        .order_by("id")
    )
    specs = []
    for exp in experiments:
        specs.append(
            ExperimentSpec(
                id=exp.id,
                key=exp.key,
                seed=_phase_seed(exp),
                phase=exp.phase,
                unit_type=exp.unit_type,
                variants=tuple(
                    VariantSpec(
                        key=v.key,
                        weight=v.weight,
                        endpoint_id=v.endpoint.public_id,
                        is_control=v.is_control,
                        overrides=dict(v.overrides),
                    )
                    for v in exp.variants.all()
                ),
                coverage=exp.coverage,
                layer=LayerSpec(key=exp.layer.key, start=exp.layer_start, end=exp.layer_end)
                if exp.layer
                else None,
                condition=exp.condition or None,
                forced={f.unit_id: f.variant.key for f in exp.forced.all()},
            )
        )
    platform = PlatformConfig.objects.filter(pk=1).first()
    holdout = None
    if platform and platform.holdout_share > 0:
        holdout = HoldoutSpec(share=platform.holdout_share, seed=platform.holdout_seed)
    return ConfigSnapshot(
        version=platform.version if platform else 0, experiments=tuple(specs), holdout=holdout
    )


def _phase_seed(exp: Experiment) -> str:
    seeds = {p.number: p.seed for p in exp.phases.all()}
    return seeds.get(exp.phase) or exp.hash_seed


_snapshot = VersionedSnapshot(build_assignment_snapshot)


def assignment_snapshot() -> ConfigSnapshot:
    """The current running configuration (no database query between version checks)."""
    return _snapshot.get()


def config_token() -> str:
    return current()


def sticky_variants(
    *, experiment_ids: Iterable[int], unit_ids: Iterable[str]
) -> Mapping[tuple[int, int], str]:
    """Durable sticky assignments: ``{(experiment_id, phase): variant_key}`` for these units."""
    rows = Exposure.objects.filter(
        experiment_id__in=list(experiment_ids), unit_id__in=list(unit_ids)
    ).values_list("experiment_id", "phase", "variant_key")
    return {(e, p): v for e, p, v in rows}


def experiment_by_key(key: str) -> Experiment | None:
    return Experiment.objects.filter(key=key).prefetch_related("variants__endpoint").first()
