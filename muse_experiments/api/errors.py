"""One error shape for the whole API: ``{"error": {"code", "message", "fields"}}``.

Validation errors keep DRF's per-field messages under ``fields``; anything unexpected becomes a
logged 500 whose body reveals nothing internal. A backing service that is down (database, broker,
Redis) is a 503 with ``Retry-After`` in the same shape (:class:`DependencyOutageMiddleware`), so
callers can tell an outage from a bug and retry.
"""

from __future__ import annotations

import logging
import re

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from .base import RequestTooLarge

_DJANGO_NOT_FOUND = re.compile(r"No ([A-Za-z]+) matches the given query\.")


def _readable_not_found(message: str) -> str:
    """Django's ``get_object_or_404`` message ("No ShadowTest matches the given query.") in the
    API's own wording ("No such shadow test."); any other message unchanged."""
    found = _DJANGO_NOT_FOUND.fullmatch(message)
    if found is None:
        return message
    return f"No such {re.sub(r'(?<!^)(?=[A-Z])', ' ', found.group(1)).lower()}."


def exception_handler(exc, context):
    """DRF exception handler: the shape above; an oversize body (``RequestDataTooBig``) is a 413."""
    if isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    # Django's Http404 (get_object_or_404) has no code of its own: DRF answers it as NotFound
    code = "not_found" if isinstance(exc, Http404) else getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.ValidationError):
        body = {"error": {"code": "invalid", "message": "Invalid request.", "fields": response.data}}
    else:
        detail = (
            response.data.get("detail", response.data) if isinstance(response.data, dict) else response.data
        )
        body = {"error": {"code": code, "message": _readable_not_found(str(detail))}}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        response["Retry-After"] = str(int(exc.wait) + 1)
    response.data = body
    return response


log = logging.getLogger(__name__)


def _outage_types() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError as BrokerError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (
        OperationalError,
        InterfaceError,
        BrokerError,
        RedisConnectionError,
        RedisTimeout,
        ConnectionError,
    )


class DependencyOutageMiddleware:
    """A view that fails because the database, the broker or Redis is unreachable answers 503
    ``{"type": "error", "error": {"type": "api_error", "code": "service_unavailable", "message"}}``
    with ``Retry-After: 1`` (a shape our API, the OpenAI SDK and the Anthropic SDK all read)
    instead of an HTML 500. Other exceptions are left to Django."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.outages = _outage_types()

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, self.outages):
            return None
        log.error("backing service unavailable on %s: %s", request.path, type(exception).__name__)
        response = JsonResponse(
            {
                "type": "error",
                "error": {
                    "type": "api_error",
                    "code": "service_unavailable",
                    "message": "A backing service (database, broker or cache) is unavailable; retry shortly.",
                },
            },
            status=503,
        )
        response["Retry-After"] = "1"
        return response
