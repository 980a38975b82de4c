"""Services: every write to experiments goes through these functions (Django-Styleguide).

Each is keyword-only, runs in one transaction, records an :class:`AuditEntry` (actor, action and a
field-level ``{field: [before, after]}`` diff), and bumps the configuration version so every
routing process picks the change up within about a second. Invalid input raises
:class:`django.core.exceptions.ValidationError` with field errors and writes nothing.

Lifecycle (:data:`ALLOWED_TRANSITIONS`)::

    draft ──start──▶ running ◀──start/pause──▶ paused
      │                 │                         │
      └──archive──┐     └─────stop──▶ stopped ◀───┘
                  ▼                      │
               archived ◀───archive──────┘

Phases: the first start opens phase 1. While running or paused, a change of weights, coverage,
the layer slice or the variant set (keys, models, overrides, control) closes the current phase
and opens the next with the same seed: analysis reads one phase, and units exposed earlier keep
their variant (sticky through the run of phases sharing a seed, see
``selectors.sticky_scope``). :func:`experiment_rerandomise` opens a phase with a new seed, which
ends stickiness: every unit is hashed afresh.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from muse_experiments.infra import config_version

from . import sticky
from .audit_text import percent
from .models import (
    AuditEntry,
    Experiment,
    ExperimentPhase,
    ExperimentStatus,
    Exposure,
    ForcedAssignment,
    Layer,
    PhaseReason,
    PlatformConfig,
    Variant,
)
from .selectors import assignment_state
from .validation import condition_errors, is_finite_number, overrides_errors

WEIGHT_TOLERANCE = 1e-6
MAX_HOLDOUT_SHARE = 0.5

ALLOWED_TRANSITIONS: Mapping[str, frozenset[str]] = {
    ExperimentStatus.DRAFT: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.ARCHIVED}),
    ExperimentStatus.RUNNING: frozenset({ExperimentStatus.PAUSED, ExperimentStatus.STOPPED}),
    ExperimentStatus.PAUSED: frozenset({ExperimentStatus.RUNNING, ExperimentStatus.STOPPED}),
    ExperimentStatus.STOPPED: frozenset({ExperimentStatus.ARCHIVED}),
    ExperimentStatus.ARCHIVED: frozenset(),
}
LIVE_STATUSES = frozenset({ExperimentStatus.RUNNING, ExperimentStatus.PAUSED})
ENDED_STATUSES = frozenset({ExperimentStatus.STOPPED, ExperimentStatus.ARCHIVED})
# Fields fixed once the experiment has started (they decide who is hashed and how).
DRAFT_ONLY_FIELDS = ("key", "unit_type", "seed")
# Fields that may still change once the experiment has stopped (descriptions, analysis metrics).
DESCRIPTIVE_FIELDS = ("name", "hypothesis", "owner", "primary_metric", "guardrail_metrics")
EDITABLE_FIELDS = (
    "key",
    "name",
    "hypothesis",
    "owner",
    "unit_type",
    "seed",
    "coverage",
    "layer",
    "layer_start",
    "layer_end",
    "condition",
    "primary_metric",
    "guardrail_metrics",
)
PHASE_FIELDS = ("coverage", "layer", "layer_start", "layer_end")


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


# --------------------------------------------------------------------------- validation


def _add(errors: dict[str, list[str]], name: str, message: str) -> None:
    errors.setdefault(name, []).append(message)


def endpoint_is_available(endpoint: Any) -> bool:
    """True when the model endpoint and its provider are both enabled (not kill-switched)."""
    provider = getattr(endpoint, "provider", None)
    return bool(endpoint.enabled and (provider is None or provider.enabled))


def validate_variants(variants: Sequence[VariantInput], *, require_enabled: bool = False) -> None:
    """Check a variant set.

    Rules: at least two variants, unique keys, finite weights in [0, 1] summing to 1 (±1e-6),
    exactly one control, valid overrides; with ``require_enabled`` (running experiments) every
    model endpoint and its provider must be enabled. Raises ValidationError keyed by ``variants``,
    ``weight``, ``is_control``, ``overrides`` and ``endpoint``.
    """
    errors: dict[str, list[str]] = {}
    if len(variants) < 2:
        _add(errors, "variants", "An experiment needs at least two variants.")
    keys = [v.key for v in variants]
    if len(set(keys)) != len(keys):
        _add(errors, "variants", "Variant keys must be unique.")
    for v in variants:
        if not is_finite_number(v.weight) or not 0 <= v.weight <= 1:
            _add(errors, "weight", f"Variant {v.key!r}: weight must be a finite number in 0–100%.")
    if "weight" not in errors and variants:
        total = math.fsum(v.weight for v in variants)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            _add(errors, "weight", f"Weights must sum to 100% (they sum to {total * 100:.4g}%).")
    controls = sum(1 for v in variants if v.is_control)
    if controls != 1:
        _add(errors, "is_control", f"Exactly one variant must be the control (found {controls}).")
    for v in variants:
        for message in overrides_errors(v.overrides):
            _add(errors, "overrides", f"Variant {v.key!r}: {message}")
    if require_enabled:
        disabled = sorted({v.endpoint.public_id for v in variants if not endpoint_is_available(v.endpoint)})
        if disabled:
            _add(
                errors,
                "endpoint",
                f"Disabled model(s) cannot serve a running experiment: {', '.join(disabled)}.",
            )
    if errors:
        raise ValidationError(errors)


def layer_overlap_errors(
    *, layer: Layer | None, start: float, end: float, exclude_id: int | None
) -> list[str]:
    """Messages naming every non-archived experiment of ``layer`` whose ``[start, end)`` slice
    intersects ``[start, end)`` (e.g. ``"overlaps experiment checkout [20 %, 50 %)"``)."""
    if layer is None:
        return []
    others = (
        Experiment.objects.filter(layer=layer)
        .exclude(status=ExperimentStatus.ARCHIVED)
        .exclude(pk=exclude_id)
        .order_by("layer_start", "key")
        .values_list("key", "layer_start", "layer_end")
    )
    return [
        f"Layer range [{percent(start)}, {percent(end)}) overlaps experiment {key} [{percent(a)}, {percent(b)})."
        for key, a, b in others
        if start < b and a < end
    ]


def validate_experiment_fields(values: Mapping[str, Any], *, exclude_id: int | None = None) -> None:
    """Cross-field rules beyond model validators: finite coverage in [0, 1], a layer slice with
    ``0 <= start < end <= 1`` disjoint from the layer's other non-archived experiments, a valid
    targeting condition, guardrail metrics as a list of names. Raises ValidationError by field."""
    errors: dict[str, list[str]] = {}
    coverage = values.get("coverage", 1.0)
    if not is_finite_number(coverage) or not 0 <= coverage <= 1:
        _add(errors, "coverage", "Coverage must be a finite number between 0 and 100 %.")
    start, end = values.get("layer_start", 0.0), values.get("layer_end", 1.0)
    if not (is_finite_number(start) and is_finite_number(end) and 0 <= start < end <= 1):
        _add(errors, "layer_end", "The layer range needs finite bounds with 0 % ≤ start < end ≤ 100 %.")
    elif values.get("layer") is not None:
        for message in layer_overlap_errors(
            layer=values["layer"], start=start, end=end, exclude_id=exclude_id
        ):
            _add(errors, "layer_start", message)
    for message in condition_errors(values.get("condition") or {}):
        _add(errors, "condition", message)
    guardrails = values.get("guardrail_metrics", [])
    if not isinstance(guardrails, list) or not all(isinstance(m, str) and m for m in guardrails):
        _add(errors, "guardrail_metrics", "Guardrail metrics must be a list of metric names.")
    else:
        known = metric_names()
        if known is not None:
            primary = values.get("primary_metric")
            if primary is not None and primary not in known:
                _add(errors, "primary_metric", _unknown_metric(primary, known))
            for name in guardrails:
                if name not in known:
                    _add(errors, "guardrail_metrics", _unknown_metric(name, known))
    if errors:
        raise ValidationError(errors)


def metric_names() -> frozenset[str] | None:
    """Names of the metrics results can be computed for, from the callable named by
    ``settings.METRIC_NAMES_LOOKUP`` (a dotted path, injected so that this app never imports the
    analytics app); None when no lookup is configured (then any name is accepted)."""
    path = getattr(settings, "METRIC_NAMES_LOOKUP", "")
    return frozenset(import_string(path)()) if path else None


def _unknown_metric(name: str, known: frozenset[str]) -> str:
    listed = ", ".join(sorted(known)[:20])
    return f"Unknown metric {name!r}: define it under Analytics → Metric definitions first (known: {listed})."


def _as_condition(condition: Any) -> Any:
    """A copy of a condition mapping (``None`` → ``{}``); anything else is left for validation."""
    if condition is None:
        return {}
    return dict(condition) if isinstance(condition, Mapping) else condition


def _full_clean(obj: Any, **kwargs: Any) -> None:
    try:
        obj.full_clean(**kwargs)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None


# --------------------------------------------------------------------------- audit


def _audit(*, actor: str, action: str, obj: Any, changes: Mapping[str, Any] | None = None) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=str(obj.pk),
        changes=dict(changes or {}),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Layer):
        return value.key
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _variant_state(v: Variant | VariantInput) -> dict[str, Any]:
    return {
        "name": v.name or v.key,
        "weight": v.weight,
        "endpoint": v.endpoint.public_id,
        "is_control": v.is_control,
        "overrides": dict(v.overrides),
    }


# --------------------------------------------------------------------------- experiments


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
    layer: Layer | None = None,
    layer_start: float = 0.0,
    layer_end: float = 1.0,
) -> Experiment:
    """Create a draft experiment with its variants (weights are shares 0–1).

    Raises ValidationError (field errors) on any invalid field, variant set or layer overlap.
    """
    values = {
        "key": key,
        "name": name,
        "unit_type": unit_type,
        "coverage": coverage,
        "hypothesis": hypothesis,
        "owner": owner,
        "condition": _as_condition(condition),
        "primary_metric": primary_metric,
        "guardrail_metrics": list(guardrail_metrics),
        "seed": seed,
        "layer": layer,
        "layer_start": layer_start,
        "layer_end": layer_end,
    }
    validate_experiment_fields(values)
    validate_variants(variants)
    experiment = Experiment(**values)
    _full_clean(experiment)
    experiment.save()
    _write_variants(experiment=experiment, variants=variants, rows={})
    _audit(
        actor=actor,
        action="create",
        obj=experiment,
        changes={
            **{k: [None, _jsonable(v)] for k, v in values.items()},
            "variants": {"added": {v.key: _variant_state(v) for v in variants}},
        },
    )
    config_version.bump()
    return experiment


class EditConflict(ValidationError):
    """An edit based on an older version of the experiment (someone saved in between): nothing
    was written. ``expected``/``current`` are version numbers; the API answers 409 with it."""

    def __init__(self, *, experiment: Experiment, expected: int) -> None:
        self.expected, self.current = expected, experiment.version
        last = (
            AuditEntry.objects.filter(object_type="Experiment", object_id=str(experiment.pk))
            .order_by("-at", "-pk")
            .first()
        )
        by = (
            f", last changed by {last.actor} at {last.at:%Y-%m-%d %H:%M:%S} UTC ({last.action})"
            if last
            else ""
        )
        super().__init__(
            {
                "version": [
                    f"Experiment {experiment.key} changed since this edit began (edit based on version "
                    f"{expected}, now version {experiment.version}{by}). Nothing was saved: reload it and "
                    "apply the change again."
                ]
            }
        )


def experiment_lock(*, experiment: Experiment, expected_version: int | None = None) -> Experiment:
    """The experiment row, locked (``SELECT … FOR UPDATE``) until the caller's transaction ends;
    raises :class:`EditConflict` when ``expected_version`` is given and is not the stored version."""
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    if expected_version is not None and expected_version != locked.version:
        raise EditConflict(experiment=locked, expected=expected_version)
    return locked


@dataclass(frozen=True)
class ChangePlan:
    """What an update would do: ``changes`` is the audit diff (``{field: [before, after]}``,
    ``"variants": {"added"|"removed"|"changed": …}``); ``opens_phase`` tells whether it starts
    phase ``phase + 1``."""

    changes: dict[str, Any]
    opens_phase: bool
    variant_rows: dict[int, int]  # index in the submitted variants -> existing variant pk

    @property
    def changed_fields(self) -> list[str]:
        return [name for name in self.changes if name in EDITABLE_FIELDS]


def experiment_change_plan(
    *,
    experiment: Experiment,
    variants: Sequence[VariantInput] | None = None,
    removed: Iterable[str] = (),
    **fields: Any,
) -> ChangePlan:
    """The diff an :func:`experiment_update` with these arguments would record, without writing
    (the admin shows it and asks to confirm before a save opens a new phase).

    Variants are matched to the stored ones by ``id``, else ``key``. A stored variant that is
    neither matched nor named in ``removed`` (keys) is an error: only an explicit delete removes a
    variant. Raises ValidationError (``variants``) for that.
    """
    before = {name: getattr(experiment, name) for name in EDITABLE_FIELDS}
    after = {**before, **fields}
    if "condition" in fields:
        after["condition"] = _as_condition(fields["condition"])
    if "guardrail_metrics" in fields:
        after["guardrail_metrics"] = list(fields["guardrail_metrics"] or [])
    changes: dict[str, Any] = {
        name: [_jsonable(before[name]), _jsonable(after[name])]
        for name in EDITABLE_FIELDS
        if after[name] != before[name]
    }
    rows: dict[int, int] = {}
    if variants is not None:
        repeated = sorted(k for k, n in Counter(vi.key for vi in variants).items() if n > 1)
        if repeated:
            raise ValidationError(
                {
                    "variants": [
                        f"Variant key(s) {', '.join(repeated)} appear more than once; keys are unique."
                    ]
                }
            )
        existing = {v.pk: v for v in experiment.variants.select_related("endpoint")}
        by_key = {v.key: v.pk for v in existing.values()}
        for i, vi in enumerate(variants):
            pk = vi.id if vi.id in existing else (by_key.get(vi.key) if vi.id is None else None)
            if pk is not None and pk not in rows.values():
                rows[i] = pk
        removed = set(removed)
        missing = [v.key for pk, v in existing.items() if pk not in rows.values() and v.key not in removed]
        if missing:
            raise ValidationError(
                {
                    "variants": [
                        f"Variant(s) {', '.join(sorted(missing))} missing from the submitted set. A variant "
                        "is removed only when it is explicitly deleted; reload the page if it is stale."
                    ]
                }
            )
        diff: dict[str, Any] = {"added": {}, "removed": {}, "changed": {}}
        for pk, v in existing.items():
            if pk not in rows.values():
                diff["removed"][v.key] = _variant_state(v)
        for i, vi in enumerate(variants):
            state = {**_variant_state(vi), "weight": float(vi.weight), "key": vi.key}
            if i not in rows:
                diff["added"][vi.key] = {k: v for k, v in state.items() if k != "key"}
                continue
            old = existing[rows[i]]
            old_state = {**_variant_state(old), "key": old.key}
            changed = {f: [old_state[f], state[f]] for f in state if old_state[f] != state[f]}
            if changed:
                diff["changed"][vi.key] = changed
        diff = {k: v for k, v in diff.items() if v}
        if diff:
            changes["variants"] = diff
    opens_phase = (
        experiment.status in LIVE_STATUSES
        and experiment.phase > 0
        and ("variants" in changes or any(name in PHASE_FIELDS for name in changes))
    )
    return ChangePlan(changes=changes, opens_phase=opens_phase, variant_rows=rows)


def _write_variants(
    *, experiment: Experiment, variants: Sequence[VariantInput], rows: Mapping[int, int]
) -> None:
    """Make the experiment's variants equal ``variants``; ``rows`` maps input positions to the
    existing variants they edit (:attr:`ChangePlan.variant_rows`), the rest are deleted."""
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
        _full_clean(variant, exclude=["experiment"], validate_unique=False)
        variant.save()


def _current_phase_seed(experiment: Experiment) -> str:
    phase = ExperimentPhase.objects.filter(experiment=experiment, number=experiment.phase).first()
    return phase.seed if phase else experiment.hash_seed


def _open_phase(*, experiment: Experiment, seed: str, reason: str) -> ExperimentPhase:
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


@transaction.atomic
def experiment_update(
    *,
    experiment: Experiment,
    actor: str,
    variants: Sequence[VariantInput] | None = None,
    removed: Iterable[str] = (),
    expected_version: int | None = None,
    **fields: Any,
) -> Experiment:
    """Change an experiment's fields (any of :data:`EDITABLE_FIELDS`) and/or its variant set.

    ``variants`` (when given) is the new set: inputs are matched to existing variants by ``id``
    (else ``key``); a stored variant missing from it must be named in ``removed`` (its key), never
    deleted by omission. ``expected_version`` (the admin and the API always pass it) is the
    ``version`` the edit was based on: a different stored version raises :class:`EditConflict`
    and writes nothing. Rules: ``key``/``unit_type``/``seed`` only while draft (re-randomise
    instead); once stopped or archived only descriptive fields change. While running or paused, a
    change of weights, coverage, layer slice or variants opens a new phase with the same seed.
    Running experiments need enabled models. No-op changes write nothing. Every write bumps
    ``version``. Raises ValidationError (field errors).
    """
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValidationError(dict.fromkeys(unknown, "This field cannot be edited."))
    experiment = experiment_lock(experiment=experiment, expected_version=expected_version)
    plan = experiment_change_plan(experiment=experiment, variants=variants, removed=removed, **fields)
    changed = plan.changed_fields
    after = {name: fields.get(name, getattr(experiment, name)) for name in EDITABLE_FIELDS}
    after["condition"] = _as_condition(after["condition"])
    after["guardrail_metrics"] = list(after["guardrail_metrics"] or [])

    errors: dict[str, list[str]] = {}
    if experiment.status != ExperimentStatus.DRAFT:
        for name in changed:
            if name in DRAFT_ONLY_FIELDS:
                hint = " Use re-randomise for a new seed." if name == "seed" else ""
                _add(errors, name, f"Cannot change {name} after the experiment started.{hint}")
    if experiment.status in ENDED_STATUSES:
        for name in changed:
            if name not in DESCRIPTIVE_FIELDS and name not in DRAFT_ONLY_FIELDS:
                _add(errors, name, f"A {experiment.status} experiment's configuration cannot change.")
        if "variants" in plan.changes:
            _add(errors, "variants", f"A {experiment.status} experiment's variants cannot change.")
    if errors:
        raise ValidationError(errors)
    validate_experiment_fields(after, exclude_id=experiment.pk)
    if variants is not None:
        validate_variants(variants, require_enabled=experiment.status == ExperimentStatus.RUNNING)
    if not plan.changes:
        return experiment

    for name in changed:
        setattr(experiment, name, after[name])
    experiment.version += 1
    _full_clean(experiment)
    experiment.save()
    diff = dict(plan.changes)
    if "variants" in plan.changes:
        _write_variants(experiment=experiment, variants=variants or [], rows=plan.variant_rows)
    if plan.opens_phase:
        phase = _open_phase(
            experiment=experiment, seed=_current_phase_seed(experiment), reason=PhaseReason.CHANGE
        )
        experiment.save(update_fields=["phase", "updated_at"])
        diff["phase"] = [phase.number - 1, phase.number]
    _audit(actor=actor, action="update", obj=experiment, changes=diff)
    config_version.bump()
    return experiment


def _transition(
    *, experiment: Experiment, to: str, expected_version: int | None = None
) -> tuple[Experiment, str]:
    experiment = experiment_lock(experiment=experiment, expected_version=expected_version)
    if to not in ALLOWED_TRANSITIONS[experiment.status]:
        raise ValidationError({"status": f"Cannot go from {experiment.status} to {to}."})
    before = experiment.status
    experiment.status = to
    experiment.version += 1
    return experiment, before


@transaction.atomic
def experiment_start(*, experiment: Experiment, actor: str) -> Experiment:
    """draft/paused → running. The first start opens phase 1 with the experiment's seed.

    Raises ValidationError when the transition is illegal, the variant set is invalid, a
    variant's model (or its provider) is disabled, or the layer slice overlaps another experiment.
    """
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.RUNNING)
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
    if experiment.phase == 0:
        experiment.started_at = timezone.now()
        _open_phase(experiment=experiment, seed=experiment.hash_seed, reason=PhaseReason.START)
        changes["phase"] = [0, 1]
    experiment.save(update_fields=["status", "phase", "started_at", "updated_at", "version"])
    _audit(
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
    _audit(actor=actor, action="pause", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_stop(*, experiment: Experiment, actor: str) -> Experiment:
    """running/paused → stopped: closes the open phase. Raises ValidationError."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.STOPPED)
    experiment.stopped_at = timezone.now()
    ExperimentPhase.objects.filter(experiment=experiment, ended_at__isnull=True).update(
        ended_at=experiment.stopped_at
    )
    experiment.save(update_fields=["status", "stopped_at", "updated_at", "version"])
    _audit(actor=actor, action="stop", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_archive(*, experiment: Experiment, actor: str) -> Experiment:
    """draft/stopped → archived: hidden from layer overlap checks; read-only. Raises ValidationError."""
    experiment, before = _transition(experiment=experiment, to=ExperimentStatus.ARCHIVED)
    experiment.save(update_fields=["status", "updated_at", "version"])
    _audit(actor=actor, action="archive", obj=experiment, changes={"status": [before, experiment.status]})
    config_version.bump()
    return experiment


@transaction.atomic
def experiment_rerandomise(*, experiment: Experiment, actor: str, seed: str = "") -> Experiment:
    """Open a new phase with a new seed (running or paused experiments): every unit is hashed
    afresh and no earlier sticky assignment applies. ``seed`` defaults to ``<key>-<8 hex>``.
    Raises ValidationError when the experiment is not running or paused."""
    experiment = experiment_lock(experiment=experiment)
    if experiment.status not in LIVE_STATUSES:
        raise ValidationError(
            {"status": f"Only running or paused experiments can be re-randomised, not {experiment.status}."}
        )
    old_seed = _current_phase_seed(experiment)
    new_seed = seed or f"{experiment.key}-{secrets.token_hex(4)}"
    if new_seed == old_seed:
        raise ValidationError({"seed": "The new seed must differ from the current one."})
    experiment.seed = new_seed
    experiment.version += 1
    _full_clean(experiment)
    phase = _open_phase(experiment=experiment, seed=new_seed, reason=PhaseReason.RERANDOMISE)
    experiment.save(update_fields=["seed", "phase", "updated_at", "version"])
    _audit(
        actor=actor,
        action="rerandomise",
        obj=experiment,
        changes={"seed": [old_seed, new_seed], "phase": [phase.number - 1, phase.number]},
    )
    config_version.bump()
    return experiment


# --------------------------------------------------------------------------- forced assignments


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
        _add(errors, "unit_id", "A pinned unit id cannot be empty.")
    if len(set(units)) != len(units):
        _add(errors, "unit_id", "A unit id can be pinned only once per experiment.")
    for p in pins:
        if p.variant_key not in variants:
            _add(errors, "variant", f"Unknown variant {p.variant_key!r}.")
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
    _audit(actor=actor, action="forced_assignments", obj=experiment, changes={"forced": diff})
    config_version.bump()
    return out


# --------------------------------------------------------------------------- layers


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
    _full_clean(layer)
    layer.save()
    after = {name: getattr(layer, name) for name in fields}
    diff = {k: [before[k] if before else None, v] for k, v in after.items() if not before or before[k] != v}
    if diff:
        _audit(actor=actor, action="update" if before else "create", obj=layer, changes=diff)
        config_version.bump()
    return layer


# --------------------------------------------------------------------------- platform


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
        _add(errors, "holdout_share", "The holdout share must be a finite number between 0 and 50 %.")
    if holdout_seed is not None and not holdout_seed.strip():
        _add(errors, "holdout_seed", "The holdout seed cannot be empty.")
    if errors:
        raise ValidationError(errors)
    diff = {}
    for name, value in (("holdout_share", holdout_share), ("holdout_seed", holdout_seed)):
        if value is not None and getattr(platform, name) != value:
            diff[name] = [getattr(platform, name), value]
            setattr(platform, name, value)
    if diff:
        _full_clean(platform)
        platform.save(update_fields=list(diff))
        _audit(actor=actor, action="update", obj=platform, changes=diff)
    return platform


@transaction.atomic
def sticky_cache_reset(*, actor: str) -> PlatformConfig:
    """Rotate the sticky-cache namespace so every cached sticky assignment is ignored (after
    restoring the database from a backup). Exposures in the database are untouched."""
    from .models import new_sticky_namespace

    config_version.bump()
    platform = PlatformConfig.objects.select_for_update().get(pk=1)
    before = platform.sticky_namespace
    platform.sticky_namespace = new_sticky_namespace()
    platform.save(update_fields=["sticky_namespace"])
    _audit(
        actor=actor,
        action="sticky_cache_reset",
        obj=platform,
        changes={"sticky_namespace": [before, platform.sticky_namespace]},
    )
    return platform


# --------------------------------------------------------------------------- exposures


def exposure_record(
    *, experiment_id: int, phase: int, unit_id: str, variant_key: str, reason: str
) -> Exposure:
    """Record a unit's first exposure in a phase (idempotent; the first variant wins and stays
    sticky). After commit, the stored variant is written to the Redis sticky cache (QA-forced
    exposures are not: removing a pin returns the unit to normal hashing)."""
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
    _remember_after_commit([exposure])
    return exposure


@dataclass(frozen=True)
class ExposureInput:
    """One exposure to record: a unit of an experiment phase saw ``variant_key`` because of ``reason``."""

    experiment_id: int
    phase: int
    unit_id: str
    variant_key: str
    reason: str


def exposures_record_many(*, exposures: Sequence[ExposureInput]) -> list[Exposure]:
    """Record many first exposures at once (the bulk form of :func:`exposure_record`).

    Idempotent: an exposure already stored for ``(experiment, phase, unit)`` is kept (the first
    variant wins), so replaying a batch changes nothing. Two queries whatever the batch size (an
    ``INSERT … ON CONFLICT DO NOTHING`` and a read of the stored rows); the stored variants go to
    the sticky cache after commit. Returns the stored exposures, one per distinct key.
    """
    wanted = {(e.experiment_id, e.phase, e.unit_id): e for e in reversed(exposures)}  # first wins
    if not wanted:
        return []
    Exposure.objects.bulk_create(
        [
            Exposure(
                experiment_id=e.experiment_id,
                phase=e.phase,
                unit_id=e.unit_id,
                variant_key=e.variant_key,
                reason=e.reason,
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
    _remember_after_commit(stored)
    return stored


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
