"""Selectors: reads of experiment configuration for routing and analytics.

:func:`assignment_snapshot` is on the path of every model call: it returns an immutable
:class:`~muse_experiments.experiments.assignment.specs.ConfigSnapshot` cached in process and rebuilt only
when the configuration version changes (see :mod:`muse_experiments.infra.config_version`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from muse_experiments.experiments.assignment.engine import assign, route
from muse_experiments.experiments.assignment.specs import (
    ConfigSnapshot,
    Decision,
    ExperimentSpec,
    HoldoutSpec,
    LayerSpec,
    VariantSpec,
)
from muse_experiments.infra.config_version import VersionedSnapshot, current

from . import sticky
from .models import AuditEntry, Experiment, ExperimentStatus, Exposure, PlatformConfig, Variant


@dataclass(frozen=True)
class AssignmentState:
    """What routing needs from configuration, cached together: the engine snapshot and the
    namespace of the Redis sticky cache (``""`` before the platform row exists: cache off)."""

    snapshot: ConfigSnapshot
    sticky_namespace: str
    sticky_scopes: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    @cached_property
    def sticky_experiment_ids(self) -> frozenset[int]:
        """Running experiments whose sticky entries can change a decision: those whose sticky
        scope (:func:`sticky_scope`) spans more than one phase.

        Weight, coverage, layer-slice and variant changes open a new phase, so within one phase
        every unit's bucket maps to the same variant it was exposed to; targeting, layer and
        holdout are evaluated before sticky entries. A unit's exposure in the only phase of its
        seed run therefore names the variant its hash gives anyway, and routing skips the sticky
        lookup (a Redis round trip and, for a unit not cached, a database query) for such
        experiments; its decision then reads ``assigned`` where a lookup would have said ``sticky``.
        """
        return frozenset(e for e, (first, current) in self.sticky_scopes.items() if first < current)


def sticky_scope(exp: Experiment) -> tuple[int, int]:
    """``(first phase, current phase)``: the run of phases sharing the current phase's seed.

    A unit exposed in any of these phases keeps its variant (weight, coverage and variant changes
    open phases with the same seed); re-randomising starts a new run. Uses prefetched ``phases``.
    """
    seeds = {p.number: p.seed for p in exp.phases.all()}
    current = exp.phase
    first = current
    while first - 1 in seeds and seeds[first - 1] == seeds.get(current):
        first -= 1
    return first, current


def experiment_spec(exp: Experiment) -> ExperimentSpec:
    """The engine's view of one experiment (its current phase and phase seed).

    Expects ``variants__endpoint``, ``forced__variant``, ``phases`` and ``layer`` to be prefetched
    for bulk use; works (with queries) otherwise. Raises ValueError for a configuration the engine
    refuses (e.g. fewer than two variants), which services prevent for running experiments.
    """
    return ExperimentSpec(
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
        layer=LayerSpec(
            key=exp.layer.key, start=exp.layer_start, end=exp.layer_end, hash_version=exp.layer.hash_version
        )
        if exp.layer
        else None,
        condition=exp.condition or None,
        forced={f.unit_id: f.variant.key for f in exp.forced.all()},
    )


def holdout_spec(platform: PlatformConfig | None) -> HoldoutSpec | None:
    """The global holdout of the platform row, or None when its share is 0."""
    if platform and platform.holdout_share > 0:
        return HoldoutSpec(share=platform.holdout_share, seed=platform.holdout_seed)
    return None


def build_assignment_state() -> AssignmentState:
    """Read every running experiment with variants, layer, phases and forced pins (5 queries)."""
    experiments = (
        Experiment.objects.filter(status=ExperimentStatus.RUNNING)
        .select_related("layer")
        .prefetch_related("variants__endpoint", "forced__variant", "phases")
        .order_by("id")
    )
    experiments = list(experiments)
    specs = tuple(experiment_spec(exp) for exp in experiments)
    scopes = MappingProxyType({exp.id: sticky_scope(exp) for exp in experiments})
    platform = PlatformConfig.objects.filter(pk=1).first()
    snapshot = ConfigSnapshot(
        version=platform.version if platform else 0, experiments=specs, holdout=holdout_spec(platform)
    )
    return AssignmentState(
        snapshot=snapshot,
        sticky_namespace=platform.sticky_namespace if platform else "",
        sticky_scopes=scopes,
    )


def build_assignment_snapshot() -> ConfigSnapshot:
    """The running configuration, read from the database now (no cache)."""
    return build_assignment_state().snapshot


def _phase_seed(exp: Experiment) -> str:
    seeds = {p.number: p.seed for p in exp.phases.all()}
    return seeds.get(exp.phase) or exp.hash_seed


_state = VersionedSnapshot(build_assignment_state)


def assignment_state() -> AssignmentState:
    """The cached :class:`AssignmentState` (no I/O between configuration-version checks)."""
    return _state.get()


def assignment_snapshot() -> ConfigSnapshot:
    """The current running configuration (no database query between version checks)."""
    return _state.get().snapshot


def config_token() -> str:
    return current()


def sticky_variants(
    *, experiment_ids: Iterable[int], session_id: str, user_id: str
) -> Mapping[tuple[int, int], str]:
    """Durable sticky assignments: ``{(experiment_id, phase): variant_key}`` for this unit.

    For a running experiment the key is its *current* phase, and an exposure in any phase of the
    current seed run (:func:`sticky_scope`) counts: a unit keeps its variant through weight,
    coverage and variant changes until the experiment is re-randomised. Other experiments' keys
    are their exposures' own phases. QA-forced exposures never count. Each experiment only
    matches the id of its unit type (a session id never picks up a user's exposure, even when
    the two strings are equal).

    Served from the sticky cache (:mod:`muse_experiments.experiments.sticky`), normally one Redis round trip
    and no database query; when Redis is down, one indexed query.
    """
    wanted = set(experiment_ids)
    units = [u for u in dict.fromkeys((session_id, user_id)) if u]
    if not wanted or not units:
        return {}
    state = assignment_state()
    unit_types = {e.id: e.unit_type for e in state.snapshot.experiments}
    cached = sticky.lookup(state.sticky_namespace, units)
    if cached is not None:
        rows = [(u, e, p, v) for u, m in cached.items() for (e, p), v in m.items() if e in wanted]
    else:
        rows = list(
            Exposure.objects.filter(experiment_id__in=wanted, unit_id__in=units)
            .exclude(reason="forced")
            .values_list("unit_id", "experiment_id", "phase", "variant_key")
        )
    rows = [(e, p, v) for u, e, p, v in rows if u == (user_id if unit_types.get(e) == "user" else session_id)]
    out: dict[tuple[int, int], str] = {}
    latest: dict[int, int] = {}
    scopes = state.sticky_scopes
    for e, p, v in rows:
        scope = scopes.get(e)
        if scope is None:
            out[(e, p)] = v
        elif scope[0] <= p <= scope[1] and p >= latest.get(e, -1):
            latest[e] = p
            out[(e, scope[1])] = v
    return out


def experiment_by_key(key: str) -> Experiment | None:
    return Experiment.objects.filter(key=key).prefetch_related("variants__endpoint").first()


def experiment_audit_history(experiment: Experiment, *, limit: int = 200) -> list[AuditEntry]:
    """The experiment's audit entries, newest first (who, when, action, field-level diff)."""
    return list(
        AuditEntry.objects.filter(object_type="Experiment", object_id=str(experiment.pk)).order_by(
            "-at", "-id"
        )[:limit]
    )


