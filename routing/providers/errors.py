"""Provider error hierarchy (Django-free). Every SDK/transport failure maps onto it.

Exception tree (``retryable`` default in brackets)::

    ProviderError(message, *, retryable, status_code=None, retry_after_s=None, ...)
    ├── RateLimited              429                                   [retryable]
    ├── UpstreamUnavailable      500/502/503/504/529, overloaded_error [retryable]
    ├── UpstreamTimeout          client-side timeout, 408              [retryable]
    ├── ConnectionFailed         connect error, reset, protocol error  [retryable]
    ├── BadResponse              malformed/unparseable upstream body   [retryable]
    ├── ClientRequestError       other 4xx (400/404/409/413/422...)    [not retryable]
    │   └── AuthFailed           401/403                               [not retryable]
    └── StreamFailed(after_content)  failure after HTTP 200 of a stream
                                 [retryable only if no content was delivered yet
                                  and the underlying cause was retryable]

Retry policy belongs to the caller (our SDK clients run with ``max_retries=0``): retry /
fail over when ``err.retryable``; honour ``err.retry_after_s`` (seconds, from
``retry-after``/``retry-after-ms``) when set.

Security: messages are built by :func:`safe_message`, which removes the endpoint credential
and anything that looks like an API key (``sk-...``, OpenAI's masked ``sk-abc***wxyz``).
Mapped exceptions are raised ``from None`` so SDK exceptions (whose ``request`` carries
auth headers) are not chained into tracebacks/logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_KEYLIKE = re.compile(r"(?:sk|pk|rk)-[A-Za-z0-9_\-*]{4,}|[A-Za-z0-9_\-]*\*{3,}[A-Za-z0-9_\-]*")
_KEY_PROVIDED = re.compile(r"(API key provided:)\s*\S+", re.IGNORECASE)


def safe_message(message: str, secrets: Iterable[str] = ()) -> str:
    """Return ``message`` with the given secrets and key-like tokens replaced by ``[redacted]``.

    Also truncates to 500 characters.
    """
    out = message
    for secret in secrets:
        if secret and len(secret) >= 4:
            out = out.replace(secret, "[redacted]")
    out = _KEY_PROVIDED.sub(r"\1 [redacted]", out)
    out = _KEYLIKE.sub("[redacted]", out)
    return out[:500]


class ProviderError(Exception):
    """Base class. ``message`` is safe to log and show (no credentials, no reasoning).

    Attributes: ``retryable`` (bool), ``status_code`` (HTTP status or ``None``),
    ``retry_after_s`` (float seconds or ``None``), ``upstream_request_id``,
    ``provider_kind``, ``endpoint_id``, ``error_type`` (provider error type/code, e.g.
    ``rate_limit_exceeded``, ``overloaded_error``), ``usage`` (tokens billed for the failed
    attempt, when the upstream reported or streamed any; ``None`` otherwise).
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        upstream_request_id: str | None = None,
        provider_kind: str | None = None,
        endpoint_id: str | None = None,
        error_type: str | None = None,
        usage: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.upstream_request_id = upstream_request_id
        self.provider_kind = provider_kind
        self.endpoint_id = endpoint_id
        self.error_type = error_type
        #: :class:`~routing.providers.types.Usage` the provider billed for this failed attempt
        #: (``response.failed`` usage, or the tokens a broken stream had delivered), else ``None``.
        self.usage = usage

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, retryable={self.retryable}, "
            f"status_code={self.status_code}, retry_after_s={self.retry_after_s}, "
            f"endpoint_id={self.endpoint_id!r})"
        )

    def to_public_dict(self) -> dict[str, object]:
        return {
            "class": type(self).__name__,
            "message": self.message,
            "retryable": self.retryable,
            "status_code": self.status_code,
            "retry_after_s": self.retry_after_s,
            "error_type": self.error_type,
            "upstream_request_id": self.upstream_request_id,
            "endpoint_id": self.endpoint_id,
        }


class RateLimited(ProviderError):
    """HTTP 429 (rate or quota limit). ``retry_after_s`` from the response when sent."""

    default_retryable = True


class UpstreamUnavailable(ProviderError):
    """HTTP 5xx, 529 / Anthropic ``overloaded_error`` / ``api_error``."""

    default_retryable = True


class UpstreamTimeout(ProviderError):
    """The request exceeded ``EndpointConfig.timeout_s`` (or HTTP 408)."""

    default_retryable = True


class ConnectionFailed(ProviderError):
    """Could not connect, or the connection was reset/closed without a response."""

    default_retryable = True


class BadResponse(ProviderError):
    """The upstream answered with something unparseable (invalid JSON, bad SSE data)."""

    default_retryable = True


class ClientRequestError(ProviderError):
    """A 4xx other than 401/403/408/429: our request is wrong; retrying will not help."""

    default_retryable = False


class AuthFailed(ClientRequestError):
    """HTTP 401/403: the credential is missing, wrong, or lacks permission."""

    default_retryable = False


class StreamFailed(ProviderError):
    """A stream failed after HTTP 200 (in-stream ``error`` event, reset, bad data).

    ``after_content`` is True when text/tool deltas had already been delivered to the
    caller: then the request must not be transparently retried (the client saw output).
    ``cause_class`` names the equivalent non-stream error class (e.g. ``UpstreamUnavailable``).
    """

    def __init__(
        self, message: str, *, after_content: bool, cause_class: str | None = None, **kwargs
    ) -> None:
        retryable = kwargs.pop("retryable", True)
        super().__init__(message, retryable=bool(retryable and not after_content), **kwargs)
        self.after_content = after_content
        self.cause_class = cause_class

    def to_public_dict(self) -> dict[str, object]:
        data = super().to_public_dict()
        data["after_content"] = self.after_content
        data["cause_class"] = self.cause_class
        return data


def class_for_status(status: int, error_type: str | None = None) -> type[ProviderError]:
    """Map an HTTP status (and provider error type) to an error class."""
    if error_type in ("overloaded_error", "api_error", "server_error"):
        return UpstreamUnavailable
    if error_type == "rate_limit_error":
        return RateLimited
    if status == 429:
        return RateLimited
    if status in (401, 403):
        return AuthFailed
    if status == 408:
        return UpstreamTimeout
    if status >= 500 or status == 529:
        return UpstreamUnavailable
    if 400 <= status < 500:
        return ClientRequestError
    return BadResponse
