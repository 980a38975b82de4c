"""The admin's "History" page from the audit log the services keep.

Django's own history page lists the admin's ``LogEntry`` rows, which exist only for saves made on
an admin form; experiments, layers, kill switches and catalogue entries are also changed through
the API and the services, which record every change as an
:class:`~muse_experiments.experiments.models.AuditEntry`. :class:`AuditHistoryAdmin` shows those
instead, so "History" never says "This object doesn't have a change history" for an object the
platform audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.admin.utils import unquote

from .. import selectors
from ..audit_text import describe_changes
from ..models import AuditEntry

#: Most audit entries the history page shows (newest first).
HISTORY_LIMIT = 500


@dataclass(frozen=True)
class AuditRow:
    """One audit entry as the history page shows it: when (UTC), who, what, and one readable line
    per change (:func:`~muse_experiments.experiments.audit_text.describe_changes`)."""

    at: datetime
    actor: str
    action: str
    lines: list[str]


def audit_rows(*, object_type: str, object_id: str, limit: int = HISTORY_LIMIT) -> list[AuditRow]:
    """The audit entries of one object (``object_type``: the model's class name, as the services
    record it; ``object_id``: its primary key as text), newest first, models named by version
    label. Two queries."""
    entries = AuditEntry.objects.filter(object_type=object_type, object_id=object_id).order_by("-at", "-id")
    models = selectors.model_labels()
    return [
        AuditRow(at=e.at, actor=e.actor, action=e.action, lines=describe_changes(e.changes, models=models))
        for e in entries[:limit]
    ]


class AuditHistoryAdmin:
    """ModelAdmin mixin (list it before ``admin.ModelAdmin``): the "History" page lists the
    object's audit entries (who, when, action, what changed) instead of the admin's own log."""

    object_history_template = "admin/audit_history.html"

    def history_view(self, request, object_id, extra_context=None):
        rows = audit_rows(object_type=self.model.__name__, object_id=str(unquote(object_id)))
        return super().history_view(request, object_id, {"audit_rows": rows, **(extra_context or {})})
