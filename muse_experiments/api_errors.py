"""One error shape for the whole API: ``{"error": {"code", "message", "fields"}}``.

Validation errors keep DRF's per-field messages under ``fields``; anything unexpected becomes a
logged 500 whose body reveals nothing internal.
"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler

from .api_base import RequestTooLarge


def exception_handler(exc, context):
    """DRF exception handler: the shape above; an oversize body (``RequestDataTooBig``) is a 413."""
    if isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.ValidationError):
        body = {"error": {"code": "invalid", "message": "Invalid request.", "fields": response.data}}
    else:
        detail = (
            response.data.get("detail", response.data) if isinstance(response.data, dict) else response.data
        )
        body = {"error": {"code": code, "message": str(detail)}}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        response["Retry-After"] = str(int(exc.wait) + 1)
    response.data = body
    if response.status_code == status.HTTP_415_UNSUPPORTED_MEDIA_TYPE:
        response.status_code = status.HTTP_400_BAD_REQUEST
    return response
