"""The rules an experiment's configuration follows: which fields may change in which status, and the
cross-field checks (coverage, layer slice, targeting condition, metrics). Helpers every service
uses to collect field errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
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
    targeting condition, guardrail metrics as a list of names, and for bandits valid settings
    (:mod:`..bandit_config`) on the primary metric. Raises ValidationError by field."""
    errors: dict[str, list[str]] = {}
    kind = values.get("type", ExperimentType.AB)
    if kind not in ExperimentType.values:
        add_error(errors, "type", f"Type must be one of {', '.join(ExperimentType.values)}.")
    elif kind == ExperimentType.BANDIT:
        _, bandit_errors = bandit_config_clean(
            values.get("bandit"), primary_metric=values.get("primary_metric", "")
        )
        for message in bandit_errors.get("bandit", []):
            add_error(errors, "bandit", message)
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
