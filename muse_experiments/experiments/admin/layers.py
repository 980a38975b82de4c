"""Admin for layers and the global holdout, saved through :mod:`..services.layers` (audited)."""

from __future__ import annotations

from django.contrib import admin

from ..audit_text import percent
from ..forms import PlatformConfigForm
from ..models import Layer, PlatformConfig
from ..services.layers import layer_save, platform_config_update
from .history import AuditHistoryAdmin


@admin.register(Layer)
class LayerAdmin(AuditHistoryAdmin, admin.ModelAdmin):
    list_display = ("key", "description", "hash_version", "ranges")
    fields = ("key", "description", "hash_version")
    search_fields = ("key",)

    @admin.display(description="Experiments [start, end)")
    def ranges(self, obj: Layer) -> str:
        return ", ".join(
            f"{e.key} [{percent(e.layer_start)}, {percent(e.layer_end)})"
            for e in obj.experiments.exclude(status="archived")
        )

    def get_readonly_fields(self, request, obj=None):
        return ("key", "hash_version") if obj is not None and obj.experiments.exists() else ()

    def save_model(self, request, obj, form, change):
        layer_save(layer=obj, actor=request.user.get_username())


@admin.register(PlatformConfig)
class PlatformConfigAdmin(AuditHistoryAdmin, admin.ModelAdmin):
    """The global holdout; saved through ``platform_config_update`` (audited)."""

    form = PlatformConfigForm
    list_display = ("__str__", "holdout_share", "holdout_seed", "version")
    readonly_fields = ("version", "sticky_namespace")

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not PlatformConfig.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        saved = platform_config_update(
            actor=request.user.get_username(),
            holdout_share=form.cleaned_data["holdout_share"],
            holdout_seed=form.cleaned_data["holdout_seed"],
        )
        obj.pk = saved.pk
