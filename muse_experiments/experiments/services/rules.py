"""The rules an experiment's configuration follows: which fields may change in which status, and the
cross-field checks (coverage, layer slice, targeting condition, metrics). Helpers every service
uses to collect field errors."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.utils.module_loading import import_string

from ..audit_text import percent
from ..bandit_config import bandit_config_clean
from ..models import Experiment, ExperimentStatus, ExperimentType, Layer
from ..validation import condition_errors, is_finite_number

LIVE_STATUSES = frozenset({ExperimentStatus.RUNNING, ExperimentStatus.PAUSED})
ENDED_STATUSES = frozenset({ExperimentStatus.STOPPED, ExperimentStatus.ARCHIVED})
# Fields fixed once the experiment has started (they decide who is hashed and how).
DRAFT_ONLY_FIELDS = ("key", "unit_type", "seed", "type")
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
    "type",
    "bandit",
)
PHASE_FIELDS = ("coverage", "layer", "layer_start", "layer_end")


def add_error(errors: dict[str, list[str]], name: str, message: str) -> None:
    """Append ``message`` to the field errors of ``name`` (the dict a ``ValidationError`` takes)."""
    errors.setdefault(name, []).append(message)


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
    targeting condition, guardrail metrics as a list of distinct names, and for bandits valid
    settings (:mod:`..bandit_config`) on a primary metric a bandit can optimise (a proportion or a
    mean: :func:`bandit_metric_problem`; the error is on ``bandit``). Every path that sets a
    bandit's metric runs it: create, edit (API and admin), a change of type to bandit. Raises
    ValidationError by field."""
    errors: dict[str, list[str]] = {}
    kind = values.get("type", ExperimentType.AB)
    if kind not in ExperimentType.values:
        add_error(errors, "type", f"Type must be one of {', '.join(ExperimentType.values)}.")
    elif kind == ExperimentType.BANDIT:
        config, bandit_errors = bandit_config_clean(
            values.get("bandit"), primary_metric=values.get("primary_metric", "")
        )
        for message in bandit_errors.get("bandit", []):
            add_error(errors, "bandit", message)
        metric = config.get("metric")
        if isinstance(metric, str) and metric and (problem := bandit_metric_problem(metric)):
            add_error(errors, "bandit", problem)
    elif values.get("bandit"):
        add_error(errors, "bandit", 'Bandit settings apply to experiments of type "bandit" only.')
    coverage = values.get("coverage", 1.0)
    if not is_finite_number(coverage) or not 0 <= coverage <= 1:
        add_error(errors, "coverage", "Coverage must be a finite number between 0 and 100 %.")
    start, end = values.get("layer_start", 0.0), values.get("layer_end", 1.0)
    if not (is_finite_number(start) and is_finite_number(end) and 0 <= start < end <= 1):
        add_error(errors, "layer_end", "The layer range needs finite bounds with 0 % ≤ start < end ≤ 100 %.")
    elif values.get("layer") is not None:
        for message in layer_overlap_errors(
            layer=values["layer"], start=start, end=end, exclude_id=exclude_id
        ):
            add_error(errors, "layer_start", message)
    for message in condition_errors(values.get("condition") or {}):
        add_error(errors, "condition", message)
    guardrails = values.get("guardrail_metrics", [])
    if not isinstance(guardrails, list) or not all(isinstance(m, str) and m for m in guardrails):
        add_error(errors, "guardrail_metrics", "Guardrail metrics must be a list of metric names.")
    else:
        repeated = repeated_guardrails_error(guardrails)
        if repeated:
            add_error(errors, "guardrail_metrics", repeated)
        known = metric_names()
        if known is not None:
            primary = values.get("primary_metric")
            if primary is not None and primary not in known:
                add_error(errors, "primary_metric", _unknown_metric(primary, known))
            for name in guardrails:
                if name not in known:
                    add_error(errors, "guardrail_metrics", _unknown_metric(name, known))
    if errors:
        raise ValidationError(errors)


def bandit_normalised(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the bandit settings completed by their defaults when the type is bandit and
    the settings are valid (else unchanged, for validation to report)."""
    out = dict(values)
    if out.get("type") == ExperimentType.BANDIT:
        config, errors = bandit_config_clean(out.get("bandit"), primary_metric=out.get("primary_metric", ""))
        if not errors:
            out["bandit"] = config
    return out


def metric_names() -> frozenset[str] | None:
    """Names of the metrics results can be computed for, from the callable named by
    ``settings.METRIC_NAMES_LOOKUP`` (a dotted path, injected so that this app never imports the
    analytics app); None when no lookup is configured (then any name is accepted)."""
    path = getattr(settings, "METRIC_NAMES_LOOKUP", "")
    return frozenset(import_string(path)()) if path else None


def repeated_guardrails_error(names: Iterable[str]) -> str | None:
    """The error for guardrail metric names listed more than once (each guardrail is tested once:
    a repeated one would also count twice in the per-guardrail alpha), else None."""
    repeated = sorted(name for name, n in Counter(names).items() if n > 1)
    if not repeated:
        return None
    verb = "is" if len(repeated) == 1 else "are"
    return f"{', '.join(repeated)} {verb} listed more than once: name each guardrail once."


def bandit_metric_problem(name: str) -> str | None:
    """Why a bandit cannot optimise the metric ``name`` (e.g. ``"metric: 'latency_p95_ms' is a
    quantile metric; …"``), else None, from the callable named by ``settings.BANDIT_METRIC_CHECK``
    (a dotted path, injected so that this app never imports the analytics app); None when no
    check is configured."""
    path = getattr(settings, "BANDIT_METRIC_CHECK", "")
    return import_string(path)(name) if path else None


def _unknown_metric(name: str, known: frozenset[str]) -> str:
    listed = ", ".join(sorted(known)[:20])
    return f"Unknown metric {name!r}: define it under Analytics → Metric definitions first (known: {listed})."


def as_condition(condition: Any) -> Any:
    """A copy of a condition mapping (``None`` → ``{}``); anything else is left for validation."""
    if condition is None:
        return {}
    return dict(condition) if isinstance(condition, Mapping) else condition


@contextlib.contextmanager
def key_taken_as_field_error(model: type[models.Model], key: str, message: str) -> Iterator[None]:
    """Run the insert of a ``model`` row with unique ``key`` in a savepoint: when a concurrent
    create took the key between the caller's check and this insert (both checks passed; on
    PostgreSQL the loser's INSERT then violates the unique constraint), raise
    ``ValidationError({"key": [message]})`` instead of the ``IntegrityError``. Any other integrity
    error propagates. The caller's transaction stays usable either way."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        if model.objects.filter(key=key).exists():
            raise ValidationError({"key": [message]}) from None
        raise


def full_clean(obj: Any, **kwargs: Any) -> None:
    """``obj.full_clean(**kwargs)``, raising its errors as a field-error dict (never a bare list)."""
    try:
        obj.full_clean(**kwargs)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
