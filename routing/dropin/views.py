"""The drop-in views: ``POST /v1/chat/completions``, ``POST /v1/responses`` (OpenAI) and
``POST /v1/messages`` (Anthropic).

Each view reads as its steps: the body checked against its declared shape and turned into our
terms (:mod:`.openai_shapes`, :mod:`.anthropic_shapes`), the model resolved and the job submitted
(:mod:`.submission`), then the answer framed in the vendor's format, whole or streamed
(:mod:`.openai_framing`, :mod:`.anthropic_framing`).

* Auth: the SDKs' own headers (``Authorization: Bearer <muse key>`` — openai and anthropic>=2 —
  or ``x-api-key``), handled by :class:`muse_experiments.api.auth.ApiKeyAuthentication`; scope
  ``completions``; the per-key rate limit applies (429 + ``retry-after``, which the SDKs honour).
* Errors are in the vendor's shape (:mod:`.errors`); failures carry ``x-should-retry: false``
  (routing already retried and fell back), so the SDKs do not re-submit them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import ApiKeyAuthentication, HasScope
from muse_experiments.api.base import RequestTooLarge
from routing.idempotency import IdempotencyConflict
from routing.models import CompletionJob
from routing.web.relay import sse_response

from .anthropic_framing import message_frames, message_object
from .anthropic_shapes import parse_messages
from .errors import DropinError, anthropic_error, anthropic_message, openai_error
from .openai_framing import ResponsesStream, chat_chunks, chat_completion, responses_object
from .openai_shapes import parse_chat, parse_responses
from .streams import stream_frames
from .submission import finished_job, muse_headers, resolve_model, submit


class VendorJsonNegotiation(DefaultContentNegotiation):
    """The vendors' APIs answer JSON whatever the request's ``Accept`` header says (a stream is an
    ``text/event-stream`` response of its own, not rendered), so the drop-ins do too: no ``406``,
    no HTML page for a browser's ``Accept``, and no ``Accept`` parsing per request
    (``bench/bench_stages.py --profile``; bench/README.md). Parsers are chosen as DRF chooses them."""

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = renderers[0]
        return renderer, renderer.media_type


class DropinView(APIView):
    """Base view: API keys only (a staff session does not authenticate here), completions scope,
    provider-shaped errors, left out of our OpenAPI schema. Answers are JSON whatever ``Accept``
    says (:class:`VendorJsonNegotiation`)."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [HasScope]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = VendorJsonNegotiation
    required_scope = "completions"
    schema = None  # vendor wire formats, documented by the vendors

    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        raise NotImplementedError

    def error_response(self, *, status: int, kind: str, message: str, param: str | None = None) -> Response:
        response = Response(
            self.error_body(status=status, kind=kind, message=message, param=param), status=status
        )
        if status >= 500:
            response["x-should-retry"] = "false"
        return response

    def handle_exception(self, exc):
        if isinstance(exc, DropinError):
            return self.error_response(status=exc.status, kind=exc.kind, message=exc.message, param=exc.param)
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            return self.error_response(status=401, kind="authentication", message=str(exc.detail))
        if isinstance(exc, exceptions.PermissionDenied):
            return self.error_response(status=403, kind="permission", message=str(exc.detail))
        if isinstance(exc, exceptions.Throttled):
            response = self.error_response(status=429, kind="rate_limit", message=str(exc.detail))
            if exc.wait is not None:
                response["retry-after"] = str(int(exc.wait))
            return response
        if isinstance(exc, (RequestTooLarge, RequestDataTooBig)):
            return self.error_response(
                status=413, kind="request_too_large", message="Request body too large."
            )
        if isinstance(exc, IdempotencyConflict):
            return self.error_response(
                status=422, kind="invalid_request", message=str(exc.detail), param="Idempotency-Key"
            )
        if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict) and exc.detail:
            param, messages = next(iter(exc.detail.items()))
            message = messages[0] if isinstance(messages, list) and messages else messages
            return self.error_response(
                status=400, kind="invalid_request", message=f"'{param}': {message}", param=param
            )
        if isinstance(exc, (exceptions.ParseError, exceptions.UnsupportedMediaType)):
            return self.error_response(status=400, kind="invalid_request", message=str(exc.detail))
        if isinstance(exc, exceptions.MethodNotAllowed):
            return self.error_response(status=405, kind="invalid_request", message=str(exc.detail))
        return super().handle_exception(exc)


class OpenAIView(DropinView):
    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        return openai_error(kind=kind, message=message, param=param)


class ChatCompletionsApi(OpenAIView):
    """``POST /v1/chat/completions`` in the OpenAI wire format (streaming included)."""

    def post(self, request):
        call = parse_chat(request.data)
        job = submit(request, call, pinned=resolve_model(call.model))
        if call.stream:
            return streamed(
                job,
                lambda events: chat_chunks(
                    events, job=job, model=call.model, include_usage=call.include_usage
                ),
            )
        job = finished_job(job, request)
        return Response(chat_completion(job), headers=muse_headers(job))


class ResponsesApi(OpenAIView):
    """``POST /v1/responses`` in the OpenAI wire format (streaming included; stateless)."""

    def post(self, request):
        call = parse_responses(request.data)
        job = submit(request, call, pinned=resolve_model(call.model))
        if call.stream:
            return streamed(job, ResponsesStream(job, call.model).frames)
        job = finished_job(job, request)
        return Response(responses_object(job), headers=muse_headers(job))


class MessagesApi(DropinView):
    """``POST /v1/messages`` in the Anthropic wire format (streaming included)."""

    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        return anthropic_error(kind=kind, message=anthropic_message(message, param))

    def post(self, request):
        call = parse_messages(request.data)
        job = submit(request, call, pinned=resolve_model(call.model))
        if call.stream:
            return streamed(job, lambda events: message_frames(events, job=job, model=call.model))
        job = finished_job(job, request)
        return Response(message_object(job), headers=muse_headers(job))


def streamed(job: CompletionJob, formatter: Callable[[Iterator[dict]], Iterator[bytes]]) -> HttpResponse:
    """The job's events as a ``text/event-stream`` answer in the vendor's framing."""
    response = sse_response(stream_frames(job, formatter))
    response["x-muse-job-id"] = str(job.id)
    return response
