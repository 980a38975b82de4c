"""REST API for outcome events and experiment results."""

from __future__ import annotations

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api_base import FiniteFloatField, StrictSerializer
from muse_experiments.auth import HasScope
from muse_experiments.models import Experiment

from .events import EventInput, events_record
from .models import ResultSnapshot
from .services import results_compute

MAX_BATCH = 1000


class EventSerializer(StrictSerializer):
    event_id = serializers.CharField(max_length=200, help_text="Client-chosen id; re-posting it is a no-op.")
    name = serializers.RegexField(r"^[A-Za-z0-9_.:-]{1,100}$")
    session_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    user_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    value = FiniteFloatField(required=False, default=1.0)
    timestamp = serializers.DateTimeField(required=False)

    def validate(self, attrs):
        if not attrs["session_id"] and not attrs["user_id"]:
            raise serializers.ValidationError({"session_id": "Give a session_id or a user_id."})
        return attrs


class EventsCreateApi(APIView):
    """Record outcome events, one or a batch of up to 1,000 (idempotent by ``event_id``)."""

    permission_classes = [HasScope]
    required_scope = "events"

    class InputSerializer(StrictSerializer):
        events = EventSerializer(many=True, allow_empty=False, max_length=MAX_BATCH)

    class OutputSerializer(serializers.Serializer):
        accepted = serializers.IntegerField(help_text="Newly stored events")
        duplicates = serializers.IntegerField(help_text="Event ids already stored (ignored)")
        unknown_units = serializers.IntegerField(
            help_text="Events whose unit was never routed (stored anyway)"
        )

    @extend_schema(
        request=InputSerializer,
        responses={201: OutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        payload = request.data
        if isinstance(payload, dict) and "events" not in payload:
            payload = {"events": [payload]}
        data = self.InputSerializer(data=payload)
        data.is_valid(raise_exception=True)
        now = timezone.now()
        events = [
            EventInput(
                event_id=e["event_id"],
                name=e["name"],
                session_id=e["session_id"],
                user_id=e["user_id"],
                value=e["value"],
                occurred_at=e.get("timestamp") or now,
            )
            for e in data.validated_data["events"]
        ]
        with transaction.atomic():
            report = events_record(events=events)
        return Response(self.OutputSerializer(report).data, status=status.HTTP_201_CREATED)


class ResultsApi(APIView):
    """Latest results snapshot of an experiment; ``?refresh=1`` computes a new one first."""

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(
        responses={
            200: serializers.JSONField(),
            404: OpenApiResponse(description="Unknown experiment or no results yet"),
        }
    )
    def get(self, request, key):
        experiment = get_object_or_404(Experiment, key=key)
        if request.query_params.get("refresh") in ("1", "true") and experiment.phase:
            snapshot = results_compute(experiment=experiment)
        else:
            snapshot = ResultSnapshot.objects.filter(experiment=experiment).first()
        if snapshot is None:
            return Response({"error": {"code": "not_found", "message": "No results yet."}}, status=404)
        return Response({"computed_at": snapshot.computed_at, **snapshot.results})
