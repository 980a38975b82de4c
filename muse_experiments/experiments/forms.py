"""Admin forms for product managers: percentages in, shares out; every rule as a form error.

The forms validate with the same functions the services use
(:func:`~.services.rules.validate_experiment_fields`, :func:`~.services.variants.validate_variants`,
``validation.*_errors``), so a configuration the admin accepts is one the service accepts; the
admin then saves through the services (see :mod:`muse_experiments.experiments.admin.experiments`).
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from muse_experiments.api.base import MAX_JSON_DEPTH, depth_exceeds

from . import selectors
from .audit_text import describe_changes
from .models import Experiment, ExperimentStatus, ForcedAssignment, PlatformConfig, Variant
from .services.edits import (
    ChangePlan,
    EditConflict,
    experiment_change_plan,
    experiment_lock,
    shadow_source_problems,
)
from .services.forced import ForcedInput
from .services.layers import MAX_HOLDOUT_SHARE
from .services.rules import DRAFT_ONLY_FIELDS, EDITABLE_FIELDS, validate_experiment_fields
from .services.variants import VariantInput, validate_variants
from .validation import condition_errors, overrides_errors, unit_id_problem


def endpoint_label(endpoint: Any) -> str:
    """``version label — provider kind — enabled|disabled`` (``avocado-v14 — Native … — enabled``;
    the public id when there is no label; disabled when the endpoint or its provider is switched
    off), for the model picker. The public id shows on hover (:class:`EndpointSelect`)."""
    provider = endpoint.provider
    if not provider.enabled:
        state = "disabled (provider off)"
    else:
        state = "enabled" if endpoint.enabled else "disabled"
    return f"{endpoint.version_label or endpoint.public_id} — {provider.get_kind_display()} — {state}"


class EndpointSelect(forms.Select):
    """The model picker: each option carries the model's public id as its hover title."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex=subindex, attrs=attrs)
        instance = getattr(value, "instance", None)
        if instance is not None:
            option["attrs"]["title"] = instance.public_id
        return option


class BoundedJSONField(forms.JSONField):
    """A JSON form field that turns absurd nesting into a form error instead of a crash."""

    def to_python(self, value):
        try:
            data = super().to_python(value)
        except RecursionError:
            raise ValidationError("JSON is nested too deeply.", code="invalid") from None
        if depth_exceeds(data, MAX_JSON_DEPTH):
            raise ValidationError(f"JSON is nested deeper than {MAX_JSON_DEPTH} levels.", code="invalid")
        return data

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # re-display the submitted text as it was
            return forms.fields.InvalidJSONInput(data)


class EndpointChoiceField(forms.ModelChoiceField):
    """Model picker that shows provider and kill-switch state next to each model."""

    def label_from_instance(self, obj: Any) -> str:
        return endpoint_label(obj)


class FiniteFloatField(forms.FloatField):
    """A float field whose error for NaN/±inf says so (Django's says "Enter a number.")."""

    def to_python(self, value: Any) -> float | None:
        if isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise ValidationError("Enter a finite number (not NaN or infinity).", code="invalid")
        number = super().to_python(value)
        if number is not None and not math.isfinite(number):
            raise ValidationError("Enter a finite number (not NaN or infinity).", code="invalid")
        return number


