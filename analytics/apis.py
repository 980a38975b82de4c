"""REST API for outcome events and experiment results."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import HasScope, require_session_permission
from muse_experiments.api.base import FiniteFloatField, StrictSerializer
from muse_experiments.experiments.fields import UnitIdField
from muse_experiments.experiments.models import Experiment

from .events import (
    MAX_CLOCK_SKEW,
    MAX_EVENT_VALUE,
    EventConflict,
    EventInput,
    earliest_event_time,
    events_record,
    yes_no_event_names,
)
from .handoff import results_wait
from .models import ResultSnapshot, SnapshotTrigger
from .result_schema import ResultsSnapshotSchema
from .rollups import call_rollup_refresh
from .selectors import snapshot_latest
from .services import results_compute
from .tasks import compute_results

MAX_BATCH = 1000


class EventValueField(FiniteFloatField):
    """A JSON number (never a boolean or a string) with ``|value| <= MAX_EVENT_VALUE``."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise serializers.ValidationError("Must be a JSON number (not a string or a boolean).")
        value = super().to_internal_value(data)
        if abs(value) > MAX_EVENT_VALUE:
            raise serializers.ValidationError(
                f"Must be between -{MAX_EVENT_VALUE:g} and {MAX_EVENT_VALUE:g}."
            )
        return value


class ZonedDateTimeField(serializers.DateTimeField):
    """An ISO 8601 time that states its zone (``Z`` or ``±hh:mm``); a zone-less time is ambiguous."""

    def to_internal_value(self, value):
        parsed = super().to_internal_value(value)
        if isinstance(value, str) and not _has_zone(value):
            raise serializers.ValidationError("Give a time zone, e.g. 2026-11-30T23:30:00Z or +01:00.")
        return parsed


def _has_zone(text: str) -> bool:
    try:
        parsed = parse_datetime(text.strip())
    except ValueError:
        return False
    return parsed is not None and parsed.tzinfo is not None


class EventSerializer(StrictSerializer):
    event_id = serializers.CharField(
        max_length=200,
        help_text="Client-chosen id, unique per API key: re-posting the same event is a no-op; the same "
        "id with a different body is a 409.",
    )
    name = serializers.RegexField(r"^[A-Za-z0-9_.:-]{1,100}$")
    session_id = UnitIdField(required=False, allow_blank=True, default="")
    user_id = UnitIdField(required=False, allow_blank=True, default="")
    value = EventValueField(
        required=False,
        default=1.0,
        help_text=f"A number with |value| ≤ {MAX_EVENT_VALUE:g}; 0 or 1 for an event behind a yes/no metric.",
    )
    timestamp = ZonedDateTimeField(
        required=False,
        help_text="When it happened, with a zone; at most 5 minutes ahead of the server and not more "
        "than 366 days before the earliest experiment. Default: when received.",
    )

    def validate_timestamp(self, value):
        now = timezone.now()
        if value > now + MAX_CLOCK_SKEW:
            raise serializers.ValidationError("Timestamp is in the future.")
        if value < self.context.get("earliest", earliest_event_time(now)):
            raise serializers.ValidationError(
                "Timestamp is too old: more than 366 days before the earliest experiment started."
            )
        return value

    def validate(self, attrs):
        if not attrs["session_id"] and not attrs["user_id"]:
            raise serializers.ValidationError({"session_id": "Give a session_id or a user_id."})
        if attrs["name"] in self.context.get("yes_no", ()) and attrs["value"] not in (0.0, 1.0):
            raise serializers.ValidationError(
                {"value": f"{attrs['name']} feeds a yes/no metric: the value must be 0 or 1."}
            )
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
        responses={
            201: OutputSerializer,
            400: OpenApiResponse(description="Field errors"),
            409: OpenApiResponse(description="An event_id already used by this key with a different body"),
        },
    )
    def post(self, request):
        payload = request.data
        if isinstance(payload, dict) and "events" not in payload:
            payload = {"events": [payload]}
        rows = payload.get("events") if isinstance(payload, dict) else None
        names = [r.get("name") for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
        context = {
            "earliest": earliest_event_time(),
            "yes_no": yes_no_event_names(n for n in names[: MAX_BATCH + 1] if isinstance(n, str)),
        }
        data = self.InputSerializer(data=payload, context=context)
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
                body={
                    "name": e["name"],
                    "session_id": e["session_id"],
                    "user_id": e["user_id"],
                    "value": e["value"],
                    "timestamp": e["timestamp"].isoformat() if e.get("timestamp") else None,
                },
            )
            for e in data.validated_data["events"]
        ]
        try:
            with transaction.atomic():
                report = events_record(events=events, source=_source(request.user))
        except EventConflict as exc:
            return Response(
                {"error": {"code": "event_id_conflict", "message": str(exc), "event_ids": exc.ids}},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(self.OutputSerializer(report).data, status=status.HTTP_201_CREATED)


def _source(user) -> str:
    """Scope of event ids: the API key (``key:<prefix>``) or the staff user (``user:<name>``)."""
    key = getattr(user, "key", None)
    return f"key:{key.prefix}" if key is not None else f"user:{user.get_username()}"


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
        json_types = False  # a query string: every value is text
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
            # a new snapshot: what POST …/results/compute needs
            require_session_permission(request, operation=("experiment-results-compute", "POST"))
            try:
                snapshot = results_compute(experiment=experiment, phase=phase, trigger=SnapshotTrigger.API)
            except ValueError as exc:
                raise serializers.ValidationError({"phase": [str(exc)]}) from exc
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
        data = self.InputSerializer(data=request.data)  # a body that is not an object: a 400
        data.is_valid(raise_exception=True)
        phase = data.validated_data.get("phase") or experiment.phase
        if not experiment.phase:
            raise serializers.ValidationError(
                {"phase": ["The experiment has not started: nothing to compute."]}
            )
        if phase > experiment.phase:
            raise serializers.ValidationError(
                {"phase": [f"Phase {phase} does not exist (current: {experiment.phase})."]}
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
            snapshot = results_wait(request_id=request_id, timeout_s=wait_s)  # None: answer 202
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
