"""Audit diffs as sentences a product manager reads (no Django import).

An :class:`~muse_experiments.experiments.models.AuditEntry` stores ``{field: [before, after]}`` plus nested
``"variants"`` (``added``/``removed``/``changed``) and ``"forced"`` diffs as JSON. The admin's
history and the "this save opens a new phase" confirmation show them through
:func:`describe_changes`: shares (weights, coverage, layer bounds, holdout) in percent, models by
version label, one line per change.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: Fields stored as shares in [0, 1] and shown in percent, like the forms.
PERCENT_FIELDS = frozenset({"coverage", "layer_start", "layer_end", "weight", "holdout_share"})
LABELS = {
    "layer_start": "layer range start",
    "layer_end": "layer range end",
    "primary_metric": "primary metric",
    "guardrail_metrics": "guardrail metrics",
    "unit_type": "unit type",
    "is_control": "control",
    "endpoint": "model",
    "holdout_share": "holdout",
    "holdout_seed": "holdout seed",
    "hash_version": "layer hash",
}


def percent(share: Any) -> str:
    """``0.335`` → ``"33.5 %"`` (up to 6 significant digits); non-numbers as given."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share):
        return _text(share)
    return f"{share * 100:.6g} %"


def _text(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value) if value else "—"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False) if value else "—"
    return str(value)


def _value(name: str, value: Any, models: Mapping[str, str]) -> str:
    if name in PERCENT_FIELDS:
        return percent(value)
    if name == "endpoint" and isinstance(value, str):
        return models.get(value, value)
    return _text(value)


def _label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def _variant_summary(state: Mapping[str, Any], models: Mapping[str, str]) -> str:
    parts = [f"{percent(state.get('weight'))}", _value("endpoint", state.get("endpoint"), models)]
    if state.get("is_control"):
        parts.append("control")
    if state.get("overrides"):
        parts.append(f"overrides {_text(state['overrides'])}")
    return ", ".join(parts)


def describe_changes(changes: Mapping[str, Any], *, models: Mapping[str, str] | None = None) -> list[str]:
    """One readable line per change, e.g. ``"coverage: 100 % → 50 %"``,
    ``"variant treatment weight: 33.3333 % → 50 %"``, ``"variant c removed (33 %, avocado-v2)"``,
    ``"phase 1 → 2: a new phase starts"``.

    ``models`` maps model public ids to version labels (``avocado/3f…`` → ``avocado-v14``).
    Unknown shapes fall back to compact JSON, so no entry is ever hidden.
    """
    models = models or {}
    lines: list[str] = []
    for name, value in changes.items():
        if name == "variants" and isinstance(value, Mapping):
            for key, state in (value.get("added") or {}).items():
                lines.append(f"variant {key} added ({_variant_summary(state, models)})")
            for key, state in (value.get("removed") or {}).items():
                lines.append(f"variant {key} removed (was {_variant_summary(state, models)})")
            for key, diff in (value.get("changed") or {}).items():
                for field, pair in diff.items():
                    before, after = pair
                    lines.append(
                        f"variant {key} {_label(field)}: {_value(field, before, models)} → "
                        f"{_value(field, after, models)}"
                    )
        elif name == "forced" and isinstance(value, Mapping):
            for unit, (before, after) in value.items():
                lines.append(f"QA pin {unit}: {_text(before)} → {_text(after)}")
        elif name == "phase" and isinstance(value, list) and len(value) == 2:
            lines.append(f"phase {value[0]} → {value[1]}: a new phase starts")
        elif isinstance(value, list) and len(value) == 2:
            lines.append(
                f"{_label(name)}: {_value(name, value[0], models)} → {_value(name, value[1], models)}"
            )
        else:
            lines.append(f"{_label(name)}: {_text(value)}")
    return lines
