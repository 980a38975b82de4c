"""API for progressive rollouts: create, read, start, pause, roll back (one view per operation).

Writes need scope ``experiments:write``, reads ``analytics:read``. Bad input is a 400 with field
errors (unknown model, steps not increasing or not ending at 100, a step that is not a JSON
number, an unknown guardrail or one named twice); an illegal transition (e.g. starting a
rolled-back rollout) is a 400 on ``state``.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import HasScope
from muse_experiments.api.base import IdentifierField, KeyField, StrictSerializer
from muse_experiments.api.keyed import KeyedTransitionApi, api_actor, field_errors

from .models import Rollout, key_validator
from .selectors import model_by_id_or_label
from .services.rollouts import (
    rollout_create,
    rollout_pause,
    rollout_roll_back,
    rollout_start,
    rollout_steps_errors,
)


class RolloutEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    from_percent = serializers.FloatField()
    to_percent = serializers.FloatField()
    reason = serializers.CharField()
    message = serializers.CharField()
    actor = serializers.CharField()
    evidence = serializers.JSONField()


class RolloutOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    experiment = serializers.CharField(source="experiment.key")
    model = serializers.CharField(source="candidate.public_id")
    replaces = serializers.CharField(source="current.public_id")
    state = serializers.CharField(help_text="draft | running | paused | rolled_back | completed")
    step = serializers.IntegerField(help_text="Index into steps.")
    percent = serializers.FloatField(help_text="Percent of units on the candidate now.")
    steps = serializers.JSONField()
    step_min_minutes = serializers.IntegerField()
    step_min_units = serializers.IntegerField()
    guardrails = serializers.JSONField()
    step_started_at = serializers.DateTimeField(allow_null=True)
    last_checked_at = serializers.DateTimeField(allow_null=True)
    history = RolloutEventSerializer(many=True)


def _detail(rollout: Rollout) -> dict:
    rollout = (
        Rollout.objects.select_related("experiment", "candidate", "current")
        .prefetch_related("history")
        .get(pk=rollout.pk)
    )
    return RolloutOutputSerializer(rollout).data


class RolloutCreateApi(APIView):
    """Create a rollout (draft): ``model`` (the candidate) replaces ``replaces`` step by step."""

    permission_classes = [HasScope]
    required_scope = "experiments:write"

    class InputSerializer(StrictSerializer):
        key = KeyField(max_length=100, validators=[key_validator])
        model = IdentifierField(max_length=200, help_text="Candidate model id or version label.")
        replaces = IdentifierField(max_length=200, help_text="Current model id or version label.")
        steps = serializers.ListField(child=serializers.FloatField(), default=[1, 5, 25, 50, 100])
        step_min_minutes = serializers.IntegerField(min_value=0, max_value=10080, default=60)
        step_min_units = serializers.IntegerField(min_value=0, max_value=10_000_000, default=100)
        guardrails = serializers.ListField(
            child=serializers.CharField(max_length=100),
            default=["error_rate", "latency_p95_ms", "cost_usd", "task_success"],
        )

        def validate_steps(self, steps):
            errors = rollout_steps_errors(steps)
            if errors:
                raise serializers.ValidationError(errors)
            return steps

    @extend_schema(
        request=InputSerializer,
        responses={201: RolloutOutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        errors, models = {}, {}
        for field in ("model", "replaces"):
            models[field], why = model_by_id_or_label(values[field])
            if why:
                errors[field] = [why]
        if errors:
            raise serializers.ValidationError(errors)
        with field_errors():
            rollout = rollout_create(
                key=values["key"],
                candidate=models["model"],
                current=models["replaces"],
                steps=values["steps"],
                step_min_minutes=values["step_min_minutes"],
                step_min_units=values["step_min_units"],
                guardrails=values["guardrails"],
                actor=api_actor(request.user),
            )
        return Response(_detail(rollout), status=status.HTTP_201_CREATED)


class RolloutDetailApi(APIView):
    """A rollout's state, step, percent and history (every decision with its evidence)."""

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(responses=RolloutOutputSerializer)
    def get(self, request, key):
        return Response(_detail(get_object_or_404(Rollout, key=key)))


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={200: RolloutOutputSerializer, 400: OpenApiResponse(description="Illegal transition")},
    )
)
class _RolloutActionApi(KeyedTransitionApi):
    model = Rollout

    def payload(self, rollout):
        return _detail(rollout)


class RolloutStartApi(_RolloutActionApi):
    """Start a draft rollout at its first step, or resume a paused one."""

    def transition(self, rollout, actor):
        return rollout_start(rollout=rollout, actor=actor)


class RolloutPauseApi(_RolloutActionApi):
    """Hold the current step (guardrails are still checked; a breach still rolls back)."""

    def transition(self, rollout, actor):
        return rollout_pause(rollout=rollout, actor=actor)


class RolloutRollbackApi(_RolloutActionApi):
    """Roll back to 0 % now (every unit on the current model)."""

    def transition(self, rollout, actor):
        return rollout_roll_back(
            rollout=rollout, actor=actor, reason="rolled_back_manual", message=f"rolled back by {actor}"
        )
