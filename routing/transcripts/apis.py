"""REST API: session end, training opt-out, training export (streamed JSONL), ingestion gate.

* ``POST /api/v1/sessions/{session_id}/end`` (scope ``completions``) -- forget the caller's
  session's server-side reasoning now instead of at TTL expiry (404 for another key's session).
* ``GET|POST|DELETE /api/v1/users/{user_id}/training-opt-out`` (scope ``training``).
* ``POST /api/v1/training/export`` (scope ``training:export``) -- JSONL stream; last line is
  ``{"manifest": {...}}``.
* ``POST /api/v1/training/ingest`` (scope ``training:ingest``) -- the gate; per-record verdicts.
"""

from __future__ import annotations

import logging

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import ApiClient, HasScope
from muse_experiments.api.base import StrictSerializer
from muse_experiments.api.keyed import api_actor
from muse_experiments.experiments.validation import unit_id_problem
from routing.reasoning_store import ReasoningStoreUnavailable

from .export import TrainingExport
from .selectors import user_opted_out
from .services import (
    SessionNotFound,
    api_session_end,
    training_opt_in,
    training_opt_out,
    training_records_ingest,
)

log = logging.getLogger(__name__)

MAX_INGEST_BATCH = 1000


def unit_id_error(name: str, value: str) -> Response | None:
    """A 400 naming ``name`` when the path id ``value`` is empty or breaks the one unit-id rule
    (:func:`muse_experiments.experiments.validation.unit_id_problem`: no trimming, no normalising), else None."""
    problem = "Required." if not value else unit_id_problem(value)
    if problem is None:
        return None
    return Response(
        {"error": {"code": "invalid", "message": "Invalid request.", "fields": {name: [problem]}}},
        status=status.HTTP_400_BAD_REQUEST,
    )


def actor_of(request) -> str:
    """The audit actor of ``request`` (:func:`muse_experiments.api.keyed.api_actor`)."""
    return api_actor(request.user)


