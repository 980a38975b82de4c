"""Analytics writes: compute and store result snapshots, act on guardrail breaches, schedule runs,
and save analyst configuration (metric definitions, analysis settings) with an audit entry."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction

from muse_experiments.experiments.models import AuditEntry, Experiment, ExperimentStatus

from .analysis import VariantInfo, analyse_population
from .builtin_metrics import seed_builtin_metrics
from .formatting import guardrail_breach
from .models import (
    ExperimentAnalysisSettings,
    GuardrailAction,
    GuardrailDecision,
    MetricDefinition,
    ResultSnapshot,
    SnapshotTrigger,
)
from .quantile_queries import quantile_samples
from .queries import aggregate, exposure_counts
from .rollups import lift_points_record
from .selectors import analysis_settings_for, metric_names_for, metric_plan
from .stats import json_safe

log = logging.getLogger(__name__)

#: The two populations every snapshot holds. ``itt`` (intent-to-treat, by assigned variant) is
#: the default; ``served`` keeps only units whose every call was served as assigned.
ANALYSES = ("itt", "served")
GUARDRAIL_ACTOR = "analytics:guardrails"
SCHEDULE_TASK_NAME = "analytics: results of running experiments"


def _phase_weights(experiment: Experiment, phase: int, variants) -> dict[str, float]:
    row = experiment.phases.filter(number=phase).first()
    weights = row.weights if row else {v.key: v.weight for v in variants}
    return {v.key: float(weights.get(v.key, 0.0)) for v in variants}


def results_compute(
    *,
    experiment: Experiment,
    phase: int | None = None,
    trigger: str = SnapshotTrigger.MANUAL,
    request_id: uuid.UUID | None = None,
    apply_guardrails: bool = True,
) -> ResultSnapshot:
    """Aggregate in SQL, analyse both populations, store a :class:`ResultSnapshot`, act on guardrails.

    One SQL statement (:func:`analytics.queries.aggregate`) returns per (variant, multiple
    exposure, deviating) group the sums of every metric component; Python derives the
    intent-to-treat population (default; units exposed to several variants excluded unless the
    experiment's settings include them) and the served-as-assigned population, and runs the engine
    (:func:`analytics.analysis.analyse_population`).

    ``results`` = ``{"experiment", "phase", "unit_type", "analysis": "itt", "alpha",
    "sequential_tuning", "include_multiple_exposures", "population": {...}, "caps": {...},
    "srm", "variants", "metrics", "guardrails", "multiple_comparisons",
    "analyses": {"served": {srm, variants, metrics, guardrails, multiple_comparisons}}}``:
    the top level is the intent-to-treat analysis. ``inputs`` holds the raw grouped sums and
    every metric's per-variant sufficient statistics per analysis. Guardrails are then applied
    (:func:`guardrails_apply`) when the phase is the experiment's current one.

    Raises:
        ValueError: the experiment never started (no phase) or has no control variant.
    """
    started = time.perf_counter()
    phase = phase or experiment.phase
    if not phase:
        raise ValueError(f"Experiment {experiment.key} has no phase yet: start it first.")
    variants = list(experiment.variants.select_related("endpoint").order_by("position", "id"))
    if not any(v.is_control for v in variants):
        raise ValueError(f"Experiment {experiment.key} has no control variant.")
    seed_builtin_metrics(MetricDefinition)
    settings = analysis_settings_for(experiment=experiment)
    plan = metric_plan(names=metric_names_for(experiment=experiment, settings=settings))
    weights = _phase_weights(experiment, phase, variants)
    info = [VariantInfo(v.key, v.is_control, weights[v.key], v.endpoint.public_id) for v in variants]
    include_multiple = settings.include_multiple_exposures
    bandit = experiment.type == "bandit"

    aggregates = aggregate(
        experiment_id=experiment.id,
        phase=phase,
        unit_type=experiment.unit_type,
        variant_endpoints={v.key: v.endpoint.public_id for v in variants},
        components=plan.components,
        cross_products=plan.cross_products,
        include_multiple=include_multiple,
        # a bandit's phase is a period: only its newly hashed units (sticky returners were
        # assigned under earlier weights), with their calls of the rest of the run
        first_exposures_only=bandit,
        calls_through_phase=experiment.phase if bandit else None,
    )
    quantile_specs = [s for s in plan.specs if s.metric_type == "quantile" and not s.undefined]
    samples = (
        quantile_samples(
            experiment_id=experiment.id,
            phase=phase,
            variant_endpoints={v.key: v.endpoint.public_id for v in variants},
            call_values=[s.call_value for s in quantile_specs],
        )
        if quantile_specs
        else None
    )
    exposures = exposure_counts(experiment_id=experiment.id, phase=phase)
    group_counts = aggregates.counts()
    counts = {
        v.key: {
            "exposed": exposures.get(v.key, {}).get("exposed", 0),
            "forced": exposures.get(v.key, {}).get("forced", 0),
            "multiple_exposure": group_counts.get(v.key, {}).get("multiple_exposure", 0),
            "deviating": group_counts.get(v.key, {}).get("deviating", 0),
        }
        for v in variants
    }
    analyses: dict[str, dict[str, Any]] = {}
    analysis_inputs: dict[str, Any] = {}
    for name in ANALYSES:
        population = aggregates.population(include_multiple=include_multiple, served_only=name == "served")
        quantiles = {
            spec.name: samples.statistics(
                call_value=spec.call_value,
                q=spec.quantile,
                per_unit=spec.quantile_of == "unit",
                include_multiple=include_multiple,
                served_only=name == "served",
            )
            for spec in quantile_specs
            if samples is not None
        }
        analyses[name], analysis_inputs[name] = analyse_population(
            metrics=plan.specs,
            variants=info,
            population=population,
            counts=counts,
            alpha=settings.alpha,
            sequential_tuning=settings.sequential_tuning,
            quantiles=quantiles,
        )
    caps = {
        spec.name: aggregates.caps[spec.keys[0]]
        for spec in plan.specs
        if spec.keys and len(spec.keys) == 1 and spec.keys[0] in aggregates.caps
    }
    totals = {
        k: sum(c[k] for c in counts.values()) for k in ("exposed", "forced", "multiple_exposure", "deviating")
    }
    results = {
        "experiment": experiment.key,
        "phase": phase,
        "unit_type": experiment.unit_type,
        "analysis": "itt",
        "alpha": settings.alpha,
        "sequential_tuning": settings.sequential_tuning,
        "include_multiple_exposures": include_multiple,
        "population": {
            **totals,
            "multiple_exposure_excluded": not include_multiple,
            "served_filter": "every call of the unit has routing reason assigned/sticky and, when "
            "served, was served by the variant's endpoint",
        },
        "caps": caps,
        **analyses["itt"],
        "analyses": {"served": analyses["served"]},
    }
    inputs = {
        "groups": [
            {
                "variant": r.variant_key,
                "multiple_exposure": r.multi,
                "deviating": r.deviates,
                "units": r.units,
                "components": {k: s.as_list() for k, s in r.components.items()},
                "cross_products": {f"{a}*{b}": v for (a, b), v in r.cross.items()},
            }
            for r in aggregates.rows
        ],
        "components": {
            c.key: {
                "source": c.source,
                "event_name": c.event_name,
                "call_value": c.call_value,
                "aggregation": c.aggregation,
                "capping": c.capping,
                "cap_value": c.cap_value,
                "covariate_days": c.covariate_days,
            }
            for c in plan.components
        },
        "weights": weights,
        "exposures": exposures,
        "metrics": analysis_inputs,
    }
    duration_ms = (time.perf_counter() - started) * 1000.0
    with transaction.atomic():
        snapshot = ResultSnapshot.objects.create(
            experiment=experiment,
            phase=phase,
            trigger=trigger,
            request_id=request_id,
            duration_ms=duration_ms,
            inputs=_storable(inputs),
            results=_storable(results),
        )
        lift_points_record(snapshot=snapshot)
    if apply_guardrails and phase == experiment.phase:
        guardrails_apply(snapshot=snapshot, settings=settings)
    return snapshot


def _storable(value: Any) -> Any:
    """JSON-safe (no NaN/Infinity) and round-tripped through DjangoJSONEncoder-compatible types."""
    import json

    return json.loads(json.dumps(json_safe(value), cls=DjangoJSONEncoder, allow_nan=False))


def guardrails_apply(
    *, snapshot: ResultSnapshot, settings: ExperimentAnalysisSettings | None = None
) -> list[GuardrailAction]:
    """Record (and, when the experiment opted in, act on) guardrail breaches of a snapshot.

    A breach: a guardrail metric of a treatment is significantly worse under the always-valid
    sequential test of the intent-to-treat analysis (``sequential_verdict == "worse"``; or both
    arms constant with the treatment's value worse, a certain difference), with at
    least ``guardrail_min_units`` units in both arms. For each new breach one
    :class:`GuardrailAction` is written with an :class:`~muse_experiments.experiments.models.AuditEntry`:

    * ``paused`` — auto-pause is on and :func:`routing.ops_services.kill_switch_set` turned on the
      ``variant`` kill switch ``<experiment>/<variant>`` (its units go to control);
    * ``detected`` — auto-pause is off;
    * ``kill_switch_unavailable`` / ``failed`` — auto-pause is on but the switch could not be set
      (the message says why).

    Idempotent: a breach already recorded with the same decision is not recorded again, and a
    variant already paused is not paused twice. Returns the new actions.
    """
    experiment = snapshot.experiment
    settings = settings or analysis_settings_for(experiment=experiment)
    if experiment.status != ExperimentStatus.RUNNING:
        return []
    breaches = [
        g
        for g in snapshot.results.get("guardrails", [])
        if g.get("worse")
        and min(g.get("control_n") or 0, g.get("treatment_n") or 0) >= settings.guardrail_min_units
    ]
    actions: list[GuardrailAction] = []
    paused: set[str] = set(
        GuardrailAction.objects.filter(
            experiment=experiment, phase=snapshot.phase, decision=GuardrailDecision.PAUSED
        ).values_list("variant_key", flat=True)
    )
    labels = {m["name"]: m.get("label") or m["name"] for m in snapshot.results.get("metrics", [])}
    for breach in breaches:
        variant = breach["variant"]
        why = "guardrail " + guardrail_breach(
            metric=labels.get(breach["metric"], breach["metric"]),
            variant=variant,
            p=breach.get("sequential_p_value"),
            lift=breach.get("relative_lift"),
            certain=bool(breach.get("certain")),
        )
        decision, message = GuardrailDecision.DETECTED, why + "; auto-pause is off"
        if settings.auto_pause_guardrails:
            if variant in paused:
                decision, message = GuardrailDecision.PAUSED, why + "; variant already paused"
            else:
                decision, message = _pause_variant(experiment=experiment, variant=variant, reason=why)
        if GuardrailAction.objects.filter(
            experiment=experiment,
            phase=snapshot.phase,
            variant_key=variant,
            metric=breach["metric"],
            decision=decision,
        ).exists():
            continue
        try:
            with transaction.atomic():
                action = GuardrailAction.objects.create(
                    experiment=experiment,
                    phase=snapshot.phase,
                    variant_key=variant,
                    metric=breach["metric"],
                    decision=decision,
                    snapshot=snapshot,
                    evidence=breach,
                    message=message[:500],
                )
                AuditEntry.objects.create(
                    actor=GUARDRAIL_ACTOR,
                    action=f"guardrail_{decision}",
                    object_type="Variant",
                    object_id=f"{experiment.key}/{variant}",
                    changes={"metric": breach["metric"], "snapshot": snapshot.pk, "message": message[:500]},
                )
        except IntegrityError:  # a concurrent run recorded the same breach
            continue
        if decision == GuardrailDecision.PAUSED:
            paused.add(variant)
        actions.append(action)
        log.warning("guardrail %s: %s", decision, message)
    return actions


def _pause_variant(*, experiment: Experiment, variant: str, reason: str) -> tuple[str, str]:
    """Turn on the variant kill switch; returns ``(decision, message)``."""
    try:
        from routing.ops_services import kill_switch_set
    except ImportError as exc:  # the kill switch service is not deployed
        return GuardrailDecision.KILL_SWITCH_UNAVAILABLE, f"{reason}; no kill switch service ({exc})"
    from django.core.exceptions import ValidationError

    try:
        kill_switch_set(
            scope="variant",
            target=f"{experiment.key}/{variant}",
            active=True,
            reason=reason[:500],
            actor=GUARDRAIL_ACTOR,
        )
    except ValidationError as exc:
        return GuardrailDecision.FAILED, f"{reason}; kill switch refused: {'; '.join(exc.messages)}"
    return GuardrailDecision.PAUSED, f"{reason}; variant paused through the kill switch"


def results_schedule_ensure(*, every_minutes: int, enabled: bool = True) -> Any:
    """Create or update the django-celery-beat PeriodicTask that fans out over running experiments.

    Returns the PeriodicTask. Raises ValueError when ``every_minutes`` < 1.
    """
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    if every_minutes < 1:
        raise ValueError("every_minutes must be at least 1")
    with transaction.atomic():
        interval, _ = IntervalSchedule.objects.get_or_create(
            every=every_minutes, period=IntervalSchedule.MINUTES
        )
        task, _ = PeriodicTask.objects.update_or_create(
            name=SCHEDULE_TASK_NAME,
            defaults={
                "task": "analytics.compute_running_results",
                "interval": interval,
                "queue": "analytics",
                "enabled": enabled,
                "description": "Recompute result snapshots of every running experiment.",
            },
        )
    return task


def running_experiment_ids() -> list[int]:
    """Ids of experiments that are running with a phase (what the schedule recomputes)."""
    return list(
        Experiment.objects.filter(status=ExperimentStatus.RUNNING, phase__gt=0)
        .order_by("id")
        .values_list("id", flat=True)
    )


def _audit_config(*, actor: str, action: str, obj: Any, changes: dict[str, Any]) -> None:
    AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=str(obj.pk),
        changes=json_safe(changes),
    )


def metric_definition_save(
    *, metric: MetricDefinition, actor: str, changed: list[str] | None = None
) -> MetricDefinition:
    """Validate (``full_clean``: ValidationError with field errors) and save a metric definition, audited."""
    metric.full_clean()
    created = metric.pk is None
    with transaction.atomic():
        metric.save()
        _audit_config(
            actor=actor,
            action="metric_create" if created else "metric_update",
            obj=metric,
            changes={"name": metric.name, "changed": changed or []},
        )
    return metric


def analysis_settings_save(
    *, settings: ExperimentAnalysisSettings, actor: str, changed: list[str] | None = None
) -> ExperimentAnalysisSettings:
    """Validate and save an experiment's analysis settings, audited (ValidationError on bad input)."""
    settings.full_clean()
    with transaction.atomic():
        settings.save()
        _audit_config(
            actor=actor,
            action="analysis_settings_update",
            obj=settings,
            changes={
                "experiment": settings.experiment_id,
                "changed": changed or [],
                "auto_pause_guardrails": settings.auto_pause_guardrails,
                "alpha": settings.alpha,
                "sequential_tuning": settings.sequential_tuning,
            },
        )
    return settings
