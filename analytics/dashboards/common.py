"""Shared by the analyst pages: options of the results page, the date range, endpoint labels,
kill switches touching an experiment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Max
from django.utils import timezone

from muse_experiments.experiments.models import Experiment, Exposure, Variant
from routing.models import KillScope, KillSwitch, ModelEndpoint

ENGINES = ("frequentist", "bayesian")
ANALYSES = ("itt", "served")


def endpoint_labels() -> dict[str, str]:
    """``{public id: version label}`` (the id itself when an endpoint has no label)."""
    return {
        pid: label or pid for pid, label in ModelEndpoint.objects.values_list("public_id", "version_label")
    }


# --- options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultsOptions:
    """What the results page shows (the switches). ``date_from``/``date_to`` are days in the
    reporting zone (inclusive) and bound the time series; ``target_lift`` is a fraction."""

    phase: int
    analysis: str = "itt"
    engine: str = "frequentist"
    cuped: bool = True
    metric: str = ""
    date_from: date | None = None
    date_to: date | None = None
    target_lift: float = 0.05


def results_options(*, query: Mapping[str, str], experiment: Experiment) -> tuple[ResultsOptions, list[str]]:
    """Parse the page's query string; bad values fall back to defaults and come back as messages.
    Without a ``phase``, the current phase is shown, or the latest phase with units when the
    current one has none yet (a bandit's or rollout's phase opened by its last weight change),
    with a message saying so."""
    errors: list[str] = []

    def pick(name: str, allowed: Iterable[str], default: str) -> str:
        value = query.get(name) or default
        if value not in allowed:
            errors.append(f"Unknown {name} {value!r}: showing {default}.")
            return default
        return value

    phase = experiment.phase or 0
    if query.get("phase"):
        try:
            asked = int(query["phase"])
        except ValueError:
            asked = -1
        if 1 <= asked <= phase:
            phase = asked
        else:
            errors.append(f"No phase {query['phase']!r}: showing phase {phase}.")
    elif phase > 1 and not Exposure.objects.filter(experiment=experiment, phase=phase).exists():
        latest = Exposure.objects.filter(experiment=experiment, phase__lt=phase).aggregate(p=Max("phase"))[
            "p"
        ]
        if latest:
            errors.append(f"Phase {phase} has no units yet: showing phase {latest}, the latest with units.")
            phase = latest

    def day(name: str) -> date | None:
        if not query.get(name):
            return None
        try:
            value = date.fromisoformat(query[name])
        except ValueError:
            value = None
        if value is None or value >= date.max:  # a day whose end (the next midnight) exists
            errors.append(f"{name} must be a date like 2026-12-01.")
            return None
        return value

    target = 0.05
    if query.get("target"):
        try:
            target = float(query["target"]) / 100.0
            if not (0 < target < 10):
                raise ValueError
        except ValueError:
            errors.append("Target lift must be a percentage above 0, e.g. 5.")
            target = 0.05
    start, end = day("from"), day("to")
    if start and end and start > end:
        errors.append("The date range ends before it starts: showing every day.")
        start = end = None
    return (
        ResultsOptions(
            phase=phase,
            analysis=pick("analysis", ANALYSES, "itt"),
            engine=pick("engine", ENGINES, "frequentist"),
            cuped=pick("cuped", ("on", "off"), "on") == "on",
            metric=query.get("metric", ""),
            date_from=start,
            date_to=end,
            target_lift=target,
        ),
        errors,
    )


def bounds(options: ResultsOptions) -> tuple[datetime | None, datetime | None]:
    zone = timezone.get_current_timezone()
    start = datetime.combine(options.date_from, time.min, zone) if options.date_from else None
    end = datetime.combine(options.date_to + timedelta(days=1), time.min, zone) if options.date_to else None
    return start, end


def kills_by_experiment(experiments: list[Experiment]) -> dict[int, list[KillSwitch]]:
    """Active kill switches that touch each experiment (itself, a variant, an endpoint or provider
    it uses, or every external provider)."""
    active = list(KillSwitch.objects.filter(active=True))
    if not active:
        return {}
    variants = defaultdict(list)
    for v in Variant.objects.filter(experiment__in=experiments).select_related("endpoint__provider"):
        variants[v.experiment_id].append(v)
    out: dict[int, list[KillSwitch]] = {}
    for e in experiments:
        hits = []
        for k in active:
            vs = variants.get(e.id, [])
            if (
                (k.scope == KillScope.EXPERIMENT and k.target == e.key)
                or (k.scope == KillScope.VARIANT and k.target.split("/", 1)[0] == e.key)
                or (k.scope == KillScope.ENDPOINT and any(v.endpoint.public_id == k.target for v in vs))
                or (k.scope == KillScope.PROVIDER and any(v.endpoint.provider.key == k.target for v in vs))
                or (
                    k.scope == KillScope.ALL_EXTERNAL
                    and any(v.endpoint.provider.kind != "native" for v in vs)
                )
            ):
                hits.append(k)
        out[e.id] = hits
    return out


def kill_text(k: KillSwitch) -> str:
    return f"{k.get_scope_display().split(' (')[0]}{': ' + k.target if k.target else ''}"
