"""Admin for the model catalogue, kill switches and the call log.

Catalogue edits and kill-switch changes go through :mod:`routing.ops_services` (audited, and the
configuration version is bumped so every process sees them within about a second). The catalogue
shows only the *name* of each credential's environment variable, never a value; where that
credential may be sent is the credential binding's to say (:mod:`routing.guards.credentials`), and who
may change it is ``routing.change_provider_endpoint``'s.
"""

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.html import format_html

from muse_experiments.experiments.admin.history import AuditHistoryAdmin
from muse_experiments.experiments.selectors import model_labels
from muse_experiments.infra.admin_base import ReadOnlyAdmin
from muse_experiments.infra.natural_sort import natural_key, natural_order
from routing import admin_killswitch  # noqa: F401 - importing registers the kill switch admin
from routing.guards.credentials import credential_binding_validate
from routing.models import Attempt, CallRecord, CompletionJob, ModelEndpoint, Provider
from routing.ops_services import PROVIDER_ENDPOINT_PERMISSION, catalogue_entry_save


class AuditedCatalogueAdmin(AuditHistoryAdmin, admin.ModelAdmin):
    """Saves through :func:`catalogue_entry_save`; deleting is not offered (disable instead); the
    History page lists the audit entries."""

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
    (:func:`routing.guards.credentials.credential_binding_validate`): field errors naming what is
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
    """The model catalogue, listed by version label in natural order (v2 before v10), the public
    id shortened with the whole id on hover."""

    list_display = (
        "label",
        "short_id",
        "provider_key",
        "upstream_model",
        "api_style",
        "timeout_s",
        "max_concurrency",
        "enabled",
        "is_platform_default",
    )
    list_display_links = ("label",)
    list_filter = ("provider", "api_style", "enabled")
    search_fields = ("public_id", "version_label", "upstream_model")
    list_select_related = ("provider",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(label_order=natural_order("public_id", model_labels()))

    def get_ordering(self, request):
        # An expression, not the annotation: Django also orders other admins' model pickers
        # (the experiment's variants) with it, on the bare table.
        return [natural_order("public_id", model_labels()), "public_id"]

    @admin.display(description="Model", ordering="label_order")
    def label(self, obj: ModelEndpoint) -> str:
        return obj.version_label or obj.public_id

    @admin.display(description="Provider", ordering="provider__key")
    def provider_key(self, obj: ModelEndpoint) -> str:
        return obj.provider.key

    @admin.display(description="Public id", ordering="public_id")
    def short_id(self, obj: ModelEndpoint) -> str:
        return model_id_html(obj.public_id)

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


#: An attempt's columns, shown inline on a call and in the attempts list.
ATTEMPT_FIELDS = (
    "number",
    "called_model",
    "outcome",
    "status_code",
    "latency",
    "backoff",
    "retry_after_s",
    "upstream_request_id",
)


class AttemptModelColumn:
    """The attempt's model by version label (id on hover), for an attempts list or inline."""

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(endpoint_label=_label_of("endpoint"))

    @admin.display(description="Model", ordering="endpoint")
    def called_model(self, obj: Attempt) -> str:
        return model_name_html(obj.endpoint, getattr(obj, "endpoint_label", ""))

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: Attempt) -> str:
        return f"{obj.latency_ms:,.0f} ms"

    @admin.display(description="Backoff", ordering="backoff_ms")
    def backoff(self, obj: Attempt) -> str:
        return f"{obj.backoff_ms:,.0f} ms"


class AttemptInline(AttemptModelColumn, admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = ATTEMPT_FIELDS


def model_filter(field: str, title: str) -> type[admin.SimpleListFilter]:
    """A list filter on the model public id in ``field``, listing the models by version label in
    natural order (v2 before v10)."""

    class ModelFilter(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request, model_admin):
            labels = model_labels()
            return sorted(labels.items(), key=lambda item: (natural_key(item[1]), item[0]))

        def queryset(self, request, queryset):
            return queryset.filter(**{field: self.value()}) if self.value() else queryset

    ModelFilter.title = title
    return ModelFilter


def model_id_html(public_id: str) -> str:
    """A public id short enough for a table column: ``avocado/4d1c…9e2f`` (provider, the first and
    last four characters of a long model part), the whole id on hover."""
    provider, _, model = public_id.partition("/")
    if len(model) <= 16:
        return public_id
    return format_html('<span title="{}">{}/{}…{}</span>', public_id, provider, model[:4], model[-4:])


def model_name_html(public_id: str, label: str) -> str:
    """A model by its version label with its public id on hover; ``—`` for none."""
    if not public_id:
        return "—"
    return format_html('<span class="model" title="{}">{}</span>', public_id, label or public_id)


def _label_of(field: str) -> Coalesce:
    """The version label of the model whose public id is in ``field`` ("" when none)."""
    label = ModelEndpoint.objects.filter(public_id=OuterRef(field)).values("version_label")[:1]
    return Coalesce(Subquery(label), Value(""))


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyAdmin):
    """The call log: models by version label (id on hover), sortable in natural label order."""

    list_display = (
        "created_at",
        "experiment_variant",
        "assigned_model",
        "served_model",
        "reason",
        "status",
        "latency",
        "ttft",
        "cost_usd",
    )
    list_filter = ("reason", "status", "experiment_key", model_filter("served_endpoint", "served model"))
    search_fields = ("session_id", "user_id")
    inlines = [AttemptInline]

    def get_queryset(self, request):
        labels = model_labels()
        return (
            super()
            .get_queryset(request)
            .annotate(
                assigned_label=_label_of("assigned_endpoint"),
                served_label=_label_of("served_endpoint"),
                assigned_order=natural_order("assigned_endpoint", labels),
                served_order=natural_order("served_endpoint", labels),
            )
        )

    @admin.display(description="Experiment / variant", ordering="experiment_key")
    def experiment_variant(self, obj: CallRecord) -> str:
        return f"{obj.experiment_key} / {obj.variant_key}" if obj.experiment_key else "—"

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: CallRecord) -> str:
        return "—" if obj.latency_ms is None else f"{obj.latency_ms:,.0f} ms"

    @admin.display(description="First token", ordering="ttft_ms")
    def ttft(self, obj: CallRecord) -> str:
        """Time to first token of a streamed call; "—" when the call was not streamed."""
        return "—" if obj.ttft_ms is None else f"{obj.ttft_ms:,.0f} ms"

    @admin.display(description="Assigned model", ordering="assigned_order")
    def assigned_model(self, obj: CallRecord) -> str:
        return model_name_html(obj.assigned_endpoint, getattr(obj, "assigned_label", ""))

    @admin.display(description="Served model", ordering="served_order")
    def served_model(self, obj: CallRecord) -> str:
        return model_name_html(obj.served_endpoint, getattr(obj, "served_label", ""))


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
class AttemptAdmin(AttemptModelColumn, ReadOnlyAdmin):
    """Every upstream attempt (and refusal: killed, cooling, circuit_open …) of every call."""

    can_delete_rows = False
    list_display = ("call_id", *ATTEMPT_FIELDS)
    list_filter = ("outcome", model_filter("endpoint", "model"))
    search_fields = ("endpoint", "upstream_request_id", "=call__session_id")
    ordering = ("-call_id", "number")
    list_select_related = ("call",)
