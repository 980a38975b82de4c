"""Admin for analysts: metric definitions, per-experiment analysis settings, snapshots, guardrail log.

Saves go through :mod:`analytics.services` (validated and audited); model ``clean()`` errors show
on the form fields.
"""

from django.contrib import admin

from muse_experiments.experiments.admin.history import AuditHistoryAdmin
from muse_experiments.infra.admin_base import ReadOnlyAdmin, json_details

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
class MetricDefinitionAdmin(AuditHistoryAdmin, admin.ModelAdmin):
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
class ExperimentAnalysisSettingsAdmin(AuditHistoryAdmin, admin.ModelAdmin):
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
class ResultSnapshotAdmin(ReadOnlyAdmin):
    """Snapshots are computed (the results API, the results page's recompute button, the
    scheduler), never typed: no add, no change, no delete. The change page shows the stored
    inputs and results as collapsed, pretty-printed JSON."""

    can_delete_rows = False
    list_display = ("experiment", "phase", "computed_at", "trigger", "duration_ms")
    list_filter = ("trigger",)
    list_select_related = ("experiment",)
    fields = (
        "experiment",
        "phase",
        "computed_at",
        "trigger",
        "request_id",
        "duration_ms",
        "inputs_json",
        "results_json",
    )
    readonly_fields = fields

    @admin.display(description="Inputs (sufficient statistics)")
    def inputs_json(self, obj: ResultSnapshot) -> str:
        return json_details(obj.inputs)

    @admin.display(description="Results")
    def results_json(self, obj: ResultSnapshot) -> str:
        return json_details(obj.results)


@admin.register(GuardrailAction)
class GuardrailActionAdmin(ReadOnlyAdmin):
    """Guardrail breaches and what the platform did, written by the analysis: read-only, kept."""

    can_delete_rows = False
    list_display = ("created_at", "experiment", "phase", "variant_key", "metric", "decision", "message")
    list_filter = ("decision",)
    list_select_related = ("experiment",)
    fields = (
        "experiment",
        "phase",
        "variant_key",
        "metric",
        "decision",
        "snapshot",
        "evidence_json",
        "message",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="Evidence")
    def evidence_json(self, obj: GuardrailAction) -> str:
        return json_details(obj.evidence)
