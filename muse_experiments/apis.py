"""Read API for experiments: list, detail and the assignment preview."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .api_base import AttributesField, StrictSerializer
from .assignment.engine import REASONS
from .auth import HasScope
from .models import Experiment
from .selectors import assignment_preview


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
    unit_type = serializers.CharField()
    coverage = serializers.FloatField()
    phase = serializers.IntegerField()
    primary_metric = serializers.CharField()
    guardrail_metrics = serializers.JSONField()
    started_at = serializers.DateTimeField(allow_null=True)
    variants = VariantOutputSerializer(many=True)


class ExperimentListApi(APIView):
    """All experiments with their variants."""

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(responses=ExperimentOutputSerializer(many=True))
    def get(self, request):
        qs = Experiment.objects.prefetch_related("variants__endpoint")
        return Response(ExperimentOutputSerializer(qs, many=True).data)


class ExperimentDetailApi(APIView):
    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(responses=ExperimentOutputSerializer)
    def get(self, request, key):
        experiment = get_object_or_404(Experiment.objects.prefetch_related("variants__endpoint"), key=key)
        return Response(ExperimentOutputSerializer(experiment).data)


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
        session_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        user_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        attributes = AttributesField(required=False, default=dict)
        experiment = serializers.SlugField(max_length=100, required=False)

        def validate(self, data):
            if not data["session_id"] and not data["user_id"]:
                raise serializers.ValidationError({"session_id": ["Give a session_id, a user_id or both."]})
            return data

    class OutputSerializer(serializers.Serializer):
        routing = DecisionOutputSerializer()
        experiment = DecisionOutputSerializer(allow_null=True)
        experiment_error = serializers.CharField(allow_blank=True)

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
