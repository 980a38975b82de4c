"""Admin for the model catalogue, kill switches and the call log.

Catalogue edits and kill-switch changes go through :mod:`routing.ops_services` (audited, and the
configuration version is bumped so every process sees them within about a second). The catalogue
shows only the *name* of each credential's environment variable, never a value; where that
credential may be sent is the credential binding's to say (:mod:`routing.credentials`), and who
may change it is ``routing.change_provider_endpoint``'s.
"""

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils.html import escape

from muse_experiments.infra.admin_base import ReadOnlyAdmin

from .credentials import credential_binding_validate
from .models import Attempt, CallRecord, CompletionJob, KillScope, KillSwitch, ModelEndpoint, Provider
from .ops_services import (
    PROVIDER_ENDPOINT_PERMISSION,
    catalogue_entry_save,
    kill_switch_set,
    kill_switch_validate,
)


class AuditedCatalogueAdmin(admin.ModelAdmin):
    """Saves through :func:`catalogue_entry_save`; deleting is not offered (disable instead)."""

    def save_model(self, request, obj, form, change):
        catalogue_entry_save(
            obj=obj,
            actor=request.user.get_username(),
            changed=form.changed_data,
            may_change_endpoint=may_change_provider_endpoint(request.user),
        )

    def has_delete_permission(self, request, obj=None):
        return False


def may_change_provider_endpoint(user) -> bool:
    """Whether ``user`` may add providers and change their base URL or credential variable."""
    return user.has_perm(PROVIDER_ENDPOINT_PERMISSION)


class ProviderForm(forms.ModelForm):
    """A provider's credential variable and base URL must be in the credential binding
    (:func:`routing.credentials.credential_binding_validate`): field errors naming what is
    allowed. When the two fields are read-only (no permission to change them) and the stored
    values are outside the binding, the error is the form's own: nothing else can be saved until
    someone allowed to fixes them. (The admin builds it for the model, without the read-only
    fields.)"""

    def clean(self):
        data = super().clean()
        if any(name in self.errors for name in Provider.ENDPOINT_FIELDS):
            return data  # the field's own error says enough
        values = {
            name: data[name] if name in self.fields else getattr(self.instance, name)
            for name in Provider.ENDPOINT_FIELDS
        }
        try:
            credential_binding_validate(**values)
        except ValidationError as exc:
            for name, errors in exc.message_dict.items():
                if name in self.fields:
                    self.add_error(name, errors)
                else:
                    self.add_error(
                        None, [f"{Provider._meta.get_field(name).verbose_name}: {e}" for e in errors]
                    )
        return data


@admin.register(Provider)
class ProviderAdmin(AuditedCatalogueAdmin):
    """Providers. The base URL and credential variable say where a credential is sent: without
    ``routing.change_provider_endpoint`` they are read-only, a POST that changes them anyway is
    refused (403), and adding a provider is not offered."""

    form = ProviderForm
    list_display = ("key", "kind", "base_url", "credential_env", "api_version", "enabled")
    list_filter = ("kind", "enabled")

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "base_url":
            kwargs["assume_scheme"] = "https"
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        readonly = super().get_readonly_fields(request, obj)
        if may_change_provider_endpoint(request.user):
            return readonly
        return (*readonly, *Provider.ENDPOINT_FIELDS)

    def has_add_permission(self, request):
        return super().has_add_permission(request) and may_change_provider_endpoint(request.user)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST" and object_id and not may_change_provider_endpoint(request.user):
            stored = self.get_object(request, unquote(object_id))
            if stored is not None and any(
                name in request.POST and request.POST[name] != getattr(stored, name)
                for name in Provider.ENDPOINT_FIELDS
            ):
                raise PermissionDenied(
                    f"Changing a provider's base URL or credential variable needs {PROVIDER_ENDPOINT_PERMISSION}."
                )
        return super().changeform_view(request, object_id, form_url, extra_context)


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(AuditedCatalogueAdmin):
    list_display = (
        "public_id",
        "version_label",
        "provider",
        "upstream_model",
        "api_style",
        "timeout_s",
        "max_concurrency",
        "enabled",
        "is_platform_default",
    )
    list_filter = ("provider", "api_style", "enabled")
    search_fields = ("public_id", "version_label", "upstream_model")
    fieldsets = (
        (None, {"fields": ("public_id", "version_label", "provider", "upstream_model", "api_style")}),
        (
            "Capabilities",
            {
                "fields": (
                    "supports_tools",
                    "supports_reasoning",
                    "supports_streaming",
                    "supports_structured_output",
                    "supports_json_mode",
                )
            },
        ),
        (
            "Prices (USD per million tokens)",
            {
                "fields": (
                    "price_input_per_mtok",
                    "price_cached_input_per_mtok",
                    "price_cache_write_per_mtok",
                    "price_cache_write_1h_per_mtok",
                    "price_output_per_mtok",
                )
            },
        ),
        ("Operation", {"fields": ("timeout_s", "max_concurrency", "enabled", "is_platform_default")}),
    )


