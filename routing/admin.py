"""Admin for the model catalogue and the call log."""

from django.contrib import admin

from .models import Attempt, CallRecord, ModelEndpoint, Provider


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    list_display = ("key", "kind", "base_url", "credential_env", "api_version", "enabled")
    list_filter = ("kind", "enabled")


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    list_display = (
        "public_id",
        "version_label",
        "provider",
        "upstream_model",
        "api_style",
        "enabled",
        "is_platform_default",
    )
    list_filter = ("provider", "api_style", "enabled")
    search_fields = ("public_id", "version_label", "upstream_model")


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = ("number", "endpoint", "outcome", "status_code", "latency_ms", "upstream_request_id")


@admin.register(CallRecord)
class CallRecordAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "experiment_key",
        "variant_key",
        "served_endpoint",
        "reason",
        "status",
        "latency_ms",
        "cost_usd",
    )
    list_filter = ("reason", "status", "experiment_key")
    search_fields = ("session_id", "user_id")
    inlines = [AttemptInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
