"""Read API for experiments."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .auth import HasScope
from .models import Experiment


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
