"""Creating and editing experiments. Every edit is checked against the version it was based on
(``Experiment.version``, optimistic concurrency): no lost update between the admin and the API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from muse_experiments.infra import config_version

from ..models import AuditEntry, Experiment, ExperimentStatus, ExperimentType, Layer, PhaseReason, Rollout
from .audit import audit_record, jsonable, variant_state
from .rules import (
    DESCRIPTIVE_FIELDS,
    DRAFT_ONLY_FIELDS,
    EDITABLE_FIELDS,
    ENDED_STATUSES,
    LIVE_STATUSES,
    PHASE_FIELDS,
    add_error,
    as_condition,
    bandit_normalised,
    full_clean,
    key_taken_as_field_error,
    validate_experiment_fields,
)
from .shadow import shadow_tests_using_variants
from .variants import VariantInput, phase_current_seed, phase_open, validate_variants, variants_write


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
    type: str = "ab",
    bandit: Mapping[str, Any] | None = None,
    guardrail_metrics: Iterable[str] = (),
    seed: str = "",
    layer: Layer | None = None,
    layer_start: float = 0.0,
    layer_end: float = 1.0,
) -> Experiment:
    """Create a draft experiment with its variants (weights are shares 0–1).

    ``type`` is ``"ab"`` or ``"bandit"``; a bandit's ``bandit`` settings are checked and completed
    with defaults (:mod:`..bandit_config`); its weights become equal at the first start.

    Raises ValidationError (field errors) on any invalid field, variant set or layer overlap.
    """
    values = {
        "key": key,
        "name": name,
        "unit_type": unit_type,
        "coverage": coverage,
        "hypothesis": hypothesis,
        "owner": owner,
        "condition": as_condition(condition),
        "primary_metric": primary_metric,
        "guardrail_metrics": list(guardrail_metrics),
        "seed": seed,
        "layer": layer,
        "layer_start": layer_start,
        "layer_end": layer_end,
        "type": type,
        "bandit": dict(bandit or {}),
    }
    validate_experiment_fields(values)
    values = bandit_normalised(values)
    validate_variants(variants)
    experiment = Experiment(**values)
    full_clean(experiment)
    with key_taken_as_field_error(Experiment, key, "Experiment with this Key already exists."):
        experiment.save()
    variants_write(experiment=experiment, variants=variants, rows={})
    audit_record(
        actor=actor,
        action="create",
        obj=experiment,
        changes={
            **{k: [None, jsonable(v)] for k, v in values.items()},
            "variants": {"added": {v.key: variant_state(v) for v in variants}},
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
    variant. So is a delete that removes nothing or contradicts the set: a key in ``removed`` that
    is no stored variant, names a variant the set also keeps, or comes twice. Raises
    ValidationError (``variants``, one message naming each such variant).
    """
    before = {name: getattr(experiment, name) for name in EDITABLE_FIELDS}
    after = bandit_normalised({**before, **fields})
    if "condition" in fields:
        after["condition"] = as_condition(fields["condition"])
    if "guardrail_metrics" in fields:
        after["guardrail_metrics"] = list(fields["guardrail_metrics"] or [])
    changes: dict[str, Any] = {
        name: [jsonable(before[name]), jsonable(after[name])]
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
        removed = list(removed)
        removal_errors = _removal_errors(removed, by_key=by_key, kept=set(rows.values()))
        if removal_errors:
            raise ValidationError({"variants": removal_errors})
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
                diff["removed"][v.key] = variant_state(v)
        for i, vi in enumerate(variants):
            state = {**variant_state(vi), "weight": float(vi.weight), "key": vi.key}
            if i not in rows:
                diff["added"][vi.key] = {k: v for k, v in state.items() if k != "key"}
                continue
            old = existing[rows[i]]
            old_state = {**variant_state(old), "key": old.key}
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


def _removal_errors(removed: Sequence[str], *, by_key: Mapping[str, int], kept: set[int]) -> list[str]:
    """Messages for the keys of ``removed`` that delete nothing or contradict the edit: no stored
    variant has the key (``by_key``: stored key -> pk), the variant is also kept (its pk in
    ``kept``), or the key is deleted twice."""
    errors = []
    for key, count in Counter(removed).items():
        if key not in by_key:
            errors.append(f"Variant {key} cannot be deleted: this experiment has no variant {key}.")
        elif by_key[key] in kept:
            errors.append(
                f'Variant {key} is both kept and deleted: send it once, with "delete": true to remove it.'
            )
        elif count > 1:
            errors.append(f"Variant {key} is deleted more than once: send it once.")
    return errors


def rollout_key_of(experiment: Experiment) -> str | None:
    """The key of the rollout whose ramp ``experiment`` is, else None (one query)."""
    return Rollout.objects.filter(experiment=experiment).values_list("key", flat=True).first()


#: What a rollout sets on its experiment (per variant), never edited by hand.
_RAMP_VARIANT_FIELDS = ("weight", "endpoint", "is_control", "key")


def _rollout_owned_errors(experiment: Experiment, plan: ChangePlan, errors: dict[str, list[str]]) -> None:
    """Add an error per ramp setting ``plan`` changes when ``experiment`` is a rollout's: its
    variants' weights, models, control and set, its coverage and layer slice."""
    variants = plan.changes.get("variants", {})
    ramp_changed = (
        variants.get("added")
        or variants.get("removed")
        or any(set(change) & set(_RAMP_VARIANT_FIELDS) for change in variants.get("changed", {}).values())
    )
    touched = [name for name in PHASE_FIELDS if name in plan.changes] + (["variants"] if ramp_changed else [])
    if not touched:
        return
    rollout_key = rollout_key_of(experiment)
    if rollout_key is None:
        return
    for name in touched:
        add_error(
            errors,
            name,
            f"This experiment is rollout {rollout_key!r}'s ramp: its weights, models and coverage "
            "change only through the rollout (start, pause, rollback).",
        )


def shadow_source_problems(experiment: Experiment, plan: ChangePlan) -> list[str]:
    """One message per variant ``plan`` deletes or re-keys while a shadow test that is not
    stopped mirrors it (:func:`.shadow.shadow_tests_using_variants`): the test would stay
    configured on traffic that no longer exists. :func:`experiment_update` refuses them under
    ``variants``; the admin's variant formset shows them before saving."""
    variants = plan.changes.get("variants", {})
    gone = list(variants.get("removed", {})) + [
        change["key"][0] for change in variants.get("changed", {}).values() if "key" in change
    ]
    if not gone:
        return []
    return [
        f"Variant {key} is the source of shadow test(s) {', '.join(tests)}: stop them before deleting "
        "it (or renaming its key)."
        for key, tests in shadow_tests_using_variants(experiment=experiment, variant_keys=gone).items()
    ]


@transaction.atomic
def experiment_update(
    *,
    experiment: Experiment,
    actor: str,
    variants: Sequence[VariantInput] | None = None,
    removed: Iterable[str] = (),
    expected_version: int | None = None,
    ramp: bool = False,
    **fields: Any,
) -> Experiment:
    """Change an experiment's fields (any of :data:`EDITABLE_FIELDS`) and/or its variant set.

    ``variants`` (when given) is the new set: inputs are matched to existing variants by ``id``
    (else ``key``); a stored variant missing from it must be named in ``removed`` (its key), never
    deleted by omission, and every key in ``removed`` must name a stored variant the set does not
    keep (else a ``variants`` error, nothing written). ``expected_version`` (the admin and the API always pass it) is the
    ``version`` the edit was based on: a different stored version raises :class:`EditConflict`
    and writes nothing. Rules: ``key``/``unit_type``/``seed`` only while draft (re-randomise
    instead); once stopped or archived only descriptive fields change. While running or paused, a
    change of weights, coverage, layer slice or variants opens a new phase with the same seed.
    Running experiments need enabled models. No-op changes write nothing. Every write bumps
    ``version``. ``type="ab"`` without ``bandit`` clears the bandit settings. A rollout's experiment takes its variants' weights, models and control, and its
    coverage and layer slice, from the rollout alone: only the rollout's own step change passes
    ``ramp=True``; any other such change is an error (its descriptive fields, targeting and
    overrides stay editable). A variant that a shadow test not yet stopped mirrors cannot be
    deleted or re-keyed (stop the test first). Raises ValidationError (field errors).
    """
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValidationError(dict.fromkeys(unknown, "This field cannot be edited."))
    if fields.get("type") == ExperimentType.AB and "bandit" not in fields:
        fields["bandit"] = {}  # back to A/B: the bandit settings (defaults filled in) go with it
    experiment = experiment_lock(experiment=experiment, expected_version=expected_version)
    plan = experiment_change_plan(experiment=experiment, variants=variants, removed=removed, **fields)
    changed = plan.changed_fields
    after = {name: fields.get(name, getattr(experiment, name)) for name in EDITABLE_FIELDS}
    after["condition"] = as_condition(after["condition"])
    after["guardrail_metrics"] = list(after["guardrail_metrics"] or [])

    errors: dict[str, list[str]] = {}
    if experiment.type == "bandit" and experiment.status in LIVE_STATUSES and variants is not None:
        current = {v.key: v.weight for v in experiment.variants.all()}
        if any(abs(current.get(v.key, -1.0) - float(v.weight)) > 1e-9 for v in variants):
            add_error(
                errors, "weight", "A running bandit sets its own weights; edit its bandit settings instead."
            )
    if not ramp:
        _rollout_owned_errors(experiment, plan, errors)
    for message in shadow_source_problems(experiment, plan):
        add_error(errors, "variants", message)
    if experiment.status != ExperimentStatus.DRAFT:
        for name in changed:
            if name in DRAFT_ONLY_FIELDS:
                hint = " Use re-randomise for a new seed." if name == "seed" else ""
                add_error(errors, name, f"Cannot change {name} after the experiment started.{hint}")
    if experiment.status in ENDED_STATUSES:
        for name in changed:
            if name not in DESCRIPTIVE_FIELDS and name not in DRAFT_ONLY_FIELDS:
                add_error(errors, name, f"A {experiment.status} experiment's configuration cannot change.")
        if "variants" in plan.changes:
            add_error(errors, "variants", f"A {experiment.status} experiment's variants cannot change.")
    if errors:
        raise ValidationError(errors)
    validate_experiment_fields(after, exclude_id=experiment.pk)
    if variants is not None:
        validate_variants(variants, require_enabled=experiment.status == ExperimentStatus.RUNNING)
    if not plan.changes:
        return experiment

    after = bandit_normalised(after)
    for name in changed:
        setattr(experiment, name, after[name])
    experiment.version += 1
    full_clean(experiment)
    experiment.save()
    diff = dict(plan.changes)
    if "variants" in plan.changes:
        variants_write(experiment=experiment, variants=variants or [], rows=plan.variant_rows)
    if plan.opens_phase:
        phase = phase_open(
            experiment=experiment, seed=phase_current_seed(experiment), reason=PhaseReason.CHANGE
        )
        experiment.save(update_fields=["phase", "updated_at"])
        diff["phase"] = [phase.number - 1, phase.number]
    audit_record(actor=actor, action="update", obj=experiment, changes=diff)
    config_version.bump()
    return experiment
