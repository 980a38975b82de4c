"""SDK and transport exceptions as the provider error hierarchy (Django-free): which exceptions a
call can raise (:data:`SDK_EXCEPTIONS`) and how each becomes a
:class:`~routing.providers.errors.ProviderError` subclass (:func:`map_exception`), with the wait an
upstream asked for (:func:`parse_retry_after`: ``retry-after-ms``, ``retry-after`` seconds or an
HTTP date, Anthropic's reset headers)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import anthropic
import httpx2
import openai
import urllib3

from routing.providers.errors import (
    BadResponse,
    ConnectionFailed,
    ProviderError,
    StreamFailed,
    UpstreamTimeout,
    UpstreamUnavailable,
    class_for_status,
    safe_error_type,
    safe_upstream_message,
)
from routing.providers.types import (
    EndpointConfig,
)

#: Exceptions the SDK/transport layer can raise during a call; all are mapped by
#: :func:`map_exception`. Anything else is a bug in our code and propagates unchanged.
SDK_EXCEPTIONS: tuple[type[BaseException], ...] = (
    openai.OpenAIError,
    anthropic.AnthropicError,
    httpx2.HTTPError,
    httpx2.StreamError,
    urllib3.exceptions.HTTPError,  # the native service's non-streamed calls (transport.watched_pool)
    ValueError,  # json.JSONDecodeError, pydantic.ValidationError
    OSError,
)


#: Anthropic's per-limit reset headers (RFC 3339 times), read when no ``retry-after`` came:
#: https://docs.anthropic.com/en/api/rate-limits#response-headers
ANTHROPIC_RESET_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")


def parse_retry_after(headers: Any) -> float | None:
    """Seconds the upstream asks us to wait, else None.

    In order: ``retry-after-ms`` (milliseconds), ``retry-after`` (seconds or an HTTP date), then
    Anthropic's ``anthropic-ratelimit-<limit>-reset`` (RFC 3339): the latest reset among the
    limits whose ``-remaining`` is 0 (when none says 0: the latest reset given).
    """
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, IndexError):
            pass
    return _anthropic_reset_s(headers)


def _anthropic_reset_s(headers: Any) -> float | None:
    exhausted, given = [], []
    for limit in ANTHROPIC_RESET_LIMITS:
        raw = headers.get(f"anthropic-ratelimit-{limit}-reset")
        if not raw:
            continue
        try:
            seconds = datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp() - time.time()
        except (TypeError, ValueError):
            continue
        given.append(seconds)
        if (headers.get(f"anthropic-ratelimit-{limit}-remaining") or "").strip() == "0":
            exhausted.append(seconds)
    chosen = exhausted or given
    return max(0.0, max(chosen)) if chosen else None


def _status_error_details(exc: Exception) -> tuple[str | None, str | None]:
    """(error_type, upstream message) from an OpenAI or Anthropic status error body."""
    body = getattr(exc, "body", None)
    etype = None
    msg = None
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        etype = inner.get("type") or inner.get("code")
        msg = inner.get("message")
        if etype is not None:
            etype = str(etype)
    return etype, msg if isinstance(msg, str) else None


def map_exception(
    exc: BaseException,
    endpoint: EndpointConfig,
    *,
    in_stream: bool = False,
    after_content: bool = False,
) -> ProviderError:
    """Translate an SDK / httpx2 / parsing exception into a :class:`ProviderError`.

    The message names the endpoint and status; the upstream's own text is passed through
    :func:`~routing.providers.errors.safe_upstream_message` (no credential, nothing key-like,
    no encrypted reasoning or reasoning item ids, at most 500 characters). The provider's error
    type/code and status are kept. ``in_stream`` marks failures that happened while reading an
    HTTP 200 stream (mapped to :class:`StreamFailed`).
    """
    secrets = (endpoint.credential.reveal(),)
    common: dict[str, Any] = {"provider_kind": endpoint.provider_kind, "endpoint_id": endpoint.public_id}
    prefix = f"{endpoint.provider_kind} endpoint {endpoint.public_id}"

    def upstream(text: str | None) -> str:
        return safe_upstream_message(text, secrets) if text else ""

    def build(cls: type[ProviderError], text: str, **kw: Any) -> ProviderError:
        # ``text`` is ours, with the upstream's words already through upstream(); ProviderError
        # sanitises the whole message once more as it is created
        message = f"{prefix}: {text}"
        if in_stream:
            retryable = kw.pop("retryable", cls.default_retryable)
            return StreamFailed(
                message,
                after_content=after_content,
                cause_class=cls.__name__,
                retryable=retryable,
                **common,
                **kw,
            )
        return cls(message, **common, **kw)

    if isinstance(exc, ProviderError):
        return exc
    # Timeouts first (APITimeoutError subclasses APIConnectionError).
    if isinstance(exc, (openai.APITimeoutError, anthropic.APITimeoutError, httpx2.TimeoutException)):
        return build(UpstreamTimeout, f"timed out after {endpoint.timeout_s:g}s")
    if isinstance(exc, (openai.APIConnectionError, anthropic.APIConnectionError)):
        cause = exc.__cause__ or exc.__context__
        detail = type(cause).__name__ if cause is not None else "connection error"
        return build(ConnectionFailed, f"connection failed ({detail})")
    if isinstance(exc, httpx2.DecodingError):
        return build(BadResponse, "could not decode response body")
    if isinstance(exc, httpx2.TransportError):
        return build(ConnectionFailed, f"connection failed ({type(exc).__name__})")
    if isinstance(exc, (openai.APIResponseValidationError, anthropic.APIResponseValidationError)):
        return build(BadResponse, "response did not match the expected schema", status_code=exc.status_code)
    if isinstance(exc, (openai.APIStatusError, anthropic.APIStatusError)):
        status = exc.status_code
        etype, upstream_msg = _status_error_details(exc)
        etype, upstream_msg = safe_error_type(etype), upstream(upstream_msg)
        request_id = getattr(exc, "request_id", None)
        text = (
            f"HTTP {status}" + (f" {etype}" if etype else "") + (f": {upstream_msg}" if upstream_msg else "")
        )
        if status == 200:  # Anthropic in-stream `error` event
            cls = class_for_status(500, etype) if etype else UpstreamUnavailable
            in_stream = True
            text = f"in-stream error {etype or ''}: {upstream_msg or ''}".strip()
        else:
            cls = class_for_status(status, etype if status >= 500 or status == 429 else None)
        return build(
            cls,
            text,
            status_code=None if status == 200 else status,
            retry_after_s=parse_retry_after(exc.response.headers),
            upstream_request_id=request_id,
            error_type=etype,
        )
    if isinstance(exc, (openai.APIError, anthropic.APIError)):
        # OpenAI legacy in-stream `{"error": {...}}` data: no HTTP status.
        body = getattr(exc, "body", None)
        etype = None
        msg = getattr(exc, "message", "") or ""
        if isinstance(body, dict):
            etype = safe_error_type(body.get("type") or body.get("code"))
        text = f"upstream error {etype or ''}: {upstream(msg)}".strip()
        return build(UpstreamUnavailable, text, error_type=etype)
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return _urllib3_error(exc, endpoint, build)
    if isinstance(exc, ValueError):  # json.JSONDecodeError, pydantic ValidationError
        return build(BadResponse, f"malformed response ({type(exc).__name__})")
    if isinstance(exc, OSError):
        return build(ConnectionFailed, f"connection failed ({type(exc).__name__})")
    return build(ProviderError, f"unexpected {type(exc).__name__}", retryable=False)


def _urllib3_error(
    exc: urllib3.exceptions.HTTPError, endpoint: EndpointConfig, build: Callable[..., ProviderError]
) -> ProviderError:
    """:func:`map_exception` for ``urllib3`` (the native service's calls): the same classes and
    wording as for the SDK's ``httpx2`` errors; a connection that was refused or could not be
    resolved is a failed connection, not a timeout (``NewConnectionError`` subclasses urllib3's
    ``ConnectTimeoutError``)."""
    errors = urllib3.exceptions
    if isinstance(exc, errors.NewConnectionError):
        return build(ConnectionFailed, f"connection failed ({type(exc).__name__})")
    if isinstance(exc, errors.TimeoutError):
        return build(UpstreamTimeout, f"timed out after {endpoint.timeout_s:g}s")
    if isinstance(exc, errors.DecodeError):
        return build(BadResponse, "could not decode response body")
    cause = exc.args[1] if isinstance(exc, errors.ProtocolError) and len(exc.args) > 1 else exc
    return build(ConnectionFailed, f"connection failed ({type(cause).__name__})")
