"""Admin for product managers: experiments with inline variants, lifecycle actions, audit trail."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from . import services
from .models import (
    ApiKey,
    AuditEntry,
    Experiment,
    ExperimentPhase,
    Exposure,
    ForcedAssignment,
    Layer,
    PlatformConfig,
    Variant,
)


class VariantFormSet(BaseInlineFormSet):
    """Validates the variant set as a whole: weights sum to 100%, exactly one control."""

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        rows = [f.cleaned_data for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        try:
            services.validate_variants(
                [
                    services.VariantInput(
                        key=r["key"],
                        weight=r["weight"],
                        endpoint=r["endpoint"],
                        is_control=r.get("is_control", False),
                    )
                    for r in rows
                ]
            )
        except ValidationError as exc:
            raise ValidationError([m for msgs in exc.message_dict.values() for m in msgs]) from None


class VariantInline(admin.TabularInline):
    model = Variant
    formset = VariantFormSet
    extra = 0
    fields = ("position", "key", "name", "weight", "endpoint", "is_control", "overrides")
    autocomplete_fields = ("endpoint",)


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("key", "name", "status", "unit_type", "coverage", "phase", "layer", "started_at")
    list_filter = ("status", "unit_type", "layer")
    search_fields = ("key", "name", "owner")
    readonly_fields = ("status", "phase", "started_at", "stopped_at", "created_at", "updated_at")
    inlines = [VariantInline]
    actions = ["start", "pause", "stop"]

    def _lifecycle(self, request, queryset, service, verb):
        for experiment in queryset:
            try:
                service(experiment=experiment, actor=request.user.get_username())
            except ValidationError as exc:
                self.message_user(request, f"{experiment.key}: {'; '.join(exc.messages)}", messages.ERROR)
            else:
                self.message_user(request, f"{experiment.key}: {verb}.", messages.SUCCESS)

    @admin.action(description="Start (or resume) selected experiments")
    def start(self, request, queryset):
        self._lifecycle(request, queryset, services.experiment_start, "running")

    @admin.action(description="Pause selected experiments")
    def pause(self, request, queryset):
        self._lifecycle(request, queryset, services.experiment_pause, "paused")

    @admin.action(description="Stop selected experiments")
    def stop(self, request, queryset):
        self._lifecycle(request, queryset, services.experiment_stop, "stopped")


@admin.register(Layer)
class LayerAdmin(admin.ModelAdmin):
    list_display = ("key", "description")
    search_fields = ("key",)


@admin.register(ForcedAssignment)
class ForcedAssignmentAdmin(admin.ModelAdmin):
    list_display = ("experiment", "unit_id", "variant", "note")
    list_filter = ("experiment",)


@admin.register(ExperimentPhase)
class ExperimentPhaseAdmin(admin.ModelAdmin):
    list_display = ("experiment", "number", "seed", "coverage", "started_at", "ended_at")
    list_filter = ("experiment",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Exposure)
class ExposureAdmin(admin.ModelAdmin):
    list_display = ("experiment", "phase", "unit_id", "variant_key", "reason", "first_exposed_at")
    list_filter = ("experiment", "phase", "reason")
    search_fields = ("unit_id",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id")
    list_filter = ("action", "object_type")
    readonly_fields = ("at", "actor", "action", "object_type", "object_id", "changes")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PlatformConfig)
class PlatformConfigAdmin(admin.ModelAdmin):
    list_display = ("holdout_share", "holdout_seed", "version")
    readonly_fields = ("version",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "scopes", "rate_limit_per_minute", "created_at", "revoked_at")
    readonly_fields = ("prefix", "digest", "created_at")
    exclude = ("digest",)