class PercentField(FiniteFloatField):
    """A share in [0, 1] entered and shown as a percentage (0–100), like variant weights: the form
    shows ``share × 100`` and ``cleaned_data`` holds the share."""

    def __init__(self, *, max_percent: float = 100, **kwargs: Any) -> None:
        super().__init__(min_value=0, max_value=max_percent, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return round(value * 100, 6)
        return value

    def clean(self, value: Any) -> float | None:
        number = super().clean(value)
        return None if number is None else number / 100


class MetricListField(forms.CharField):
    """Comma-separated metric names ⇄ a list of names."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return ", ".join(value)
        return value

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return value
        text = super().to_python(value) or ""
        return [part.strip() for part in text.split(",") if part.strip()]


class ExperimentForm(forms.ModelForm):
    """The experiment's own fields. Key, unit type and seed lock once it started."""

    coverage = PercentField(
        label="Coverage (%)",
        initial=1.0,
        help_text="Percent (0–100) of eligible units that enter the experiment.",
    )
    layer_start = PercentField(
        label="Layer range start (%)",
        initial=0.0,
        help_text="Start (0–100 %) of this experiment's slice of the layer.",
    )
    layer_end = PercentField(
        label="Layer range end (%)", initial=1.0, help_text="End (0–100 %, exclusive) of the slice."
    )
    condition = BoundedJSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text='GrowthBook condition on request attributes, e.g. {"subagent": "coder", '
        '"client_version": {"$vgte": "2.3.0"}}. Empty means everyone.',
    )
    guardrail_metrics = MetricListField(required=False, help_text="Comma-separated metric names.")
    base_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    confirm_new_phase = forms.BooleanField(
        required=False,
        label="Confirm: start a new phase",
        help_text="A change of weights, coverage, the layer range or the variants of a running or "
        "paused experiment closes the current phase and starts the next (analysis reads one phase). "
        "The save lists the changes and asks for this box first.",
    )

    class Meta:
        model = Experiment
        fields = EDITABLE_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "type" in self.fields:
            self.fields["type"].required = False
        if self.instance.pk:
            self.fields["base_version"].required = True
            self.fields["base_version"].initial = self.instance.version
        if self.instance.pk and self.instance.status != ExperimentStatus.DRAFT:
            for name in DRAFT_ONLY_FIELDS:
                if name in self.fields:
                    self.fields[name].disabled = True
                    self.fields[name].help_text = "Fixed once the experiment started."

    def clean_type(self) -> str:
        """Omitted (older forms, scripts): an A/B test."""
        return self.cleaned_data.get("type") or "ab"

    def clean_bandit(self) -> Any:
        bandit = self.cleaned_data.get("bandit")
        return {} if bandit in (None, "") else bandit

    def clean_condition(self) -> Any:
        condition = self.cleaned_data.get("condition")
        condition = {} if condition in (None, "") else condition
        errors = condition_errors(condition)
        if errors:
            raise ValidationError(errors)
        return condition

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk and data.get("base_version") is not None:
            # Lock the row for the rest of the admin's transaction: no save can slip in between this
            # check and ours (optimistic concurrency; the service checks the same version again).
            try:
                experiment_lock(experiment=self.instance, expected_version=data["base_version"])
            except EditConflict as exc:
                self.add_error(None, exc.message_dict["version"])
        if self.errors:
            return data
        values = {name: data.get(name) for name in EDITABLE_FIELDS}
        values["condition"] = values["condition"] or {}
        values["guardrail_metrics"] = values["guardrail_metrics"] or []
        try:
            validate_experiment_fields(values, exclude_id=self.instance.pk)
        except ValidationError as exc:
            for name, messages in exc.message_dict.items():
                self.add_error(name if name in self.fields else None, messages)
        return data


class VariantForm(forms.ModelForm):
    """A variant row: the weight is entered as a percentage (0–100) and stored as a share."""

    weight_percent = FiniteFloatField(
        label="Weight (%)", min_value=0, max_value=100, help_text="Percent of the experiment's traffic."
    )
    overrides = BoundedJSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 28}),
        help_text='e.g. {"reasoning_effort": "low", "temperature": 0.2}',
    )

    class Meta:
        model = Variant
        fields = ("key", "name", "weight_percent", "endpoint", "is_control", "overrides")
        field_classes = {"endpoint": EndpointChoiceField}
        widgets = {"endpoint": EndpointSelect}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["weight_percent"] = round(self.instance.weight * 100, 6)
        self.fields["endpoint"].queryset = self.fields["endpoint"].queryset.select_related("provider")

    def clean_overrides(self) -> Any:
        overrides = self.cleaned_data.get("overrides")
        overrides = {} if overrides in (None, "") else overrides
        errors = overrides_errors(overrides)
        if errors:
            raise ValidationError(errors)
        return overrides

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("weight_percent") is not None:
            data["weight"] = data["weight_percent"] / 100
            self.instance.weight = data["weight"]
        return data


