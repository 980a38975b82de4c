"""The simulated upstreams' error answers, worded and shaped as each real API words them.

An :class:`ErrorReply` is what the handler sends (status, error type, message, code, extra
headers); :func:`error_body` is its JSON body in the provider's shape: Anthropic
``{"type": "error", "error": {type, message}, "request_id"}``, Azure's 401
``{"error": {"code": "401", message}}``, else OpenAI's ``{"error": {message, type, param, code}}``.
Sources: https://platform.openai.com/docs/guides/error-codes,
https://docs.anthropic.com/en/api/errors.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from .scenario import Scenario


class ErrorReply(NamedTuple):
    """One error answer: HTTP ``status``, the API's error ``etype``, its ``message``, the OpenAI
    ``code`` (``None`` when it has none) and ``headers`` sent besides the request id."""

    status: int
    etype: str
    message: str
    code: str | None = None
    headers: dict[str, str] = {}  # a NamedTuple default: never mutated


def error_body(flavour: str | None, reply: ErrorReply, request_id: str) -> dict[str, Any]:
    """The JSON body of ``reply`` in ``flavour``'s shape (``anthropic`` | ``azure`` | other)."""
    if flavour == "anthropic":
        return {
            "type": "error",
            "error": {"type": reply.etype, "message": reply.message},
            "request_id": request_id,
        }
    if flavour == "azure" and reply.status == 401:
        return {"error": {"code": "401", "message": reply.message}}
    return {"error": {"message": reply.message, "type": reply.etype, "param": None, "code": reply.code}}


def bearer(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, else ``None``."""
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


def mask_key(key: str) -> str:
    """Mask like OpenAI does in its 401 message (``sk-abc***wxyz``)."""
    if len(key) <= 8:
        return "*" * len(key)
    return f"{key[:3]}{'*' * (len(key) - 7)}{key[-4:]}"


def auth_failure(flavour: str | None, presented: str | None) -> ErrorReply:
    """The 401 for a missing or wrong key (OpenAI masks the key it was given)."""
    if flavour == "anthropic":
        return ErrorReply(401, "authentication_error", "invalid x-api-key")
    if flavour in ("azure", "azure_v1"):
        return ErrorReply(
            401,
            "invalid_request_error",
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
            "provide a valid key for an active subscription and use a correct regional API "
            "endpoint for your resource.",
        )
    return ErrorReply(
        401,
        "invalid_request_error",
        f"Incorrect API key provided: {mask_key(presented or '')}. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "invalid_api_key",
    )


def model_not_found(flavour: str | None, model: str | None) -> ErrorReply:
    """The 404 for a model (Azure: a deployment) the upstream does not serve."""
    if flavour == "anthropic":
        return ErrorReply(404, "not_found_error", f"model: {model}")
    if flavour == "azure":
        return ErrorReply(
            404, "invalid_request_error", f"The API deployment {model} does not exist.", "DeploymentNotFound"
        )
    return ErrorReply(
        404,
        "invalid_request_error",
        f"The model `{model}` does not exist or you do not have access to it.",
        "model_not_found",
    )


def failure_reply(flavour: str | None, failure: str, sc: Scenario) -> ErrorReply | None:
    """The error answer of a scenario ``failure`` sent before any body (429, 500, 503, 529, 400,
    401); ``None`` for the failures that are not an error answer (``timeout``, ``reset``, the
    in-stream ones)."""
    anth = flavour == "anthropic"
    retry_after = retry_after_headers(sc)
    if failure == "rate_limit":
        if anth:
            return ErrorReply(
                429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                headers=retry_after,
            )  # fmt: skip
        return ErrorReply(
            429, "requests", "Rate limit reached for requests. Please try again later.", "rate_limit_exceeded",
            headers=retry_after,
        )  # fmt: skip
    if failure == "server_error":
        if anth:
            return ErrorReply(500, "api_error", "Internal server error")
        return ErrorReply(500, "server_error", "The server had an error while processing your request.")
    if failure == "unavailable":
        if anth:
            return ErrorReply(503, "api_error", "Service unavailable", headers=retry_after)
        return ErrorReply(503, "server_error", "The engine is currently overloaded.", headers=retry_after)
    if failure == "overloaded":
        if anth:
            return ErrorReply(529, "overloaded_error", "Overloaded", headers=retry_after)
        return ErrorReply(529, "server_error", "The server is overloaded.", headers=retry_after)
    if failure == "bad_request":
        return ErrorReply(400, "invalid_request_error", "Invalid request (simulated).")
    if failure == "auth":
        if anth:
            return ErrorReply(401, "authentication_error", "invalid x-api-key")
        return ErrorReply(401, "invalid_request_error", "Incorrect API key provided.", "invalid_api_key")
    return None


def retry_after_headers(sc: Scenario) -> dict[str, str]:
    """The wait of ``sc.retry_after_s`` in the header style ``sc.retry_after_header`` asks for."""
    if sc.retry_after_header == "retry-after-ms":
        return {"retry-after-ms": _fmt_num(sc.retry_after_s * 1000)}
    if sc.retry_after_header == "anthropic-reset":
        reset = datetime.now(UTC) + timedelta(seconds=sc.retry_after_s)
        return {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset.isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
    return {"retry-after": _fmt_num(sc.retry_after_s)}


def _fmt_num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
