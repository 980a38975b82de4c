"""Admin for product managers: experiments with inline variants and QA pins, lifecycle buttons,
an assignment preview, and the audit trail.

Every save goes through the services (:mod:`muse_experiments.experiments.services`, inside the
admin's one transaction):
``save_model`` defers, ``save_related`` calls ``experiment_create``/``experiment_update`` and
``forced_assignments_replace`` with the validated form and formsets. Forms validate with the
services' own rules, so invalid configurations come back as form errors.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from .. import selectors
from ..audit_text import describe_changes, percent
from ..forms import (
    ExperimentForm,
    ForcedAssignmentForm,
    ForcedAssignmentFormSet,
    PreviewForm,
    VariantForm,
    VariantFormSet,
)
from ..models import Experiment, ForcedAssignment, Variant
from ..services.edits import experiment_create, experiment_update
from ..services.forced import ForcedInput, forced_assignments_replace
from ..services.lifecycle import (
    experiment_archive,
    experiment_pause,
    experiment_rerandomise,
    experiment_start,
    experiment_stop,
)
from ..services.rules import EDITABLE_FIELDS, LIVE_STATUSES
from .history import AuditHistoryAdmin

LIFECYCLE = {
    "start": (experiment_start, "running"),
    "pause": (experiment_pause, "paused"),
    "stop": (experiment_stop, "stopped"),
    "archive": (experiment_archive, "archived"),
    "rerandomise": (experiment_rerandomise, "re-randomised (new phase, new seed)"),
}


class ExperimentPartInline(admin.TabularInline):
    """Rows edited only as part of their experiment (variants, QA pins): the experiment's own
    permissions apply, not the row model's -- add on the add page, change on the change page,
    view to see them -- as ``PATCH /api/v1/experiments/{key}`` needs ``change_experiment``
    (the way Django treats an auto-created many-to-many table)."""

    def _experiment_perm(self, request: HttpRequest, action: str) -> bool:
        opts = Experiment._meta
        return request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")

    def has_view_permission(self, request, obj=None):
        return self._experiment_perm(request, "view") or self._experiment_perm(request, "change")

    def has_add_permission(self, request, obj):
        return self._experiment_perm(request, "change" if obj is not None else "add")

    def has_change_permission(self, request, obj=None):
        return self._experiment_perm(request, "change" if obj is not None else "add")

    def has_delete_permission(self, request, obj=None):
        return self._experiment_perm(request, "change" if obj is not None else "add")


class VariantInline(ExperimentPartInline):
    model = Variant
    form = VariantForm
    formset = VariantFormSet
    extra = 0
    fields = ("key", "name", "weight_percent", "endpoint", "is_control", "overrides")

    def get_extra(self, request, obj=None, **kwargs):
        return 0 if obj else 2


class ForcedAssignmentInline(ExperimentPartInline):
    model = ForcedAssignment
    form = ForcedAssignmentForm
    formset = ForcedAssignmentFormSet
    extra = 0
    fields = ("unit_id", "variant", "note")
    verbose_name = "QA pin (forced assignment, excluded from analysis)"
    verbose_name_plural = "QA pins (forced assignments, excluded from analysis)"

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        if obj is not None:
            formset.form.base_fields["variant"].queryset = Variant.objects.filter(experiment=obj)
        return formset


@admin.register(Experiment)
class ExperimentAdmin(AuditHistoryAdmin, admin.ModelAdmin):
    form = ExperimentForm
    list_display = (
        "key",
        "name",
        "type",
        "status",
        "unit_type",
        "coverage_percent",
        "phase",
        "layer",
        "started_at",
    )
    list_filter = ("status", "type", "unit_type", "layer")
    search_fields = ("key", "name", "owner")
    readonly_fields = (
        "status",
        "phase",
        "started_at",
        "stopped_at",
        "created_at",
        "updated_at",
        "phase_history",
        "bandit_history",
        "audit_history",
    )
    actions = ["start", "pause", "stop", "archive", "rerandomise"]
    change_form_template = "admin/muse_experiments/experiment/change_form.html"

    def get_fieldsets(self, request, obj=None):
        main = (
            None,
            {
                "fields": (
                    "key",
                    "name",
                    "hypothesis",
                    "owner",
                    "unit_type",
                    "seed",
                    "primary_metric",
                    "guardrail_metrics",
                    "base_version",
                )
            },
        )
        allocation = (
            "Allocation",
            {"fields": ("coverage", "layer", "layer_start", "layer_end", "condition")},
        )
        bandit = (
            "Bandit",
            {
                "fields": ("type", "bandit"),
                "description": "A bandit moves the weights itself (Thompson sampling on the primary "
                'metric). Settings: {"metric", "update_every_minutes", "explore_minutes", '
                '"min_weight_per_arm" (0.01–0.2), "stop_when_probability_best" (e.g. 0.95: the arm '
                "that reaches it is the winner and gets all new units but the others' floors), "
                '"max_cost_usd_per_call" (null, or a cost guardrail in USD: an arm credibly above '
                "it keeps only the floor and cannot win)}; omitted ones take their defaults.",
            },
        )
        if obj is None:
            return [main, allocation, bandit]
        state = (
            "State",
            {"fields": ("status", "phase", "started_at", "stopped_at", "created_at", "updated_at")},
        )
        history = ("History", {"fields": ("phase_history", "bandit_history", "audit_history")})
        if obj.status in LIVE_STATUSES:
            allocation[1]["fields"] = (*allocation[1]["fields"], "confirm_new_phase")
        return [main, allocation, bandit, state, history]

    def get_inlines(self, request, obj):
        return [VariantInline, ForcedAssignmentInline] if obj else [VariantInline]

    # --- saving through the services -----------------------------------------------------------

    def save_model(self, request, obj, form, change):
        """Deferred to :meth:`save_related`, which has the variants too (one service call)."""

    def save_related(self, request, form, formsets, change):
        actor = request.user.get_username()
        variant_formset = next(fs for fs in formsets if isinstance(fs, VariantFormSet))
        fields = {name: form.cleaned_data[name] for name in EDITABLE_FIELDS if name in form.cleaned_data}
        fields["condition"] = fields.get("condition") or {}
        if change:
            experiment = experiment_update(
                experiment=form.instance,
                actor=actor,
                variants=variant_formset.variant_inputs(),
                removed=variant_formset.removed_keys(),
                expected_version=form.cleaned_data["base_version"],
                **fields,
            )
            forced = next((fs for fs in formsets if isinstance(fs, ForcedAssignmentFormSet)), None)
            if forced is not None:
                forced_assignments_replace(
                    experiment=experiment, pins=self._pins(forced, experiment), actor=actor
                )
        else:
            experiment = experiment_create(actor=actor, variants=variant_formset.variant_inputs(), **fields)
        form.instance.pk = experiment.pk
        form.instance.refresh_from_db()

    @staticmethod
    def _pins(formset: ForcedAssignmentFormSet, experiment: Experiment) -> list[ForcedInput]:
        """Pins by variant *row*: a variant renamed in the same save keeps its pins."""
        keys = dict(experiment.variants.values_list("pk", "key"))
        return [
            ForcedInput(
                unit_id=f.cleaned_data["unit_id"],
                variant_key=keys.get(f.cleaned_data["variant"].pk, ""),
                note=f.cleaned_data.get("note", ""),
            )
            for f in formset.forms
            if f.cleaned_data and not formset._should_delete_form(f)
        ]

    def construct_change_message(self, request, form, formsets, add=False):
        return "Saved through the experiment services (see the audit history)."

    # --- read-only panels ------------------------------------------------------------------------

    @admin.display(description="Coverage", ordering="coverage")
    def coverage_percent(self, obj: Experiment) -> str:
        return percent(obj.coverage)

    @admin.display(description="Phases")
    def phase_history(self, obj: Experiment) -> str:
        phases = obj.phases.order_by("-number")
        if not phases:
            return "No phase yet (starts with the first start)."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    p.number,
                    p.get_reason_display(),
                    p.seed,
                    percent(p.coverage),
                    ", ".join(f"{k} {percent(w)}" for k, w in p.weights.items()),
                    _when(p.started_at),
                    _when(p.ended_at) if p.ended_at else "open",
                )
                for p in phases
            ),
        )
        return format_html(
            "<table><thead><tr><th>#</th><th>why</th><th>seed</th><th>coverage</th><th>weights</th>"
            "<th>started</th><th>ended</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="Bandit updates")
    def bandit_history(self, obj: Experiment) -> str:
        updates = obj.bandit_updates.order_by("-slot")[:200]
        if not updates:
            return "No bandit update." if obj.type == "bandit" else "Not a bandit."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    u.at.strftime("%Y-%m-%d %H:%M:%S"),
                    u.decision + (f" ({u.winner})" if u.winner else ""),
                    u.phase,
                    ", ".join(f"{k} {p:.3f}" for k, p in u.probability_best.items()),
                    ", ".join(f"{k} {percent(w)}" for k, w in u.weights.items()),
                    ", ".join(f"{k} {n}" for k, n in u.units.items()),
                )
                for u in updates
            ),
        )
        return format_html(
            "<table><thead><tr><th>when (UTC)</th><th>decision</th><th>phase</th><th>P(best)</th>"
            "<th>weights</th><th>units</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="Audit history")
    def audit_history(self, obj: Experiment) -> str:
        entries = selectors.experiment_audit_history(obj)
        if not entries:
            return "No changes recorded."
        models = selectors.model_labels()
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><ul>{}</ul></td></tr>",
            (
                (
                    e.at.strftime("%Y-%m-%d %H:%M:%S"),
                    e.actor,
                    e.action,
                    format_html_join(
                        "", "<li>{}</li>", ((line,) for line in describe_changes(e.changes, models=models))
                    ),
                )
                for e in entries
            ),
        )
        return format_html(
            '<table class="audit-history"><thead><tr><th>when (UTC)</th><th>who</th><th>action</th>'
            "<th>what changed (before → after)</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    # --- lifecycle: list actions and change-page buttons ------------------------------------------

    def _lifecycle(self, request: HttpRequest, experiment: Experiment, action: str) -> None:
        service, verb = LIFECYCLE[action]
        try:
            service(experiment=experiment, actor=request.user.get_username())
        except ValidationError as exc:
            self.message_user(request, f"{experiment.key}: {'; '.join(exc.messages)}", messages.ERROR)
        else:
            self.message_user(request, f"{experiment.key}: {verb}.", messages.SUCCESS)
            if action == "start":
                self._warn_about_competitors(request, experiment)

    def _warn_about_competitors(self, request: HttpRequest, experiment: Experiment) -> None:
        """One call is served by one model: the oldest running experiment that includes a unit decides.
        Say which running experiments may take this one's traffic first."""
        earlier = selectors.running_experiments_evaluated_before(experiment=experiment)
        if earlier:
            self.message_user(
                request,
                f"{experiment.key}: running experiments evaluated first may take its traffic: "
                f"{', '.join(e.key for e in earlier)}. Separate them with targeting, or put them in one "
                "layer with disjoint ranges.",
                messages.WARNING,
            )

    @admin.action(description="Start (or resume) selected experiments", permissions=["change"])
    def start(self, request, queryset):
        for experiment in queryset:
            self._lifecycle(request, experiment, "start")

    @admin.action(description="Pause selected experiments", permissions=["change"])
    def pause(self, request, queryset):
        for experiment in queryset:
            self._lifecycle(request, experiment, "pause")

    @admin.action(description="Stop selected experiments", permissions=["change"])
    def stop(self, request, queryset):
        for experiment in queryset:
            self._lifecycle(request, experiment, "stop")

    @admin.action(description="Archive selected experiments", permissions=["change"])
    def archive(self, request, queryset):
        for experiment in queryset:
            self._lifecycle(request, experiment, "archive")

    @admin.action(
        description="Re-randomise selected experiments (new phase, new seed)", permissions=["change"]
    )
    def rerandomise(self, request, queryset):
        for experiment in queryset:
            self._lifecycle(request, experiment, "rerandomise")

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "<path:object_id>/preview/",
                self.admin_site.admin_view(self.preview_view),
                name=f"{prefix}_preview",
            ),
            path(
                "<path:object_id>/lifecycle/<slug:action>/",
                self.admin_site.admin_view(self.lifecycle_view),
                name=f"{prefix}_lifecycle",
            ),
            *super().get_urls(),
        ]

    def _experiment_or_404(self, request: HttpRequest, object_id: str) -> Experiment:
        """The experiment, or 404 for a missing or malformed id (``get_object`` copes with both)."""
        experiment = self.get_object(request, object_id)
        if experiment is None:
            raise Http404("No such experiment.")
        return experiment

    def lifecycle_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """POST-only button target: runs one lifecycle service, then back to the change page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        experiment = self._experiment_or_404(request, object_id)
        if not self.has_change_permission(request, experiment) or action not in LIFECYCLE:
            raise PermissionDenied
        self._lifecycle(request, experiment, action)
        return HttpResponseRedirect(reverse("admin:muse_experiments_experiment_change", args=[experiment.pk]))

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """ "Preview assignment for this unit id": the engine's decision and its reason trace."""
        experiment = self._experiment_or_404(request, object_id)
        if not self.has_view_permission(request, experiment):
            raise PermissionDenied
        form = PreviewForm(request.GET or None)
        preview = None
        if form.is_valid():
            preview = selectors.assignment_preview(
                session_id=form.cleaned_data["session_id"],
                user_id=form.cleaned_data["user_id"],
                attributes=form.cleaned_data["attributes"],
                experiment=experiment,
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": experiment,
            "title": f"Preview assignment: {experiment.key}",
            "form": form,
            "preview": preview,
            "sticky": {f"{e}:{p}": v for (e, p), v in preview.sticky.items()} if preview else {},
            "model_labels": _preview_model_labels(preview),
        }
        return TemplateResponse(request, "admin/muse_experiments/experiment/preview.html", context)


def _when(moment: datetime) -> str:
    """``2026-12-04 14:03 UTC``: in the reporting time zone, named, as the admin lists show dates."""
    return date_format(localtime(moment), "DATETIME_FORMAT")


def _preview_model_labels(preview: Any) -> dict[str, str]:
    """Version labels of the models a preview names (``routing``/``experiment`` → label)."""
    if preview is None:
        return {}
    labels = selectors.model_labels()
    out = {}
    for name in ("routing", "experiment"):
        decision = getattr(preview, name, None)
        model = getattr(decision, "endpoint_id", None) if decision is not None else None
        if model:
            out[name] = labels.get(model, model)
    return out
