"""REST API for routed completions: ``POST /api/v1/completions`` and ``GET /api/v1/completions/{id}``.

``POST`` is synchronous by default (waits up to ``COMPLETION_SYNC_WAIT_S`` for the worker, then
answers 202 with a ``Location``); ``async=true`` answers 202 at once; ``stream=true`` answers with
Server-Sent Events (see :mod:`routing.pipeline.streaming` for the event list). A job is visible only to the
API key that created it (staff sessions see all).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from django.conf import settings
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import ApiClient, HasScope
from muse_experiments.api.base import AttributesField, StrictSerializer
from muse_experiments.experiments.fields import UnitIdField
from muse_experiments.experiments.validation import tool_parameters_problem
from routing.dropin.errors import DropinError
from routing.dropin.identity import header_text
from routing.models import FINISHED_STATUSES, CompletionJob, JobStatus
from routing.selectors import completion_job_current, completion_job_unwritten
from routing.web.dispatch import submit_completion, wait_for_job
from routing.web.relay import KEEPALIVE_FRAME, job_events, sse, sse_response


class ToolCallSerializer(StrictSerializer):
    id = serializers.CharField(max_length=200)
    name = serializers.CharField(max_length=200)
    arguments = serializers.DictField()


class MessageSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant", "tool"])
    content = serializers.CharField(allow_blank=True, max_length=200_000, required=False, default="")
    tool_calls = ToolCallSerializer(many=True, required=False)
    tool_call_id = serializers.CharField(max_length=200, required=False)

    def validate(self, attrs):
        if attrs["role"] == "tool" and not attrs.get("tool_call_id"):
            raise serializers.ValidationError({"tool_call_id": "Required for role 'tool'."})
        if attrs.get("tool_calls") and attrs["role"] != "assistant":
            raise serializers.ValidationError({"tool_calls": "Only assistant messages carry tool calls."})
        return attrs


class ToolSerializer(StrictSerializer):
    name = serializers.RegexField(r"^[A-Za-z0-9_-]{1,64}$")
    description = serializers.CharField(allow_blank=True, required=False, default="", max_length=4000)
    parameters = serializers.DictField(required=False, default=dict)

    def validate_parameters(self, value):
        problem = tool_parameters_problem(value)
        if problem:
            raise serializers.ValidationError(f"parameters{problem[0]}: {problem[1]}")
        return value


def job_payload(job: CompletionJob) -> dict:
    """The public view of a job: status plus the public result (no encrypted reasoning, ever)."""
    return {
        "id": str(job.id),
        "status": job.status,
        "session_id": job.session_id,
        "user_id": job.user_id,
        "result": job.result,
        "error": job.error or None,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


class CompletionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    session_id = serializers.CharField()
    user_id = serializers.CharField()
    result = serializers.JSONField(
        allow_null=True,
        help_text="text, tool_calls, served_model, experiment, variant, usage, cost_usd, reason",
    )
    error = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


def idempotency_key(request, body_key: str) -> str:
    """The call's idempotency key: the body's ``idempotency_key``, else the ``Idempotency-Key``
    header (UTF-8, at most 200 characters). Raises ``ValidationError`` (400) for a bad header, or
    when both are sent and differ (which one was meant cannot be told)."""
    try:
        header = header_text(request, "Idempotency-Key")
    except DropinError as exc:
        raise serializers.ValidationError({"Idempotency-Key": [exc.message]}) from None
    if header and body_key and header != body_key:
        raise serializers.ValidationError(
            {"idempotency_key": ["Differs from the Idempotency-Key header; send one of them."]}
        )
    return body_key or header


class CompletionCreateApi(APIView):
    """Route one model call through the running experiments and return the completion."""

    permission_classes = [HasScope]
    required_scope = "completions"

    class InputSerializer(StrictSerializer):
        session_id = UnitIdField(help_text="Used exactly as sent; see unit id rules (400 if ambiguous).")
        user_id = UnitIdField(help_text="Used exactly as sent; see unit id rules (400 if ambiguous).")
        subagent = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        attributes = AttributesField(required=False, default=dict)
        messages = MessageSerializer(many=True, allow_empty=False, max_length=1000)
        tools = ToolSerializer(many=True, required=False, default=list, max_length=128)
        idempotency_key = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        stream = serializers.BooleanField(required=False, default=False)

        def get_fields(self):
            fields = super().get_fields()
            fields["async"] = serializers.BooleanField(
                required=False, default=False, help_text="Return 202 at once."
            )
            return fields

        def validate(self, attrs):
            if attrs.get("stream") and attrs.get("async"):
                raise serializers.ValidationError({"stream": ["stream and async cannot both be true."]})
            return attrs

    @extend_schema(
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Same as the body's idempotency_key (as the drop-ins take it); 400 when both "
                "are sent and differ.",
            )
        ],
        responses={
            200: OpenApiResponse(
                CompletionOutputSerializer,
                description="Finished (succeeded or failed). With stream=true: text/event-stream of "
                "job, text_delta, tool_call_delta, then done or error events.",
            ),
            202: OpenApiResponse(
                CompletionOutputSerializer, description="Still running: poll the Location URL."
            ),
            400: OpenApiResponse(description="Field errors"),
            413: OpenApiResponse(description="Body too large"),
            422: OpenApiResponse(description="The idempotency key was used with a different body"),
            429: OpenApiResponse(description="Rate limited; see Retry-After"),
        },
        examples=[
            OpenApiExample(
                "tool result turn",
                request_only=True,
                value={
                    "session_id": "s-1",
                    "user_id": "u-1",
                    "subagent": "coder",
                    "messages": [
                        {"role": "user", "content": "weather in Paris?"},
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [
                                {"id": "call_1", "name": "weather", "arguments": {"city": "Paris"}}
                            ],
                        },
                        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
                    ],
                },
            )
        ],
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        d = data.validated_data
        api_key = request.user.key if isinstance(request.user, ApiClient) else None
        job, _ = submit_completion(
            api_key=api_key,
            session_id=d["session_id"],
            user_id=d["user_id"],
            subagent=d["subagent"],
            attributes=d["attributes"],
            request={"messages": d["messages"], "tools": d["tools"]},
            idempotency_key=idempotency_key(request, d["idempotency_key"]),
            stream=d["stream"],
            durable=d["async"],  # a job id handed out for later must survive a crash
        )
        if d["stream"]:
            return sse_response(_api_stream(job))
        if not d["async"] and job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
            job = wait_for_job(job, timeout_s=settings.COMPLETION_SYNC_WAIT_S)
        finished = job.status in FINISHED_STATUSES
        response = Response(
            CompletionOutputSerializer(job_payload(job)).data,
            status=status.HTTP_200_OK if finished else status.HTTP_202_ACCEPTED,
        )
        if not finished:
            response["Location"] = f"/api/v1/completions/{job.id}"
        return response


#: The 404 of ``GET /api/v1/completions/{id}``: no such job for this caller, or an id that is not a UUID.
NO_SUCH_COMPLETION = "No such completion."


class CompletionDetailApi(APIView):
    """Status and result of a completion job."""

    permission_classes = [HasScope]
    required_scope = "completions"

    @extend_schema(
        parameters=[OpenApiParameter("job_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: CompletionOutputSerializer, 404: OpenApiResponse(description="No such completion")},
    )
    def get(self, request, job_id: str):
        try:  # the route takes any text, so a malformed id is this API's 404, not "No such endpoint"
            job_id = uuid.UUID(job_id)
        except ValueError:
            raise Http404(NO_SUCH_COMPLETION) from None
        jobs = CompletionJob.objects.all()
        key_id = request.user.key.pk if isinstance(request.user, ApiClient) else None
        if key_id is not None:  # a key sees only its own jobs; staff see all
            jobs = jobs.filter(api_key_id=key_id)
        # a job whose row is not drained yet is found through its claim
        job = jobs.filter(pk=job_id).first() or completion_job_unwritten(job_id, api_key_id=key_id)
        if job is None:
            raise Http404(NO_SUCH_COMPLETION)
        job = completion_job_current(job)
        return Response(CompletionOutputSerializer(job_payload(job)).data)


def _api_stream(job: CompletionJob) -> Iterator[bytes]:
    """Our own SSE dialect: ``event: <type>`` + ``data: <json>`` per :mod:`routing.pipeline.streaming` event."""
    yield sse("job", {"type": "job", "id": str(job.id), "status": job.status})
    for event in job_events(job_id=str(job.id)):
        if event["type"] == "keepalive":
            yield KEEPALIVE_FRAME
            continue
        yield sse(event["type"], event)
