"""Drop-in errors: :class:`DropinError` and the vendors' error bodies.

* OpenAI: ``{"error": {"message", "type", "param", "code"}}`` (:func:`openai_error`);
* Anthropic: ``{"type": "error", "error": {"type", "message"}}`` (:func:`anthropic_error`), the
  field named in the message as Anthropic names fields (``messages.2.content``:
  :func:`anthropic_message`).

A :class:`DropinError`'s ``param`` is a field path in OpenAI's form (``messages[2].content``,
``tools[0].function.parameters.properties``), a header name, or ``None``.
"""

from __future__ import annotations

import re
from typing import Any


class DropinError(Exception):
    """A client error rendered in the provider's error shape. ``kind``: invalid_request |
    not_found | timeout | upstream | model_unavailable (503: the model is under a kill switch)
    | conflict."""

    STATUS = {
        "invalid_request": 400,
        "not_found": 404,
        "timeout": 504,
        "upstream": 502,
        "model_unavailable": 503,
        "conflict": 409,
    }

    def __init__(self, message: str, *, kind: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.param = param
        self.status = self.STATUS[kind]


def require(condition: bool, message: str, param: str | None = None) -> None:
    """Raise a 400 :class:`DropinError` naming ``param`` unless ``condition``."""
    if not condition:
        raise DropinError(message, param=param)


OPENAI_ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "not_found": "not_found_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "rate_limit": "rate_limit_error",
    "request_too_large": "invalid_request_error",
    "timeout": "timeout",
    "upstream": "api_error",
    "model_unavailable": "model_unavailable",
    "conflict": "invalid_request_error",  # 409: the SDKs' ConflictError, retried by them
}
ANTHROPIC_ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "not_found": "not_found_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "rate_limit": "rate_limit_error",
    "request_too_large": "request_too_large",
    "timeout": "timeout_error",
    "upstream": "api_error",
    "model_unavailable": "model_unavailable",
    "conflict": "invalid_request_error",  # 409: the SDKs' ConflictError, retried by them
}


def openai_error(*, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as the OpenAI API answers errors."""
    code = {"not_found": "model_not_found", "model_unavailable": "model_unavailable"}.get(kind)
    return {
        "error": {
            "message": message,
            "type": OPENAI_ERROR_TYPES.get(kind, "api_error"),
            "param": param,
            "code": code,
        }
    }


def anthropic_error(*, kind: str, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` as the Anthropic API answers errors."""
    return {
        "type": "error",
        "error": {"type": ANTHROPIC_ERROR_TYPES.get(kind, "api_error"), "message": message},
    }


_INDEX = re.compile(r"\[(\d+)\]")


def anthropic_path(param: str) -> str:
    """A field path as Anthropic writes it: ``messages[2].content[0].text`` → ``messages.2.content.0.text``."""
    return _INDEX.sub(r".\1", param)


def anthropic_message(message: str, param: str | None) -> str:
    """``message`` with its field path in Anthropic's form, prefixed with ``param:`` where the
    message does not name the field itself (Anthropic names the field in the message)."""
    if not param:
        return message
    dotted = anthropic_path(param)
    message = message.replace(param, dotted)
    named = f"'{dotted}'" in message or message.startswith(f"{dotted}:") or message.endswith(dotted)
    return message if named else f"{dotted}: {message}"
