"""Read-only admin for progressive rollouts: the list with state and percent, and each rollout's
ramp history (decisions with their evidence). Rollouts are created and driven through the REST
API (``/api/v1/rollouts``) and the scheduled check, never edited by hand."""

from __future__ import annotations

from django.contrib import admin

from muse_experiments.infra.admin_base import ReadOnlyAdmin

from ..models import Rollout, RolloutEvent


class RolloutEventInline(admin.TabularInline):
    model = RolloutEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_percent", "to_percent", "reason", "message", "actor", "evidence")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Rollout)
class RolloutAdmin(ReadOnlyAdmin):
    can_delete_rows = False
    list_display = (
        "key",
        "state",
        "percent",
        "step",
        "candidate",
        "current",
        "step_started_at",
        "last_checked_at",
    )
    list_filter = ("state",)
    search_fields = ("key",)
    list_select_related = ("candidate", "current")
    inlines = [RolloutEventInline]