class VariantFormSet(BaseInlineFormSet):
    """The variant set as a whole: weights sum to 100 %, exactly one control, (for a running
    experiment) every model enabled, and no variant deleted or re-keyed while a shadow test that
    is not stopped mirrors it. Errors show above the variants table."""

    def variant_inputs(self) -> list[VariantInput]:
        """The submitted variants as service inputs (call after ``is_valid()``)."""
        rows = [f for f in self.forms if f.cleaned_data and not self._should_delete_form(f)]
        return [
            VariantInput(
                key=f.cleaned_data["key"],
                name=f.cleaned_data.get("name", ""),
                weight=f.cleaned_data["weight"],
                endpoint=f.cleaned_data["endpoint"],
                is_control=f.cleaned_data.get("is_control", False),
                overrides=f.cleaned_data.get("overrides") or {},
                id=f.instance.pk,
            )
            for f in rows
        ]

    def removed_keys(self) -> list[str]:
        """Keys (as stored) of the variants whose DELETE box was ticked: the only ones removed."""
        pks = [f.instance.pk for f in self.initial_forms if f.instance.pk and self._should_delete_form(f)]
        return list(Variant.objects.filter(pk__in=pks).values_list("key", flat=True))

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        running = self.instance.pk is not None and self.instance.status == ExperimentStatus.RUNNING
        try:
            validate_variants(self.variant_inputs(), require_enabled=running)
            plan = self.change_plan()
        except ValidationError as exc:
            raise ValidationError([m for msgs in exc.message_dict.values() for m in msgs]) from None
        problems = shadow_source_problems(self.instance, plan) if plan is not None else []
        if problems:
            raise ValidationError(problems)
        if plan is not None and plan.opens_phase and not self.data.get("confirm_new_phase"):
            stored = Experiment.objects.get(pk=self.instance.pk)
            raise ValidationError(
                [
                    f"Not saved yet: this save closes phase {stored.phase} and starts phase "
                    f"{stored.phase + 1}; exposures so far stay with phase {stored.phase}. Tick "
                    "“Confirm: start a new phase” and save again to apply:",
                    *describe_changes(plan.changes, models=selectors.model_labels()),
                ],
                code="confirm_new_phase",
            )

    def change_plan(self) -> ChangePlan | None:
        """What saving would change (None for a new experiment); the form's edits are already on
        ``self.instance`` when the admin validates the formsets."""
        if self.instance.pk is None:
            return None
        stored = Experiment.objects.get(pk=self.instance.pk)
        fields = {name: getattr(self.instance, name) for name in EDITABLE_FIELDS}
        return experiment_change_plan(
            experiment=stored, variants=self.variant_inputs(), removed=self.removed_keys(), **fields
        )


class UnitIdFormField(forms.CharField):
    """A session or user id, kept exactly as typed (no trimming) and checked with the one unit id
    rule (:func:`unit_id_problem`), as the API checks it."""

    def __init__(self, **kwargs):
        super().__init__(max_length=200, strip=False, **kwargs)

    def clean(self, value):
        value = super().clean(value)
        problem = unit_id_problem(value) if value else None
        if problem:
            raise ValidationError(problem)
        return value


class ForcedAssignmentForm(forms.ModelForm):
    """A QA pin: this unit id always gets this variant (excluded from analysis). The id is kept
    exactly as typed and checked with the one unit id rule (:func:`unit_id_problem`)."""

    class Meta:
        model = ForcedAssignment
        fields = ("unit_id", "variant", "note")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["unit_id"] = UnitIdFormField(help_text=self.fields["unit_id"].help_text)


class ForcedAssignmentFormSet(BaseInlineFormSet):
    def pins(self) -> list[ForcedInput]:
        """The submitted pins as service inputs (call after ``is_valid()``)."""
        return [
            ForcedInput(
                unit_id=f.cleaned_data["unit_id"],
                variant_key=f.cleaned_data["variant"].key,
                note=f.cleaned_data.get("note", ""),
            )
            for f in self.forms
            if f.cleaned_data and not self._should_delete_form(f)
        ]


class PlatformConfigForm(forms.ModelForm):
    """The global holdout: a share (0–0.5) of users that no experiment touches."""

    holdout_share = PercentField(
        label="Holdout share (%)",
        max_percent=MAX_HOLDOUT_SHARE * 100,
        help_text="Percent (0–50) of users that no experiment touches; they get the default model.",
    )

    class Meta:
        model = PlatformConfig
        fields = ("holdout_share", "holdout_seed")


class PreviewForm(forms.Form):
    """Input of the "preview assignment" page."""

    session_id = UnitIdFormField(required=False)
    user_id = UnitIdFormField(required=False)
    attributes = BoundedJSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text='Request attributes, e.g. {"subagent": "coder", "tier": "pro", "locale": "en-GB"}.',
    )

    def clean_attributes(self) -> dict[str, Any]:
        attributes = self.cleaned_data.get("attributes")
        if attributes in (None, ""):
            return {}
        if not isinstance(attributes, dict):
            raise ValidationError('Attributes must be a JSON object, e.g. {"tier": "pro"}.')
        return attributes

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("session_id") and not data.get("user_id"):
            raise ValidationError("Enter a session id, a user id or both.")
        return data