class KillSwitchForm(forms.ModelForm):
    """Scope, target, on/off and a required reason; the target is checked against the catalogue
    and experiments (form errors, nothing saved, on a bad target). Killing a control variant needs
    ``control_traffic_to`` naming the platform default (see
    :func:`routing.ops_services.kill_switch_validate`)."""

    control_traffic_to = forms.CharField(
        required=False,
        help_text="Only when killing an experiment's control variant: the platform default "
        "endpoint's public id, confirming that its units go there.",
    )

    class Meta:
        model = KillSwitch
        fields = ("scope", "target", "active", "reason")
        help_texts = {
            # The admin renders help text as HTML: escape it, or "<experiment key>" vanishes as a tag.
            "target": escape(
                "Empty for all_external; provider key; endpoint public id; experiment key; "
                "or <experiment key>/<variant key>."
            ),
            "reason": "Why (recorded in the audit log).",
        }

    def clean(self):
        data = super().clean()
        scope = data.get("scope") or (self.instance.scope if self.instance.pk else None)
        if scope:
            try:
                target = kill_switch_validate(
                    scope=scope,
                    target=data.get("target") or (self.instance.target if self.instance.pk else ""),
                    active=bool(data.get("active")),
                    control_traffic_to=data.get("control_traffic_to", ""),
                )
            except ValidationError as exc:
                for name, errors in exc.message_dict.items():
                    self.add_error(name if name in self.fields else None, errors)
            else:
                if "scope" in data:
                    data["target"] = target
        return data


@admin.register(KillSwitch)
class KillSwitchAdmin(admin.ModelAdmin):
    form = KillSwitchForm
    list_display = ("scope", "target", "active", "active_since", "reason", "updated_by", "updated_at")
    list_filter = ("scope", "active")
    search_fields = ("target", "reason", "updated_by")
    readonly_fields = ("active_since", "updated_by", "updated_at", "created_at")

    def get_readonly_fields(self, request, obj=None):
        # Scope and target identify a switch; to switch something else, add a new one.
        return (*self.readonly_fields, "scope", "target") if obj else self.readonly_fields

    def save_model(self, request, obj, form, change):
        switch = kill_switch_set(
            scope=obj.scope,
            target=obj.target,
            active=obj.active,
            reason=form.cleaned_data["reason"],
            actor=request.user.get_username(),
            control_traffic_to=form.cleaned_data.get("control_traffic_to", ""),
        )
        obj.pk = switch.pk

    def has_delete_permission(self, request, obj=None):
        return False  # switches are turned off, not deleted, so the history stays readable

    def get_changeform_initial_data(self, request):
        return {"scope": KillScope.ALL_EXTERNAL, **super().get_changeform_initial_data(request)}


#: An attempt's columns, shown inline on a call and in the attempts list.
ATTEMPT_FIELDS = (
    "number",
    "endpoint",
    "outcome",
    "status_code",
    "latency_ms",
    "backoff_ms",
    "retry_after_s",
    "upstream_request_id",
)


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = ATTEMPT_FIELDS


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "experiment_key",
        "variant_key",
        "assigned_endpoint",
        "served_endpoint",
        "reason",
        "status",
        "latency_ms",
        "cost_usd",
    )
    list_filter = ("reason", "status", "experiment_key")
    search_fields = ("session_id", "user_id")
    inlines = [AttemptInline]


@admin.register(CompletionJob)
class CompletionJobAdmin(ReadOnlyAdmin):
    """Completion jobs for operators: status, lease, timings and error (read-only; written only by
    the dispatch and routing services). The request/result are the stored public forms: no
    credential or reasoning is ever in them."""

    can_delete_rows = False
    list_display = (
        "id",
        "created_at",
        "status",
        "session_id",
        "user_id",
        "subagent",
        "stream",
        "deliveries",
        "worker",
    )
    list_filter = ("status", "stream")
    search_fields = ("=id", "session_id", "user_id", "idempotency_key")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_select_related = ("api_key",)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    """Every upstream attempt (and refusal: killed, cooling, circuit_open …) of every call."""

    can_delete_rows = False
    list_display = ("call_id", *ATTEMPT_FIELDS)
    list_filter = ("outcome", "endpoint")
    search_fields = ("endpoint", "upstream_request_id", "=call__session_id")
    ordering = ("-call_id", "number")
    list_select_related = ("call",)
