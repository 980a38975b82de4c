"""Reads for analytics: metric definitions resolved to SQL components, analysis settings, snapshots."""

from __future__ import annotations

from dataclasses import dataclass

from muse_experiments.experiments.models import Experiment

from .analysis import MetricSpec
from .builtin_metrics import BUILTIN_METRICS
from .models import ExperimentAnalysisSettings, MetricDefinition, MetricType, ResultSnapshot
from .queries import Component

#: Reported for every experiment besides its primary and guardrail metrics.
DEFAULT_SECONDARY_METRICS = ("task_success", "latency_ms", "cost_usd")


def analysis_settings_for(*, experiment: Experiment) -> ExperimentAnalysisSettings:
    """The experiment's analysis settings, or unsaved defaults when none were configured."""
    found = ExperimentAnalysisSettings.objects.filter(experiment=experiment).first()
    return found or ExperimentAnalysisSettings(experiment=experiment)


def metric_names() -> list[str]:
    """Every metric name results can be computed for: the built-ins (always: results re-create a
    missing one) and the custom definitions. The experiments app validates primary and guardrail
    metrics against it (``settings.METRIC_NAMES_LOOKUP``)."""
    builtin = [m["name"] for m in BUILTIN_METRICS]
    return sorted({*builtin, *MetricDefinition.objects.values_list("name", flat=True)})


def metric_names_for(
    *, experiment: Experiment, settings: ExperimentAnalysisSettings
) -> list[tuple[str, str]]:
    """``[(metric name, role)]``: the primary, then guardrails, then secondary metrics (deduplicated,
    first role wins)."""
    roles: dict[str, str] = {}
    if experiment.primary_metric:
        roles[experiment.primary_metric] = "primary"
    for name in experiment.guardrail_metrics or []:
        roles.setdefault(str(name), "guardrail")
    for name in [*(settings.secondary_metrics or []), *DEFAULT_SECONDARY_METRICS]:
        roles.setdefault(str(name), "secondary")
    return list(roles.items())


@dataclass(frozen=True)
class MetricPlan:
    """Metrics resolved for one computation: specs for the engine, components and ratio pairs for SQL."""

    specs: list[MetricSpec]
    components: list[Component]
    cross_products: list[tuple[str, str]]


def _signature(d: MetricDefinition) -> tuple:
    return (
        d.source,
        d.event_name if d.source == "event" else "",
        d.call_value if d.source == "call" else "",
        d.aggregation,
        d.capping,
        d.cap_value,
        d.covariate_lookback_days,
    )


def _describe(d: MetricDefinition) -> dict:
    if d.metric_type == MetricType.RATIO:
        return {"numerator": d.numerator.name, "denominator": d.denominator.name}
    if d.metric_type == MetricType.QUANTILE:
        return {
            "source": d.source,
            "call_value": d.call_value,
            "quantile": d.quantile,
            "quantile_of": d.quantile_of,
        }
    return {
        "source": d.source,
        "event_name": d.event_name or None,
        "call_value": d.call_value or None,
        "aggregation": d.aggregation,
        "capping": d.capping,
        "cap_value": d.cap_value,
        "covariate_lookback_days": d.covariate_lookback_days or None,
    }


def metric_plan(*, names: list[tuple[str, str]]) -> MetricPlan:
    """Resolve ``(name, role)`` pairs against :class:`MetricDefinition` (unknown names stay in the
    plan as ``undefined`` specs so the results say so)."""
    defs = {
        d.name: d
        for d in MetricDefinition.objects.select_related("numerator", "denominator").filter(
            name__in=[n for n, _ in names]
        )
    }
    by_signature: dict[tuple, Component] = {}

    def component(d: MetricDefinition) -> str:
        sig = _signature(d)
        if sig not in by_signature:
            by_signature[sig] = Component(
                key=f"m{len(by_signature)}",
                source=d.source,
                aggregation=d.aggregation,
                event_name=d.event_name,
                call_value=d.call_value,
                capping=d.capping,
                cap_value=d.cap_value,
                covariate_days=d.covariate_lookback_days,
            )
        return by_signature[sig].key

    specs: list[MetricSpec] = []
    cross: list[tuple[str, str]] = []
    for name, role in names:
        d = defs.get(name)
        if d is None:
            specs.append(MetricSpec(name=name, role=role, undefined=True))
            continue
        if d.metric_type == MetricType.QUANTILE:  # ranked in Python (analytics.quantile_queries)
            specs.append(
                MetricSpec(
                    name=name,
                    role=role,
                    metric_type=d.metric_type,
                    higher_is_better=d.higher_is_better,
                    label=d.label,
                    definition=_describe(d),
                    quantile=d.quantile,
                    quantile_of=d.quantile_of,
                    call_value=d.call_value,
                )
            )
            continue
        if d.metric_type == MetricType.RATIO:
            keys = (component(d.numerator), component(d.denominator))
            if keys not in cross:
                cross.append(keys)
        else:
            keys = (component(d),)
        specs.append(
            MetricSpec(
                name=name,
                role=role,
                metric_type=d.metric_type,
                higher_is_better=d.higher_is_better,
                keys=keys,
                covariate=d.metric_type != MetricType.RATIO and d.covariate_lookback_days > 0,
                label=d.label,
                definition=_describe(d),
            )
        )
    return MetricPlan(specs=specs, components=list(by_signature.values()), cross_products=cross)


def snapshot_latest(*, experiment: Experiment, phase: int | None = None) -> ResultSnapshot | None:
    """The newest snapshot of a phase (default: the experiment's current phase)."""
    phase = phase or experiment.phase
    return (
        ResultSnapshot.objects.filter(experiment=experiment, phase=phase)
        .order_by("-computed_at", "-id")
        .first()
    )
