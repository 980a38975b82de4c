"""API for experiments: list, create, detail, edit (optimistic concurrency) and the assignment preview."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import HasScope
from muse_experiments.api.base import (
    AttributesField,
    FiniteFloatField,
    IdentifierField,
    KeyField,
    StrictSerializer,
)
from muse_experiments.api.keyed import api_actor, field_errors
from muse_experiments.experiments.assignment.specs import REASONS

from .bandit_config import MAX_COST_CAP, MAX_FLOOR, MIN_FLOOR
from .fields import UnitIdField
from .models import Experiment, ExperimentType, UnitType
from .selectors import assignment_preview, model_by_id_or_label
from .services.edits import EditConflict, experiment_create, experiment_update
from .services.variants import VariantInput


class VariantOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    weight = serializers.FloatField()
    is_control = serializers.BooleanField()
    model = serializers.CharField(source="endpoint.public_id")
    overrides = serializers.JSONField()


class ExperimentOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField()
    type = serializers.CharField(help_text='"ab" or "bandit".')
    bandit = serializers.JSONField(help_text="Bandit settings (bandits only; {} otherwise).")
    unit_type = serializers.CharField()
    coverage = serializers.FloatField()
    phase = serializers.IntegerField()
    primary_metric = serializers.CharField()
    guardrail_metrics = serializers.JSONField()
    started_at = serializers.DateTimeField(allow_null=True)
    version = serializers.IntegerField(help_text="Send it back with an edit (PATCH): optimistic concurrency.")
    variants = VariantOutputSerializer(many=True)


class BanditSettingsSerializer(StrictSerializer):
    """A bandit's settings; omitted ones take their defaults (``bandit_config.DEFAULTS``)."""

    metric = serializers.CharField(max_length=100, required=False, help_text="The primary metric.")
    update_every_minutes = serializers.IntegerField(min_value=1, max_value=10_080, required=False)
    explore_minutes = serializers.IntegerField(min_value=0, max_value=43_200, required=False)
    min_weight_per_arm = FiniteFloatField(min_value=MIN_FLOOR, max_value=MAX_FLOOR, required=False)
    stop_when_probability_best = FiniteFloatField(
        min_value=0.5001,
        max_value=0.9999,
        required=False,
        help_text="P(best) at which an arm is declared the winner: it then gets all new units but the "
        "other arms' floors, the experiment keeps running and the weights stop changing.",
    )
    max_cost_usd_per_call = FiniteFloatField(
        min_value=0.0,
        max_value=MAX_COST_CAP,
        required=False,
        allow_null=True,
        help_text="Cost guardrail, USD per call (null: none). An arm credibly above it "
        "(P(cost per call > cap) > 0.95) gets only the floor and cannot win; 0 is refused.",
    )

    def validate_max_cost_usd_per_call(self, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise serializers.ValidationError("Must be above 0 USD per call (null for no cap).")
        return value


def _with_bandit_metric(fields: dict) -> dict:
    """A bandit's metric is the primary metric: ``bandit.metric`` sets it when not given."""
    metric = (fields.get("bandit") or {}).get("metric")
    if metric and "primary_metric" not in fields:
        fields["primary_metric"] = metric
    return fields


def _variant_models(rows: list[dict]) -> dict[str, Any]:
    """``{model as sent: ModelEndpoint}`` for the variants' ``model`` fields, each a public id or a
    version label (as wherever the API names a model). Raises a 400 on ``variants`` with one
    message per model that is unknown or a label several models share
    (:func:`.selectors.model_by_id_or_label`, the wording the rollout API uses)."""
    models, errors = {}, []
    for ref in sorted({r["model"] for r in rows}):
        models[ref], why = model_by_id_or_label(ref)
        if why:
            errors.append(why)
    if errors:
        raise serializers.ValidationError({"variants": errors})
    return models


class ExperimentListApi(APIView):
    """All experiments with their variants (GET, scope ``analytics:read``); create a draft (POST,
    scope ``experiments:write``), an A/B test or a bandit (``"type": "bandit"`` with its
    ``"bandit"`` settings)."""

    required_scope = "analytics:read"

    def get_permissions(self):
        self.required_scope = "experiments:write" if self.request.method == "POST" else "analytics:read"
        return [HasScope()]

    @extend_schema(responses=ExperimentOutputSerializer(many=True))
    def get(self, request):
        qs = Experiment.objects.prefetch_related("variants__endpoint")
        return Response(ExperimentOutputSerializer(qs, many=True).data)

    class InputSerializer(StrictSerializer):
        class VariantSerializer(StrictSerializer):
            key = KeyField(max_length=100)
            name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
            weight = FiniteFloatField(min_value=0.0, max_value=1.0, help_text="Share 0–1 (bandits: any).")
            model = IdentifierField(max_length=200, help_text="Model id or version label.")
            is_control = serializers.BooleanField(required=False, default=False)
            overrides = serializers.DictField(required=False, default=dict)

        key = KeyField(max_length=100)
        name = serializers.CharField(max_length=200)
        type = serializers.ChoiceField(choices=ExperimentType.values, required=False, default="ab")
        bandit = BanditSettingsSerializer(required=False)
        unit_type = serializers.ChoiceField(choices=UnitType.values, required=False, default="session")
        hypothesis = serializers.CharField(required=False, allow_blank=True, default="")
        owner = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        coverage = FiniteFloatField(required=False, min_value=0.0, max_value=1.0, default=1.0)
        condition = serializers.DictField(required=False, default=dict)
        primary_metric = serializers.CharField(max_length=100, required=False)
        guardrail_metrics = serializers.ListField(
            child=serializers.CharField(max_length=100), required=False, default=list
        )
        variants = VariantSerializer(many=True)

    @extend_schema(
        request=InputSerializer,
        responses={201: ExperimentOutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = _with_bandit_metric(dict(data.validated_data))
        rows = fields.pop("variants")
        models = _variant_models(rows)
        variants = [
            VariantInput(
                key=r["key"],
                name=r["name"],
                weight=r["weight"],
                endpoint=models[r["model"]],
                is_control=r["is_control"],
                overrides=r["overrides"],
            )
            for r in rows
        ]
        with field_errors():
            experiment = experiment_create(actor=api_actor(request.user), variants=variants, **fields)
        return Response(_detail(experiment), status=status.HTTP_201_CREATED)


class VariantEditSerializer(StrictSerializer):
    """One variant of an edit. ``name``, ``is_control`` and ``overrides`` keep an existing
    variant's current values when omitted (a new variant: empty name, not control, no overrides)."""

    key = KeyField(max_length=100)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    weight = FiniteFloatField(min_value=0.0, max_value=1.0, help_text="Share 0–1 of the traffic.")
    model = IdentifierField(max_length=200, help_text="Model id or version label.")
    is_control = serializers.BooleanField(required=False, help_text="Omitted: unchanged (new: false).")
    overrides = serializers.DictField(required=False, help_text="Omitted: unchanged (new: none).")
    delete = serializers.BooleanField(
        required=False, default=False, help_text="Remove this variant (only an explicit delete removes one)."
    )


class ExperimentEditSerializer(StrictSerializer):
    version = serializers.IntegerField(
        min_value=1, max_value=2_147_483_647, help_text="The version this edit is based on (from GET)."
    )
    name = serializers.CharField(max_length=200, required=False)
    hypothesis = serializers.CharField(required=False, allow_blank=True)
    owner = serializers.CharField(max_length=200, required=False, allow_blank=True)
    coverage = FiniteFloatField(required=False, min_value=0.0, max_value=1.0, help_text="Share 0–1.")
    layer_start = FiniteFloatField(required=False, min_value=0.0, max_value=1.0)
    layer_end = FiniteFloatField(required=False, min_value=0.0, max_value=1.0)
    condition = serializers.DictField(required=False)
    primary_metric = serializers.CharField(max_length=100, required=False)
    guardrail_metrics = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    type = serializers.ChoiceField(choices=ExperimentType.values, required=False, help_text="Drafts only.")
    bandit = BanditSettingsSerializer(required=False, help_text="The whole bandit settings object.")
    variants = VariantEditSerializer(
        many=True, required=False, help_text="Every variant, each kept or deleted."
    )


def _detail(experiment: Experiment) -> dict:
    experiment = Experiment.objects.prefetch_related("variants__endpoint").get(pk=experiment.pk)
    return ExperimentOutputSerializer(experiment).data


class ExperimentDetailApi(APIView):
    """An experiment with its variants (GET, scope ``analytics:read``) and its edit (PATCH, scope
    ``experiments:write``): the edit carries the ``version`` it was based on and is refused with
    409 when the experiment changed since (the admin uses the same version)."""

    required_scope = "analytics:read"

    def get_permissions(self):
        self.required_scope = "experiments:write" if self.request.method == "PATCH" else "analytics:read"
        return [HasScope()]

    @extend_schema(responses=ExperimentOutputSerializer)
    def get(self, request, key):
        experiment = get_object_or_404(Experiment.objects.prefetch_related("variants__endpoint"), key=key)
        return Response(ExperimentOutputSerializer(experiment).data)

    @extend_schema(
        request=ExperimentEditSerializer,
        responses={
            200: ExperimentOutputSerializer,
            400: OpenApiResponse(description="Field errors"),
            404: OpenApiResponse(description="Unknown experiment"),
            409: OpenApiResponse(description="The experiment changed since `version`: nothing saved"),
        },
    )
    def patch(self, request, key):
        experiment = get_object_or_404(Experiment, key=key)
        data = ExperimentEditSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = _with_bandit_metric(dict(data.validated_data))
        version = fields.pop("version")
        rows = fields.pop("variants", None)
        variants, removed = None, []
        if rows is not None:
            models = _variant_models(rows)
            removed = [r["key"] for r in rows if r["delete"]]
            current = {v.key: v for v in experiment.variants.all()}

            def kept(r: dict, field: str, new_default):
                """The submitted value, else the existing variant's, else the new variant's default."""
                if field in r:
                    return r[field]
                return getattr(current[r["key"]], field) if r["key"] in current else new_default

            variants = [
                VariantInput(
                    key=r["key"],
                    name=kept(r, "name", ""),
                    weight=r["weight"],
                    endpoint=models[r["model"]],
                    is_control=kept(r, "is_control", False),
                    overrides=kept(r, "overrides", {}),
                )
                for r in rows
                if not r["delete"]
            ]
        with field_errors():  # an EditConflict is answered 409 before it could become a 400
            try:
                with transaction.atomic():
                    experiment = experiment_update(
                        experiment=experiment,
                        actor=api_actor(request.user),
                        variants=variants,
                        removed=removed,
                        expected_version=version,
                        **fields,
                    )
            except EditConflict as exc:
                return Response(
                    {
                        "error": {
                            "code": "conflict",
                            "message": exc.message_dict["version"][0],
                            "current_version": exc.current,
                        }
                    },
                    status=status.HTTP_409_CONFLICT,
                )
        return Response(_detail(experiment))


class DecisionOutputSerializer(serializers.Serializer):
    """The engine's Decision: the variant and why (``reason`` plus the per-experiment ``trace``)."""

    experiment = serializers.CharField(source="experiment_key", allow_null=True)
    phase = serializers.IntegerField(allow_null=True)
    variant = serializers.CharField(source="variant_key", allow_null=True)
    model = serializers.CharField(source="endpoint_id", allow_null=True)
    overrides = serializers.DictField()
    in_experiment = serializers.BooleanField()
    reason = serializers.ChoiceField(choices=REASONS)
    trace = serializers.ListField(child=serializers.CharField())
    bucket = serializers.FloatField(allow_null=True)


class AssignmentPreviewApi(APIView):
    """Preview the assignment of a unit: which variant and model it would get now, and why.

    Read-only: records no exposure. ``experiment`` (optional) also evaluates that experiment on
    its own, even when it is a draft or paused.
    """

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    class InputSerializer(StrictSerializer):
        session_id = UnitIdField(required=False, allow_blank=True, default="")
        user_id = UnitIdField(required=False, allow_blank=True, default="")
        attributes = AttributesField(required=False, default=dict)
        experiment = KeyField(max_length=100, required=False)

        def validate(self, data):
            if not data["session_id"] and not data["user_id"]:
                raise serializers.ValidationError({"session_id": ["Give a session_id, a user_id or both."]})
            return data

    class OutputSerializer(serializers.Serializer):
        routing = DecisionOutputSerializer()
        experiment = DecisionOutputSerializer(allow_null=True)
        experiment_error = serializers.CharField(allow_blank=True)
        routing_kill = serializers.DictField(
            allow_null=True,
            help_text="A kill switch on the routing decision's experiment/variant: the unit is served by "
            "the control and not enrolled. {scope, target, reason, since} or null.",
        )
        experiment_kill = serializers.DictField(
            allow_null=True, help_text="The same for the experiment evaluated on its own."
        )

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        experiment = None
        if "experiment" in data.validated_data:
            experiment = Experiment.objects.filter(key=data.validated_data["experiment"]).first()
            if experiment is None:
                raise serializers.ValidationError({"experiment": ["No experiment with this key."]})
        preview = assignment_preview(
            session_id=data.validated_data["session_id"],
            user_id=data.validated_data["user_id"],
            attributes=data.validated_data["attributes"],
            experiment=experiment,
        )
        return Response(self.OutputSerializer(preview).data)
