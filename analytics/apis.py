"""REST API for outcome events and experiment results."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta

from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api_base import FiniteFloatField, StrictSerializer, UnitIdField
from muse_experiments.auth import HasScope
from muse_experiments.models import Experiment

from .events import EventInput, events_record
from .models import ResultSnapshot, SnapshotTrigger
from .result_schema import ResultsSnapshotSchema
from .rollups import call_rollup_refresh
from .selectors import snapshot_latest
from .services import results_compute
from .tasks import compute_results

MAX_BATCH = 1000
#: How far ahead of the server clock an event's timestamp may be.
MAX_CLOCK_SKEW = timedelta(days=1)


class EventSerializer(StrictSerializer):
    event_id = serializers.CharField(max_length=200, help_text="Client-chosen id; re-posting it is a no-op.")
    name = serializers.RegexField(r"^[A-Za-z0-9_.:-]{1,100}$")
    session_id = UnitIdField(required=False, allow_blank=True, default="")
    user_id = UnitIdField(required=False, allow_blank=True, default="")
    value = FiniteFloatField(required=False, default=1.0)
    timestamp = serializers.DateTimeField(required=False, help_text="When it happened; at most 1 day ahead.")

    def validate_timestamp(self, value):
        if value > timezone.now() + MAX_CLOCK_SKEW:
            raise serializers.ValidationError("Timestamp is in the future.")
        return value

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


ANALYSIS_CHOICES = ("itt", "served")
MAX_WAIT_S = 30.0


def _snapshot_payload(snapshot: ResultSnapshot, analysis: str) -> dict:
    """The snapshot's results as served: top level is the chosen analysis (``itt`` default)."""
    results = dict(snapshot.results)
    if analysis == "served":
        served = results.get("analyses", {}).get("served", {})
        results.update(served)
        results["analysis"] = "served"
    return {
        "snapshot_id": snapshot.pk,
        "computed_at": snapshot.computed_at,
        "trigger": snapshot.trigger,
        "duration_ms": snapshot.duration_ms,
        **results,
    }


def _not_found(message: str) -> Response:
    return Response({"error": {"code": "not_found", "message": message}}, status=status.HTTP_404_NOT_FOUND)


class ResultsApi(APIView):
    """Latest results snapshot of an experiment phase.

    ``?phase=N`` (default: the current phase), ``?analysis=itt|served`` (intent-to-treat by assigned
    variant, the default, or only units served as assigned), ``?request_id=<uuid>`` (the snapshot a
    ``POST …/results/compute`` produced), ``?refresh=1`` (compute synchronously first; small
    experiments only — use ``POST …/results/compute`` otherwise).
    """

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    class QuerySerializer(StrictSerializer):
        phase = serializers.IntegerField(required=False, min_value=1)
        analysis = serializers.ChoiceField(choices=ANALYSIS_CHOICES, required=False, default="itt")
        request_id = serializers.UUIDField(required=False)
        refresh = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        parameters=[QuerySerializer],
        responses={
            200: ResultsSnapshotSchema,
            400: OpenApiResponse(description="Field errors"),
            404: OpenApiResponse(description="Unknown experiment or no results yet"),
        },
    )
    def get(self, request, key):
        experiment = get_object_or_404(Experiment, key=key)
        query = self.QuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = query.validated_data
        if q.get("request_id"):
            snapshot = ResultSnapshot.objects.filter(
                experiment=experiment, request_id=q["request_id"]
            ).first()
            if snapshot is None:
                return _not_found("No snapshot for this request yet (still computing, or unknown id).")
            return Response(_snapshot_payload(snapshot, q["analysis"]))
        phase = q.get("phase") or experiment.phase
        if not phase:
            return _not_found("The experiment has not started: no results.")
        if q["refresh"]:
            try:
                snapshot = results_compute(experiment=experiment, phase=phase, trigger=SnapshotTrigger.API)
            except ValueError as exc:
                raise serializers.ValidationError({"phase": str(exc)}) from exc
            call_rollup_refresh()  # the dashboards' time series, as fresh as the snapshot
        else:
            snapshot = snapshot_latest(experiment=experiment, phase=phase)
        if snapshot is None:
            return _not_found(f"No results yet for phase {phase}.")
        return Response(_snapshot_payload(snapshot, q["analysis"]))


class ResultsComputeApi(APIView):
    """Ask for a new results snapshot, computed by a Celery task on the ``analytics`` queue.

    Answers ``202`` with ``request_id`` and where to fetch the snapshot
    (``GET …/results?request_id=…``). With ``wait_s`` > 0 it waits up to that long (≤ 30 s) and,
    if the snapshot is ready, answers ``201`` with it.
    """

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    class InputSerializer(StrictSerializer):
        phase = serializers.IntegerField(required=False, min_value=1)
        wait_s = FiniteFloatField(required=False, default=0.0, min_value=0.0, max_value=MAX_WAIT_S)

    class OutputSerializer(serializers.Serializer):
        request_id = serializers.UUIDField()
        status = serializers.CharField(help_text="queued, or done")
        phase = serializers.IntegerField()
        results_url = serializers.CharField()
        snapshot = serializers.JSONField(allow_null=True)

    @extend_schema(
        request=InputSerializer,
        responses={
            202: OutputSerializer,
            201: OutputSerializer,
            400: OpenApiResponse(description="Field errors (e.g. the experiment has not started)"),
            404: OpenApiResponse(description="Unknown experiment"),
        },
    )
    def post(self, request, key):
        experiment = get_object_or_404(Experiment, key=key)
        data = self.InputSerializer(data=request.data if isinstance(request.data, dict) else {})
        data.is_valid(raise_exception=True)
        phase = data.validated_data.get("phase") or experiment.phase
        if not experiment.phase:
            raise serializers.ValidationError(
                {"phase": "The experiment has not started: nothing to compute."}
            )
        if phase > experiment.phase:
            raise serializers.ValidationError(
                {"phase": f"Phase {phase} does not exist (current: {experiment.phase})."}
            )
        request_id = uuid.uuid4()
        transaction.on_commit(
            lambda: compute_results.apply_async(
                args=(experiment.id, phase, SnapshotTrigger.API, str(request_id)), task_id=str(request_id)
            )
        )
        wait_s = data.validated_data["wait_s"]
        snapshot = None
        if wait_s > 0 and not transaction.get_connection().in_atomic_block:
            with contextlib.suppress(CeleryTimeout):  # not done yet: answer 202
                compute_results.AsyncResult(str(request_id)).get(
                    timeout=wait_s, interval=0.05, propagate=False
                )
            snapshot = ResultSnapshot.objects.filter(request_id=request_id).first()
        url = f"/api/v1/experiments/{experiment.key}/results?request_id={request_id}"
        payload = {
            "request_id": request_id,
            "status": "done" if snapshot else "queued",
            "phase": phase,
            "results_url": url,
            "snapshot": _snapshot_payload(snapshot, "itt") if snapshot else None,
        }
        response = Response(
            self.OutputSerializer(payload).data,
            status=status.HTTP_201_CREATED if snapshot else status.HTTP_202_ACCEPTED,
        )
        response["Location"] = url
        return response
