"""Compute an experiment phase's results from database aggregates and store a snapshot."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from muse_experiments.models import Experiment

from .models import ResultSnapshot
from .queries import BUILTIN_METRICS, MetricDefinition, VariantAggregate, exposure_counts, metric_aggregates
from .stats.frequentist import compare
from .stats.results import json_safe
from .stats.srm import srm_test
from .stats.statistics import MeanStatistic, ProportionStatistic

DEFAULT_METRICS = ("task_success", "latency_ms", "cost_usd")


def _statistic(metric: MetricDefinition, agg: VariantAggregate | None) -> ProportionStatistic | MeanStatistic:
    """The engine's input for one arm; an arm with no units is ``n=0`` (the engine reports it)."""
    n, total, total_sq = (agg.n, agg.sum, agg.sum_squares) if agg else (0, 0.0, 0.0)
    if metric.kind == "proportion":
        return ProportionStatistic(n=n, sum=total)
    return MeanStatistic(n=n, sum=total, sum_squares=total_sq)


def results_compute(
    *, experiment: Experiment, phase: int | None = None, metrics: tuple[str, ...] | None = None
) -> ResultSnapshot:
    """Aggregate in SQL, compare every treatment with the control, run SRM, store a snapshot.

    Returns the new :class:`ResultSnapshot`; ``results`` has the shape
    ``{"experiment", "phase", "srm", "variants": [{key, is_control, weight, units, endpoint}],
    "metrics": [{name, kind, higher_is_better, variants: [{key, n, mean}], comparisons: [{variant, …}]}]}``.
    Raises ValueError when the experiment has never started (no phase) or has no control.
    """
    phase = phase or experiment.phase
    if not phase:
        raise ValueError(f"Experiment {experiment.key} has no phase yet: start it first.")
    variants = list(experiment.variants.select_related("endpoint").order_by("position", "id"))
    control = next((v for v in variants if v.is_control), None)
    if control is None:
        raise ValueError(f"Experiment {experiment.key} has no control variant.")
    phase_row = experiment.phases.filter(number=phase).first()
    weights = phase_row.weights if phase_row else {v.key: v.weight for v in variants}

    counts = exposure_counts(experiment_id=experiment.id, phase=phase)
    srm = srm_test(
        [counts.get(v.key, 0) for v in variants], [float(weights.get(v.key, 0.0)) for v in variants]
    )

    metric_names = metrics or tuple(
        dict.fromkeys((experiment.primary_metric, *DEFAULT_METRICS, *experiment.guardrail_metrics))
    )
    metric_results: list[dict[str, Any]] = []
    inputs: dict[str, Any] = {"exposures": counts, "weights": weights, "metrics": {}}
    for name in metric_names:
        metric = BUILTIN_METRICS.get(name) or MetricDefinition(name, "mean", "event")
        aggs = {
            a.variant_key: a
            for a in metric_aggregates(
                experiment_id=experiment.id, phase=phase, unit_type=experiment.unit_type, metric=metric
            )
        }
        inputs["metrics"][name] = {k: [a.n, a.sum, a.sum_squares] for k, a in aggs.items()}
        stats = {v.key: _statistic(metric, aggs.get(v.key)) for v in variants}
        comparisons = []
        for v in variants:
            if v.is_control:
                continue
            result = compare(stats[control.key], stats[v.key])
            comparisons.append({"variant": v.key, **result.to_dict()})
        metric_results.append(
            {
                "name": name,
                "kind": metric.kind,
                "higher_is_better": metric.higher_is_better,
                "variants": [
                    {"key": k, "n": s.n, "mean": (s.mean if s.n else None)} for k, s in stats.items()
                ],
                "comparisons": comparisons,
            }
        )
    results = json_safe(
        {
            "experiment": experiment.key,
            "phase": phase,
            "srm": srm.to_dict(),
            "variants": [
                {
                    "key": v.key,
                    "is_control": v.is_control,
                    "weight": weights.get(v.key),
                    "units": counts.get(v.key, 0),
                    "endpoint": v.endpoint.public_id,
                }
                for v in variants
            ],
            "metrics": metric_results,
        }
    )
    with transaction.atomic():
        return ResultSnapshot.objects.create(
            experiment=experiment, phase=phase, inputs=json_safe(inputs), results=results
        )
