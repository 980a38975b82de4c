"""Admin for shadow tests: configure (draft only), start and stop (:mod:`..services.shadow`),
and their recorded pairs, read-only."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

from muse_experiments.infra.admin_base import ReadOnlyAdmin

from ..models import ShadowPair, ShadowStatus, ShadowTest
from ..services.shadow import shadow_model_problems, shadow_test_start, shadow_test_stop


class ShadowTestForm(forms.ModelForm):
    class Meta:
        model = ShadowTest
        fields = (
            "key",
            "name",
            "candidate",
            "source_model",
            "source_experiment",
            "source_variant",
            "sample_percent",
            "judge",
            "judge_instructions",
            "max_usd_per_day",
            "allow_external",
        )

    def clean(self):
        data = super().clean()
        model, experiment = data.get("source_model"), data.get("source_experiment")
        source_endpoint = model
        if (model is None) == (experiment is None):
            raise ValidationError("Choose a source model, or a source experiment and its variant.")
        if experiment is not None:
            variant = experiment.variants.filter(key=data.get("source_variant", "")).first()
            if variant is None:
                self.add_error("source_variant", "The experiment has no such variant.")
            else:
                source_endpoint = variant.endpoint
        problems = shadow_model_problems(
            candidate=data.get("candidate"),
            source_endpoint=source_endpoint,
            judge=data.get("judge"),
            allow_external=bool(data.get("allow_external")),
        )
        for field, message in problems.items():
            self.add_error(field, message)
        return data


@admin.register(ShadowTest)
class ShadowTestAdmin(admin.ModelAdmin):
    form = ShadowTestForm
    list_display = (
        "key",
        "name",
        "status",
        "candidate_name",
        "sample_percent",
        "max_usd_per_day",
        "started_at",
        "results",
    )
    list_filter = ("status",)
    list_select_related = ("candidate",)
    search_fields = ("key", "name")
    actions = ("start_tests", "stop_tests")

    #: Shown on the change page, set only by the start and stop actions.
    STATE_FIELDS = ("status", "started_at", "stopped_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        if obj.status != ShadowStatus.DRAFT:  # configuration is fixed once it has mirrored traffic
            return (*self.STATE_FIELDS, *ShadowTestForm.Meta.fields)
        return self.STATE_FIELDS

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A test that has run is read-only here: no save buttons over fields that cannot change."""
        test = self.get_object(request, object_id)
        if test is not None and test.status != ShadowStatus.DRAFT:
            extra_context = {
                "show_save": False,
                "show_save_and_continue": False,
                "show_save_and_add_another": False,
                **(extra_context or {}),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="Candidate", ordering="candidate__version_label")
    def candidate_name(self, obj: ShadowTest) -> str:
        """The candidate by its version label, its public id on hover."""
        endpoint = obj.candidate
        return format_html(
            '<span class="model" title="{}">{}</span>',
            endpoint.public_id,
            endpoint.version_label or endpoint.public_id,
        )

    @admin.display(description="Results")
    def results(self, obj: ShadowTest) -> str:
        """A link to the test's results page (``/results/shadow/<key>/``)."""
        return format_html('<a href="{}">Results</a>', reverse("shadow-results-page", args=[obj.key]))

    def save_model(self, request, obj, form, change):
        obj.created_by = obj.created_by or request.user.get_username()
        super().save_model(request, obj, form, change)

    @admin.action(description="Start the selected shadow tests")
    def start_tests(self, request, queryset):
        self._each(request, queryset, shadow_test_start)

    @admin.action(description="Stop the selected shadow tests")
    def stop_tests(self, request, queryset):
        self._each(request, queryset, shadow_test_stop)

    def _each(self, request, queryset, action) -> None:
        for test in queryset:
            try:
                action(test=test, actor=request.user.get_username())
            except ValidationError as exc:
                self.message_user(request, f"{test.key}: {'; '.join(exc.messages)}", messages.ERROR)


@admin.register(ShadowPair)
class ShadowPairAdmin(ReadOnlyAdmin):
    list_display = ("test", "session_id", "candidate_ok", "judge_verdict", "created_at")
    list_filter = ("test", "candidate_ok", "judge_verdict")
    exclude = ("candidate_text",)  # a shadow answer is never shown to anyone