@dataclass(frozen=True)
class AssignmentPreview:
    """What the engine decides for one unit.

    ``routing``: the decision that would pick the model for a call now (every running experiment,
    the global holdout and the unit's stored sticky assignments). ``experiment``: this
    experiment evaluated on its own (also for drafts and paused experiments), or ``None`` when
    no experiment was asked for; ``experiment_error`` says why it could not be evaluated (e.g. a
    draft with one variant). ``sticky``: the stored assignments used, ``{(experiment id, phase):
    variant key}``. ``routing_kill`` / ``experiment_kill``: the kill switch in force on that
    decision's experiment or variant (``{"scope", "target", "reason", "since"}``; the unit would be
    served by the control and not enrolled), else ``None``.
    """

    routing: Decision
    experiment: Decision | None
    experiment_error: str
    sticky: Mapping[tuple[int, int], str]
    routing_kill: Mapping[str, Any] | None = None
    experiment_kill: Mapping[str, Any] | None = None


def assignment_preview(
    *,
    session_id: str,
    user_id: str,
    attributes: Mapping[str, Any] | None = None,
    experiment: Experiment | None = None,
) -> AssignmentPreview:
    """Explain the assignment of a unit (read-only: records no exposure).

    Attributes get ``session_id``/``user_id`` added as the router does (``subagent`` must come
    from the caller's attributes).
    """
    state = assignment_state()
    snapshot = state.snapshot
    attrs = {**(attributes or {}), "session_id": session_id, "user_id": user_id}
    ids = [e.id for e in snapshot.experiments]
    if experiment is not None:
        ids.append(experiment.pk)
    stored = sticky_variants(experiment_ids=ids, session_id=session_id, user_id=user_id)
    routing = route(snapshot, session_id=session_id, user_id=user_id, attributes=attrs, sticky=stored or None)
    single, error = None, ""
    if experiment is not None:
        exp = (
            Experiment.objects.select_related("layer")
            .prefetch_related("variants__endpoint", "forced__variant", "phases")
            .get(pk=experiment.pk)
        )
        try:
            spec = experiment_spec(exp)
        except ValueError as exc:
            error = f"This experiment cannot be evaluated yet: {exc}"
        else:
            alone = ConfigSnapshot(version=snapshot.version, experiments=(spec,), holdout=snapshot.holdout)
            single = assign(
                alone, session_id=session_id, user_id=user_id, attributes=attrs, sticky=stored or None
            )[0]
    return AssignmentPreview(
        routing=routing,
        experiment=single,
        experiment_error=error,
        sticky=stored,
        routing_kill=_enrolment_kill(routing),
        experiment_kill=_enrolment_kill(single) if single is not None else None,
    )