class SessionEndApi(APIView):
    """End one of the caller's sessions: delete its server-side reasoning state at once.

    A session belongs to whoever started it (:func:`routing.reasoning_store.session_owner`): an
    API key ends only the sessions its own calls started; the same session id used by another
    key is that key's own, separate session, and is neither ended nor revealed: a session this
    key never started answers 404 and changes nothing. A signed-in (session-cookie) user acts as
    the keyless source: it ends only sessions started without a key (by any signed-in user),
    never a key's session (404), whatever its permissions.
    """

    permission_classes = [HasScope]
    required_scope = "completions"

    class OutputSerializer(serializers.Serializer):
        session_id = serializers.CharField()
        deleted_states = serializers.IntegerField(help_text="Reasoning states deleted.")

    @extend_schema(
        request=None,
        responses={
            200: OutputSerializer,
            404: OpenApiResponse(description="No session of this id was started with this key"),
            503: OpenApiResponse(description="Store down"),
        },
    )
    def post(self, request, session_id: str):
        if bad := unit_id_error("session_id", session_id):
            return bad
        api_key_id = request.user.key.pk if isinstance(request.user, ApiClient) else None
        try:
            deleted = api_session_end(api_key_id=api_key_id, session_id=session_id)
        except SessionNotFound as exc:
            raise exceptions.NotFound(str(exc)) from None
        except ReasoningStoreUnavailable as exc:
            log.warning("session end failed: %s", exc)
            return Response(
                {"error": {"code": "unavailable", "message": "Session store unavailable; retry."}},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response(self.OutputSerializer({"session_id": session_id, "deleted_states": deleted}).data)


class TrainingOptOutApi(APIView):
    """A user's training opt-out: ``GET`` status, ``POST`` opt out, ``DELETE`` opt back in.

    Opting out makes every not-yet-exported turn of the user ineligible; the export also
    re-checks opt-outs when it runs.
    """

    permission_classes = [HasScope]
    required_scope = "training"

    class OutputSerializer(serializers.Serializer):
        user_id = serializers.CharField()
        opted_out = serializers.BooleanField()
        turns_changed = serializers.IntegerField(
            help_text="Unexported turns whose eligibility changed (0 for GET)."
        )

    class EmptyBodySerializer(StrictSerializer):
        """``POST`` and ``DELETE`` take no body: any field sent is an unknown field (400), as
        everywhere else in the API, never silently ignored."""

    def _check(self, user_id: str):
        return unit_id_error("user_id", user_id)

    def _check_body(self, request) -> None:
        """Raise a 400 naming each field of a non-empty body (:class:`EmptyBodySerializer`)."""
        if request.data:
            self.EmptyBodySerializer(data=request.data).is_valid(raise_exception=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request, user_id: str):
        if bad := self._check(user_id):
            return bad
        data = {"user_id": user_id, "opted_out": user_opted_out(user_id), "turns_changed": 0}
        return Response(self.OutputSerializer(data).data)

    @extend_schema(request=None, responses=OutputSerializer)
    def post(self, request, user_id: str):
        if bad := self._check(user_id):
            return bad
        self._check_body(request)
        _, n = training_opt_out(user_id=user_id, actor=actor_of(request))
        return Response(
            self.OutputSerializer({"user_id": user_id, "opted_out": True, "turns_changed": n}).data
        )

    @extend_schema(responses=OutputSerializer)
    def delete(self, request, user_id: str):
        if bad := self._check(user_id):
            return bad
        self._check_body(request)
        n = training_opt_in(user_id=user_id, actor=actor_of(request))
        return Response(
            self.OutputSerializer({"user_id": user_id, "opted_out": False, "turns_changed": n}).data
        )


class TrainingExportApi(APIView):
    """Stream eligible transcript turns as JSONL (``application/x-ndjson``), then a manifest line.

    Turns streamed are marked exported when the stream completes (an interrupted download marks
    nothing). ``dry_run`` streams without marking.
    """

    permission_classes = [HasScope]
    required_scope = "training:export"

    class InputSerializer(StrictSerializer):
        since = serializers.DateTimeField(required=False, allow_null=True, default=None)
        until = serializers.DateTimeField(required=False, allow_null=True, default=None)
        model_version = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)
        dry_run = serializers.BooleanField(required=False, default=False)

        def validate(self, attrs):
            if attrs["since"] and attrs["until"] and attrs["since"] >= attrs["until"]:
                raise serializers.ValidationError({"until": ["Must be after since."]})
            return attrs

    @extend_schema(
        request=InputSerializer,
        responses={200: OpenApiResponse(OpenApiTypes.STR, description='JSONL records, then {"manifest": …}')},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        d = data.validated_data
        export = TrainingExport(since=d["since"], until=d["until"], model_version=d["model_version"])
        response = StreamingHttpResponse(
            export.lines(mark_exported=not d["dry_run"]), content_type="application/x-ndjson"
        )
        response["Cache-Control"] = "no-store"
        return response


class TrainingIngestApi(APIView):
    """The ingestion gate: validate a batch of training records, store the clean ones unchanged.

    Rejected: encrypted reasoning anywhere, external provenance, opted-out user, invalid or
    oversized record, ``record_id`` repeated in the batch or already stored with other content.
    Idempotent by ``record_id``. Always 200 for a well-formed batch; see per-record ``status``.
    """

    permission_classes = [HasScope]
    required_scope = "training:ingest"

    class InputSerializer(StrictSerializer):
        records = serializers.ListField(
            child=serializers.JSONField(), allow_empty=False, max_length=MAX_INGEST_BATCH
        )

    class ResultSerializer(serializers.Serializer):
        index = serializers.IntegerField()
        record_id = serializers.CharField(allow_null=True)
        status = serializers.ChoiceField(choices=["accepted", "duplicate", "rejected"])
        reasons = serializers.ListField(child=serializers.CharField())
        detail = serializers.CharField(allow_blank=True)

    class OutputSerializer(serializers.Serializer):
        received = serializers.IntegerField()
        accepted = serializers.IntegerField()
        duplicates = serializers.IntegerField()
        rejected = serializers.IntegerField()
        rejected_by_reason = serializers.DictField(child=serializers.IntegerField())
        results = serializers.ListField(child=serializers.DictField())

    @extend_schema(
        request=InputSerializer,
        responses={200: OutputSerializer, 400: OpenApiResponse(description="Field errors")},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = training_records_ingest(records=data.validated_data["records"])
        results = [
            {
                "index": v.index,
                "record_id": v.record_id,
                "status": s,
                "reasons": [str(r) for r in v.reasons],
                "detail": v.detail,
            }
            for v, s in outcome.statuses
        ]
        return Response({**outcome.counts, "results": results})
