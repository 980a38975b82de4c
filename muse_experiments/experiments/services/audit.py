"""Audit entries: who changed what, as a field-level ``{field: [before, after]}`` diff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import AuditEntry, Layer, Variant
from .variants import VariantInput


def audit_record(
    *, actor: str, action: str, obj: Any, changes: Mapping[str, Any] | None = None
) -> AuditEntry:
    """Record that ``actor`` did ``action`` to ``obj`` (a model instance) with ``changes``."""
    return AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=str(obj.pk),
        changes=dict(changes or {}),
    )


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it in a diff (a layer by its key, dates in ISO 8601)."""
    if isinstance(value, Layer):
        return value.key
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def variant_state(v: Variant | VariantInput) -> dict[str, Any]:
    """A variant as the audit diff shows it."""
    return {
        "name": v.name or v.key,
        "weight": v.weight,
        "endpoint": v.endpoint.public_id,
        "is_control": v.is_control,
        "overrides": dict(v.overrides),
    }
