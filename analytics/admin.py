"""Admin for analysts: metric definitions, per-experiment analysis settings, snapshots, guardrail log.

Saves go through :mod:`analytics.services` (validated and audited); model ``clean()`` errors show
on the form fields.
"""

from django.contrib import admin

from .models import (
    ExperimentAnalysisSettings,
    GuardrailAction,
    MetricDefinition,
    OutcomeEvent,
    ResultSnapshot,
)
from .services import analysis_settings_save, metric_definition_save


@admin.register(OutcomeEvent)
class OutcomeEventAdmin(admin.ModelAdmin):
    list_display = ("event_id", "name", "session_id", "user_id", "value", "occurred_at")
    list_filter = ("name",)
    search_fields = ("event_id", "session_id", "user_id")


@admin.register(MetricDefinition)
class MetricDefinitionAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "metric_type",
        "source",
        "event_name",
        "call_value",
        "aggregation",
        "quantile",
        "higher_is_better",
        "capping",
        "covariate_lookback_days",
        "is_builtin",
    )
    list_filter = ("metric_type", "source", "is_builtin")
    search_fields = ("name", "label", "event_name")
    fieldsets = (
        (None, {"fields": ("name", "label", "description", "metric_type", "higher_is_better")}),
        ("Per-unit value", {"fields": ("source", "event_name", "call_value", "aggregation")}),
        ("Ratio", {"fields": ("numerator", "denominator")}),
        ("Quantile (e.g. p95 latency)", {"fields": ("quantile", "quantile_of")}),
        (
            "Heavy tails and variance reduction",
            {"fields": ("capping", "cap_value", "covariate_lookback_days")},
        ),
    )

    def save_model(self, request, obj, form, change):
        metric_definition_save(metric=obj, actor=request.user.get_username(), changed=list(form.changed_data))


@admin.register(ExperimentAnalysisSettings)
class ExperimentAnalysisSettingsAdmin(admin.ModelAdmin):
    list_display = (
        "experiment",
        "alpha",
        "sequential_tuning",
        "auto_pause_guardrails",
        "include_multiple_exposures",
    )
    list_select_related = ("experiment",)

    def save_model(self, request, obj, form, change):
        analysis_settings_save(
            settings=obj, actor=request.user.get_username(), changed=list(form.changed_data)
        )


@admin.register(ResultSnapshot)
class ResultSnapshotAdmin(admin.ModelAdmin):
    list_display = ("experiment", "phase", "computed_at", "trigger", "duration_ms")
    list_filter = ("trigger",)
    readonly_fields = (
        "experiment",
        "phase",
        "computed_at",
        "trigger",
        "request_id",
        "duration_ms",
        "inputs",
        "results",
    )


@admin.register(GuardrailAction)
class GuardrailActionAdmin(admin.ModelAdmin):
    list_display = ("created_at", "experiment", "phase", "variant_key", "metric", "decision", "message")
    list_filter = ("decision",)
    readonly_fields = (
        "experiment",
        "phase",
        "variant_key",
        "metric",
        "decision",
        "snapshot",
        "evidence",
        "message",
        "created_at",
    )

    def has_add_permission(self, request):
        return False
