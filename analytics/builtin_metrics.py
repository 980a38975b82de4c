"""The built-in metric definitions, seeded by migration ``0004_builtin_metrics`` and re-created by
:func:`seed_builtin_metrics` whenever results are computed and one is missing (e.g. after a
database flush), so analysis never depends on a data migration having run on this database.

Each entry is the field values of a :class:`analytics.models.MetricDefinition`; ratio metrics
name their numerator and denominator, which must come earlier in the list. Analysts edit them
(direction, capping, CUPED) in the admin afterwards.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

BUILTIN_METRICS: list[dict] = [
    # Per-call building blocks (also useful on their own: e.g. calls per session).
    {
        "name": "calls",
        "label": "Calls per unit",
        "source": "call",
        "call_value": "calls",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": True,
    },
    {
        "name": "errors",
        "label": "Failed calls per unit",
        "source": "call",
        "call_value": "error",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "fallbacks",
        "label": "Fallback-served calls per unit",
        "source": "call",
        "call_value": "fallback",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "calls_with_tool_calls",
        "label": "Calls returning a tool call, per unit",
        "source": "call",
        "call_value": "has_tool_call",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": True,
    },
    # The built-ins.
    {
        "name": "latency_ms",
        "label": "Latency (ms, mean of a unit's succeeded calls)",
        "source": "call",
        "call_value": "latency_ms",
        "aggregation": "mean",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    *(
        {
            "name": f"latency_p{round(q * 100)}_ms",
            "label": f"Latency p{round(q * 100)} (ms, over succeeded calls; clustered by unit)",
            "source": "call",
            "call_value": "latency_ms",
            "aggregation": "quantile",
            "metric_type": "quantile",
            "quantile": q,
            "quantile_of": "call",
            "higher_is_better": False,
        }
        for q in (0.5, 0.9, 0.95, 0.99)
    ),
    # Time to first token: streamed calls only (the others have none and are left out).
    *(
        {
            "name": f"ttft_p{round(q * 100)}_ms",
            "label": f"Time to first token p{round(q * 100)} (ms, over succeeded streamed calls; "
            "clustered by unit)",
            "source": "call",
            "call_value": "ttft_ms",
            "aggregation": "quantile",
            "metric_type": "quantile",
            "quantile": q,
            "quantile_of": "call",
            "higher_is_better": False,
        }
        for q in (0.5, 0.9, 0.95, 0.99)
    ),
    {
        "name": "cost_usd",
        "label": "Cost per unit (USD)",
        "source": "call",
        "call_value": "cost_usd",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "input_tokens",
        "label": "Input tokens per unit",
        "source": "call",
        "call_value": "input_tokens",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "cached_input_tokens",
        "label": "Cache-read input tokens per unit (prompt caching; priced at the cached rate)",
        "source": "call",
        "call_value": "cached_input_tokens",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": True,
    },
    {
        "name": "output_tokens",
        "label": "Output tokens per unit",
        "source": "call",
        "call_value": "output_tokens",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "reasoning_tokens",
        "label": "Reasoning tokens per unit",
        "source": "call",
        "call_value": "reasoning_tokens",
        "aggregation": "sum",
        "metric_type": "mean",
        "higher_is_better": False,
    },
    {
        "name": "error_rate",
        "label": "Error rate (failed calls / calls)",
        "metric_type": "ratio",
        "numerator": "errors",
        "denominator": "calls",
        "higher_is_better": False,
    },
    {
        "name": "fallback_rate",
        "label": "Fallback rate (fallback-served calls / calls)",
        "metric_type": "ratio",
        "numerator": "fallbacks",
        "denominator": "calls",
        "higher_is_better": False,
    },
    {
        "name": "tool_call_rate",
        "label": "Tool-call rate (calls with a tool call / calls)",
        "metric_type": "ratio",
        "numerator": "calls_with_tool_calls",
        "denominator": "calls",
        "higher_is_better": True,
    },
    {
        "name": "cache_read_rate",
        "label": "Cache-read share of input tokens (cache reads / input tokens)",
        "metric_type": "ratio",
        "numerator": "cached_input_tokens",
        "denominator": "input_tokens",
        "higher_is_better": True,
    },
    {
        "name": "task_success",
        "label": "Task success (any task_success event > 0)",
        "source": "event",
        "event_name": "task_success",
        "aggregation": "any",
        "metric_type": "proportion",
        "higher_is_better": True,
    },
    {
        "name": "rating",
        "label": "Rating (mean of a unit's ratings)",
        "source": "event",
        "event_name": "rating",
        "aggregation": "mean",
        "metric_type": "mean",
        "higher_is_better": True,
    },
]


def seed_builtin_metrics(metric_model) -> int:
    """Create every missing built-in definition (existing rows, possibly edited, are kept).

    ``metric_model`` is the MetricDefinition class (a historical model inside a migration).
    Returns the number of rows created. A spec with a field the model does not have yet (an
    older migration's historical model) is skipped: the migration that adds the field seeds it.
    """
    known = {f.name for f in metric_model._meta.get_fields()}
    existing = dict(
        metric_model.objects.filter(name__in=[m["name"] for m in BUILTIN_METRICS]).values_list("name", "pk")
    )
    if len(existing) == len(BUILTIN_METRICS):
        return 0
    created = 0
    by_name = {name: metric_model(pk=pk) for name, pk in existing.items()}
    for spec in BUILTIN_METRICS:
        fields = dict(spec)
        name = fields.pop("name")
        if not known.issuperset(fields):
            continue
        for part in ("numerator", "denominator"):
            if part in fields:
                fields[part] = by_name[fields[part]]
        if name not in by_name:
            try:
                with transaction.atomic():  # a savepoint: a concurrent seeder may win the race
                    by_name[name] = metric_model.objects.create(name=name, is_builtin=True, **fields)
                created += 1
            except IntegrityError:
                by_name[name] = metric_model.objects.get(name=name)
    return created
