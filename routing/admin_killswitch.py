"""Admin for kill switches: pick the target by name (a model by its version label), see each
switch's target by name in the list, and read its history from the audit log.

Saves go through :func:`routing.ops_services.kill_switch_set` (audited, effective cluster-wide
within about a second); the form checks the target with the same rules first, so a bad target is
a form error.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.html import escape, format_html

from muse_experiments.experiments.admin.history import AuditHistoryAdmin
from muse_experiments.experiments.models import Experiment, ExperimentStatus
from muse_experiments.infra.natural_sort import natural_key
from routing.models import KILL_SCOPE_NAMES, KillScope, KillSwitch, ModelEndpoint, Provider
from routing.ops_services import kill_switch_set, kill_switch_validate


def _models_by_label() -> list[tuple[str, str]]:
    """``(public id, version label)`` of every model, in natural label order (v2 before v10)."""
    rows = [
        (pid, label or pid) for pid, label in ModelEndpoint.objects.values_list("public_id", "version_label")
    ]
    return sorted(rows, key=lambda row: (natural_key(row[1]), row[0]))


def kill_target_choices() -> list:
    """Grouped ``<select>`` choices for a kill switch's target, each shown by its name: models by
    version label, providers by key, live experiments (``key — name``) and their variants
    (``experiment / variant (model label)``). The values are what the switch stores. Four queries."""
    labels = dict(_models_by_label())
    experiments = (
        Experiment.objects.exclude(status=ExperimentStatus.ARCHIVED)
        .prefetch_related("variants__endpoint")
        .order_by("key")
    )
    variants = [
        (
            f"{e.key}/{v.key}",
            f"{e.key} / {v.key} ({labels.get(v.endpoint.public_id, v.endpoint.public_id)}"
            f"{', control' if v.is_control else ''})",
        )
        for e in experiments
        for v in e.variants.all()
    ]
    return [
        ("", "— none (all external providers) —"),
        ("Models", list(labels.items())),
        ("Providers", [(k, k) for k in Provider.objects.order_by("key").values_list("key", flat=True)]),
        ("Experiments", [(e.key, f"{e.key} — {e.name}" if e.name != e.key else e.key) for e in experiments]),
        ("Variants", variants),
    ]


class KillSwitchForm(forms.ModelForm):
    """Scope, target, on/off and a required reason. The target is picked from a list of names
    (:func:`kill_target_choices`); a typed value (a model's public id or version label, a provider
    or experiment key, ``<experiment key>/<variant key>``) is accepted too, as the API accepts it.
    It is checked against the catalogue and experiments (form errors, nothing saved, on a bad
    target). Killing a control variant needs ``control_traffic_to`` naming the platform default
    (see :func:`routing.ops_services.kill_switch_validate`)."""

    control_traffic_to = forms.CharField(
        required=False,
        label="Control traffic to",
        help_text="Only when killing an experiment's control variant: the platform default model, "
        "confirming that its units go there.",
    )

    class Meta:
        model = KillSwitch
        fields = ("scope", "target", "active", "reason")
        help_texts = {
            # The admin renders help text as HTML: escape it, or "<experiment key>" vanishes as a tag.
            "target": escape(
                "Empty for all external providers; otherwise the model, provider, experiment or "
                "<experiment key>/<variant key> to switch off."
            ),
            "reason": "Why (recorded in the audit log).",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "target" in self.fields:
            self.fields["target"].widget = forms.Select(choices=kill_target_choices())
        self.fields["control_traffic_to"].widget = forms.Select(choices=[("", "—"), *_models_by_label()])

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


class ScopeFilter(admin.SimpleListFilter):
    """The scope by its short name (the choices' labels explain the target, for the form)."""

    title = "scope"
    parameter_name = "scope"

    def lookups(self, request, model_admin):
        return list(KILL_SCOPE_NAMES.items())

    def queryset(self, request, queryset):
        return queryset.filter(scope=self.value()) if self.value() else queryset


@admin.register(KillSwitch)
class KillSwitchAdmin(AuditHistoryAdmin, admin.ModelAdmin):
    form = KillSwitchForm
    list_display = (
        "scope_name",
        "target_shown",
        "active",
        "active_since",
        "reason",
        "updated_by",
        "updated_at",
    )
    list_filter = (ScopeFilter, "active")
    search_fields = ("target", "reason", "updated_by")
    readonly_fields = ("active_since", "updated_by", "updated_at", "created_at")

    def get_queryset(self, request):
        label = ModelEndpoint.objects.filter(public_id=OuterRef("target")).values("version_label")[:1]
        return super().get_queryset(request).annotate(target_label=Coalesce(Subquery(label), Value("")))

    def get_fields(self, request, obj=None):
        if obj is None:
            return super().get_fields(request, obj)
        # Scope and target identify a switch; to switch something else, add a new one.
        return ("scope", "target_shown", "active", "reason", "control_traffic_to", *self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "scope", "target", "target_shown") if obj else self.readonly_fields

    @admin.display(description="Scope", ordering="scope")
    def scope_name(self, obj: KillSwitch) -> str:
        return KILL_SCOPE_NAMES.get(obj.scope, obj.scope)

    @admin.display(description="Target", ordering="target")
    def target_shown(self, obj: KillSwitch) -> str:
        name = obj.target_name
        if name == obj.target:
            return name or "—"
        return format_html('<span title="{}">{}</span>', obj.target, name)

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
