"""Read-only admin for what services write and nobody edits by hand: QA pins (edited on the
experiment page), phases, exposures and the audit trail."""

from __future__ import annotations

from django.contrib import admin

from muse_experiments.infra.admin_base import ReadOnlyAdmin

from ..models import AuditEntry, ExperimentPhase, Exposure, ForcedAssignment


@admin.register(ForcedAssignment)
class ForcedAssignmentAdmin(ReadOnlyAdmin):
    """Read-only overview; pins are edited on the experiment page (audited)."""

    can_delete_rows = False
    list_display = ("experiment", "unit_id", "variant", "note")
    list_filter = ("experiment",)


@admin.register(ExperimentPhase)
class ExperimentPhaseAdmin(ReadOnlyAdmin):
    can_delete_rows = False
    list_display = ("experiment", "number", "reason", "seed", "coverage", "started_at", "ended_at")
    list_filter = ("experiment", "reason")


@admin.register(Exposure)
class ExposureAdmin(ReadOnlyAdmin):
    """Exposures are the analysis sample and the durable sticky assignment: never edited or
    deleted by hand (deleting one would silently change results and re-hash the unit)."""

    can_delete_rows = False
    list_display = ("experiment", "phase", "unit_id", "variant_key", "reason", "first_exposed_at")
    list_filter = ("experiment", "phase", "reason")
    search_fields = ("unit_id",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    can_delete_rows = False
    list_display = ("at", "actor", "action", "object_type", "object_id")
    list_filter = ("action", "object_type")
    readonly_fields = ("at", "actor", "action", "object_type", "object_id", "changes")