def _enrolment_kill(decision: Decision) -> Mapping[str, Any] | None:
    """The kill on the decision's experiment/variant, read through the lookup routing provides
    (``settings.MUSE_ENROLMENT_KILL_LOOKUP``, a dotted path: this app may not import routing)."""
    if not decision.in_experiment:
        return None
    lookup = import_string(settings.MUSE_ENROLMENT_KILL_LOOKUP)
    return lookup(decision.experiment_key, decision.variant_key)


def running_experiments_evaluated_before(*, experiment: Experiment) -> list[Experiment]:
    """Running experiments that routing evaluates before ``experiment`` (lower id) and that may
    include the same units: any not sharing its layer (experiments of one layer have disjoint
    ranges). Targeting is not compared, so this may over-report; it is a warning, not a rule."""
    qs = Experiment.objects.filter(status=ExperimentStatus.RUNNING, id__lt=experiment.id).order_by("id")
    if experiment.layer_id is not None:
        qs = qs.exclude(layer_id=experiment.layer_id)
    return list(qs)


def model_labels() -> dict[str, str]:
    """``{model public id: version label}`` (``avocado/3f…`` → ``avocado-v14``; the id itself when a
    model has no label), for showing models by label with the id on hover. Reads the variant's
    model table through the foreign key, so this app does not import routing."""
    endpoint_model = Variant._meta.get_field("endpoint").related_model
    return {
        pid: label or pid for pid, label in endpoint_model.objects.values_list("public_id", "version_label")
    }


def model_by_id_or_label(ref: str) -> tuple[Any | None, str]:
    """``(ModelEndpoint, "")`` for a public id or a unique version label, else ``(None, why)``
    (unknown, or a label several models share). Through the variant's foreign key, so this app
    does not import routing."""
    endpoint_model = Variant._meta.get_field("endpoint").related_model
    found = endpoint_model.objects.select_related("provider").filter(public_id=ref).first()
    if found is not None:
        return found, ""
    labelled = list(endpoint_model.objects.select_related("provider").filter(version_label=ref)[:2])
    if len(labelled) == 1:
        return labelled[0], ""
    if labelled:
        return None, f"Several models are labelled {ref!r}: use the model id."
    return None, f"Unknown model {ref!r} (give a model id or version label)."
