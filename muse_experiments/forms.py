"""Admin forms for product managers: percentages in, shares out; every rule as a form error.

The forms validate with the same functions the services use (``services.validate_*``,
``validation.*_errors``), so a configuration the admin accepts is one the service accepts; the
admin then saves through the services (see :mod:`muse_experiments.admin`).
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from . import services
from .api_base import MAX_JSON_DEPTH, depth_exceeds
from .models import Experiment, ExperimentStatus, ForcedAssignment, PlatformConfig, Variant
from .validation import condition_errors, overrides_errors


def endpoint_label(endpoint: Any) -> str:
    """``public_id — provider kind — enabled|disabled`` (disabled when the endpoint or its provider
    is switched off), for the model picker."""
    provider = endpoint.provider
    if not provider.enabled:
        state = "disabled (provider off)"
    else:
        state = "enabled" if endpoint.enabled else "disabled"
    return f"{endpoint.public_id} — {provider.get_kind_display()} — {state}"


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

    coverage = FiniteFloatField(
        min_value=0, max_value=1, initial=1.0, help_text=Experiment._meta.get_field("coverage").help_text
    )
    layer_start = FiniteFloatField(
        min_value=0,
        max_value=1,
        initial=0.0,
        help_text="Start (0–1) of this experiment's slice of the layer.",
    )
    layer_end = FiniteFloatField(
        min_value=0, max_value=1, initial=1.0, help_text="End (0–1, exclusive) of the slice."
    )
    condition = BoundedJSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text='GrowthBook condition on request attributes, e.g. {"subagent": "coder", '
        '"client_version": {"$vgte": "2.3.0"}}. Empty means everyone.',
    )
    guardrail_metrics = MetricListField(required=False, help_text="Comma-separated metric names.")

    class Meta:
        model = Experiment
        fields = services.EDITABLE_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.status != ExperimentStatus.DRAFT:
            for name in services.DRAFT_ONLY_FIELDS:
                if name in self.fields:
                    self.fields[name].disabled = True
                    self.fields[name].help_text = "Fixed once the experiment started."

    def clean_condition(self) -> Any:
        condition = self.cleaned_data.get("condition")
        condition = {} if condition in (None, "") else condition
        errors = condition_errors(condition)
        if errors:
            raise ValidationError(errors)
        return condition

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        values = {name: data.get(name) for name in services.EDITABLE_FIELDS}
        values["condition"] = values["condition"] or {}
        values["guardrail_metrics"] = values["guardrail_metrics"] or []
        try:
            services.validate_experiment_fields(values, exclude_id=self.instance.pk)
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
        widget=forms.Textarea(attrs={"rows": 2, "cols": 40}),
        help_text='e.g. {"reasoning_effort": "low", "temperature": 0.2, "max_output_tokens": 4096, '
        '"allowed_tools": ["search"], "system_prompt_version": "v7"}',
    )

    class Meta:
        model = Variant
        fields = ("key", "name", "weight_percent", "endpoint", "is_control", "overrides")
        field_classes = {"endpoint": EndpointChoiceField}

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
    """The variant set as a whole: weights sum to 100 %, exactly one control, and (for a running
    experiment) every model enabled. Errors show above the variants table."""

    def variant_inputs(self) -> list[services.VariantInput]:
        """The submitted variants as service inputs (call after ``is_valid()``)."""
        rows = [f for f in self.forms if f.cleaned_data and not self._should_delete_form(f)]
        return [
            services.VariantInput(
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

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        running = self.instance.pk is not None and self.instance.status == ExperimentStatus.RUNNING
        try:
            services.validate_variants(self.variant_inputs(), require_enabled=running)
        except ValidationError as exc:
            raise ValidationError([m for msgs in exc.message_dict.values() for m in msgs]) from None


class ForcedAssignmentForm(forms.ModelForm):
    """A QA pin: this unit id always gets this variant (excluded from analysis)."""

    class Meta:
        model = ForcedAssignment
        fields = ("unit_id", "variant", "note")


class ForcedAssignmentFormSet(BaseInlineFormSet):
    def pins(self) -> list[services.ForcedInput]:
        """The submitted pins as service inputs (call after ``is_valid()``)."""
        return [
            services.ForcedInput(
                unit_id=f.cleaned_data["unit_id"],
                variant_key=f.cleaned_data["variant"].key,
                note=f.cleaned_data.get("note", ""),
            )
            for f in self.forms
            if f.cleaned_data and not self._should_delete_form(f)
        ]


class PlatformConfigForm(forms.ModelForm):
    """The global holdout: a share (0–0.5) of users that no experiment touches."""

    holdout_share = FiniteFloatField(
        min_value=0,
        max_value=services.MAX_HOLDOUT_SHARE,
        help_text=PlatformConfig._meta.get_field("holdout_share").help_text,
    )

    class Meta:
        model = PlatformConfig
        fields = ("holdout_share", "holdout_seed")


class PreviewForm(forms.Form):
    """Input of the "preview assignment" page."""

    session_id = forms.CharField(max_length=200, required=False)
    user_id = forms.CharField(max_length=200, required=False)
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
