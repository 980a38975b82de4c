"""Admin: transcripts (read-only) with opt-out/opt-in actions, opt-outs, accepted records, gate counters."""

from __future__ import annotations

from django.contrib import admin, messages

from muse_experiments.infra.admin_base import ReadOnlyAdmin

from .models import GateCounter, TrainingOptOut, TrainingRecord, Transcript, TranscriptTurn
from .services import training_opt_in, training_opt_out


def _actor(request) -> str:
    return f"admin:{request.user.get_username()}"


class TranscriptTurnInline(admin.TabularInline):
    model = TranscriptTurn
    extra = 0
    can_delete = False
    fields = (
        "number",
        "served_model",
        "model_version",
        "provenance",
        "experiment_key",
        "variant_key",
        "finish_reason",
        "training_eligible",
        "created_at",
        "exported_at",
    )
    readonly_fields = fields
    show_change_link = True


@admin.action(description="Opt the selected sessions' users out of training", permissions=["opt_out"])
def opt_users_out(modeladmin, request, queryset):
    users = sorted(set(queryset.values_list("user_id", flat=True)))
    changed = sum(training_opt_out(user_id=u, actor=_actor(request))[1] for u in users)
    modeladmin.message_user(
        request,
        f"{len(users)} user(s) opted out; {changed} unexported turn(s) made ineligible.",
        messages.SUCCESS,
    )


@admin.action(description="Opt the selected sessions' users back in to training", permissions=["opt_in"])
def opt_users_in(modeladmin, request, queryset):
    users = sorted(set(queryset.values_list("user_id", flat=True)))
    changed = sum(training_opt_in(user_id=u, actor=_actor(request)) for u in users)
    modeladmin.message_user(
        request, f"{len(users)} user(s) opted back in; {changed} turn(s) eligible again.", messages.SUCCESS
    )


@admin.register(Transcript)
class TranscriptAdmin(ReadOnlyAdmin):
    list_display = ("session_id", "user_id", "created_at", "updated_at")
    search_fields = ("session_id", "user_id")
    inlines = [TranscriptTurnInline]
    actions = [opt_users_out, opt_users_in]

    # The actions write opt-outs: they need the TrainingOptOut permissions (add opts out, delete
    # opts back in), as the opt-out admin and ``/api/v1/users/{id}/training-opt-out`` do.
    def has_opt_out_permission(self, request) -> bool:
        return request.user.has_perm("transcripts.add_trainingoptout")

    def has_opt_in_permission(self, request) -> bool:
        return request.user.has_perm("transcripts.delete_trainingoptout")


@admin.register(TranscriptTurn)
class TranscriptTurnAdmin(ReadOnlyAdmin):
    list_display = (
        "transcript",
        "number",
        "served_model",
        "provenance",
        "training_eligible",
        "reasoning_removed",
        "created_at",
        "exported_at",
    )
    list_filter = ("provenance", "training_eligible", "model_version")
    search_fields = ("transcript__session_id", "user_id")


@admin.register(TrainingOptOut)
class TrainingOptOutAdmin(admin.ModelAdmin):
    """Add a row to opt a user out; delete it (or use the action) to opt back in. Both go through
    the services so unexported turns follow."""

    list_display = ("user_id", "actor", "created_at")
    search_fields = ("user_id",)
    fields = ("user_id",)
    actions = ["opt_back_in"]

    def has_change_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        opt_out, n = training_opt_out(user_id=obj.user_id, actor=_actor(request))
        obj.pk = opt_out.pk
        self.message_user(request, f"{n} unexported turn(s) made ineligible.", messages.SUCCESS)

    def delete_model(self, request, obj):
        training_opt_in(user_id=obj.user_id, actor=_actor(request))

    def delete_queryset(self, request, queryset):
        for user_id in list(queryset.values_list("user_id", flat=True)):
            training_opt_in(user_id=user_id, actor=_actor(request))

    @admin.action(description="Opt the selected users back in to training", permissions=["delete"])
    def opt_back_in(self, request, queryset):
        self.delete_queryset(request, queryset)
        self.message_user(request, "Opted back in.", messages.SUCCESS)


@admin.register(TrainingRecord)
class TrainingRecordAdmin(ReadOnlyAdmin):
    list_display = ("record_id", "user_id", "ingested_at")
    search_fields = ("record_id", "user_id")


@admin.register(GateCounter)
class GateCounterAdmin(ReadOnlyAdmin):
    """Ingestion-gate metrics: accepted, duplicates and rejections per reason (running totals)."""

    can_delete_rows = False
    list_display = ("name", "count", "updated_at")
