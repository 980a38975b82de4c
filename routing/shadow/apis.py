"""REST API for shadow tests: create (draft), list, detail, start, stop.

``POST /api/v1/shadow-tests`` and the start/stop actions need scope ``experiments:write``; the
reads need ``analytics:read``. Field errors are 400s (``{"field": ["message"]}``). The results
and their export: :mod:`routing.shadow.results_apis`.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import HasScope
from muse_experiments.api.base import FiniteFloatField, IdentifierField, KeyField, StrictSerializer
from muse_experiments.api.keyed import KeyedTransitionApi, api_actor, field_errors
from muse_experiments.experiments.models import ShadowTest, key_validator
from muse_experiments.experiments.services.shadow import (
    shadow_test_config,
    shadow_test_create,
    shadow_test_start,
    shadow_test_stop,
)

from .budget import spent_usd_today


class SourceSerializer(StrictSerializer):
    model = IdentifierField(max_length=200, required=False, help_text="Model id or version label.")
    experiment = KeyField(max_length=100, required=False)
    variant = KeyField(max_length=100, required=False)

    def validate(self, attrs):
        if ("model" in attrs) == ("experiment" in attrs) or ("experiment" in attrs) != ("variant" in attrs):
            raise serializers.ValidationError('Send {"model"} or {"experiment", "variant"}.')
        return attrs


class JudgeSerializer(StrictSerializer):
    model = IdentifierField(max_length=200, help_text="Model id or version label.")
    instructions = serializers.CharField(max_length=4000, required=False, allow_blank=True, default="")


class ShadowTestInputSerializer(StrictSerializer):
    key = KeyField(max_length=100, validators=[key_validator])
    name = serializers.CharField(max_length=200)
    candidate = IdentifierField(max_length=200, help_text="Model id or version label.")
    source = SourceSerializer()
    sample_percent = FiniteFloatField(min_value=0.0, max_value=100.0)
    judge = JudgeSerializer(allow_null=True, required=False, default=None)
    max_usd_per_day = serializers.DecimalField(max_digits=14, decimal_places=6, min_value=0)
    allow_external = serializers.BooleanField(required=False, default=False)


class ShadowTestOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField()
    candidate = serializers.CharField()
    source = serializers.JSONField()
    sample_percent = serializers.FloatField()
    judge = serializers.JSONField(allow_null=True)
    max_usd_per_day = serializers.FloatField()
    allow_external = serializers.BooleanField()
    spent_usd_today = serializers.FloatField(help_text="Candidate and judge calls today (UTC), USD.")
    started_at = serializers.DateTimeField(allow_null=True)
    stopped_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


def shadow_payload(test: ShadowTest) -> dict:
    """The public view of a test: its configuration, status and today's spend."""
    return ShadowTestOutputSerializer(
        {**shadow_test_config(test), "spent_usd_today": spent_usd_today(test.key)}
    ).data


def _tests():
    return ShadowTest.objects.select_related("candidate", "judge", "source_model", "source_experiment")


class ShadowTestListApi(APIView):
    """List shadow tests (GET, ``analytics:read``) or create one in draft (POST, ``experiments:write``)."""

    required_scope = "analytics:read"

    def get_permissions(self):
        self.required_scope = "experiments:write" if self.request.method == "POST" else "analytics:read"
        return [HasScope()]

    @extend_schema(responses=ShadowTestOutputSerializer(many=True))
    def get(self, request):
        return Response([shadow_payload(t) for t in _tests()])

    @extend_schema(
        request=ShadowTestInputSerializer,
        responses={201: ShadowTestOutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        data = ShadowTestInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        d = data.validated_data
        with field_errors():
            test = shadow_test_create(
                key=d["key"],
                name=d["name"],
                candidate=d["candidate"],
                source=d["source"],
                sample_percent=d["sample_percent"],
                judge=d["judge"],
                max_usd_per_day=d["max_usd_per_day"],
                allow_external=d["allow_external"],
                actor=api_actor(request.user),
            )
        return Response(shadow_payload(_tests().get(pk=test.pk)), status=status.HTTP_201_CREATED)


class ShadowTestDetailApi(APIView):
    """One shadow test: configuration, status, ``spent_usd_today``."""

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(responses={200: ShadowTestOutputSerializer, 404: OpenApiResponse(description="Unknown")})
    def get(self, request, key):
        return Response(shadow_payload(get_object_or_404(_tests(), key=key)))


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={
            200: ShadowTestOutputSerializer,
            400: OpenApiResponse(description="Not allowed in this status"),
            404: OpenApiResponse(description="Unknown shadow test"),
        },
    )
)
class _ShadowTestActionApi(KeyedTransitionApi):
    model = ShadowTest

    def payload(self, test):
        return shadow_payload(_tests().get(pk=test.pk))


class ShadowTestStartApi(_ShadowTestActionApi):
    """Start mirroring (draft or stopped → running)."""

    def transition(self, test, actor):
        return shadow_test_start(test=test, actor=actor)


class ShadowTestStopApi(_ShadowTestActionApi):
    """Stop mirroring (running → stopped); recorded pairs stay."""

    def transition(self, test, actor):
        return shadow_test_stop(test=test, actor=actor)
