"""Provider client interface and SDK-client cache (Django-free). SDK exceptions are mapped in
:mod:`routing.providers.sdk_errors`; reasoning replay is chosen in :mod:`routing.providers.reasoning`.

Modelled on healthchecks' ``hc/api/transports.py``: one small base class per transport,
failures expressed through one exception hierarchy (:mod:`routing.providers.errors`) whose
``retryable`` flag drives the caller's retry/fail-over policy.

Interface::

    client.complete(endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult
    client.stream(endpoint: EndpointConfig, request: CompletionRequest) -> Iterator[StreamEvent]

Both raise :class:`~routing.providers.errors.ProviderError` subclasses; ``stream`` raises
before the first content delta and yields a final ``error`` event after it (see
:class:`~routing.providers.types.StreamEvent`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

from routing.providers.errors import (
    BadResponse,
    ProviderError,
    StreamFailed,
)
from routing.providers.reasoning import bind_reasoning
from routing.providers.sdk_errors import SDK_EXCEPTIONS, map_exception
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    StreamEvent,
    Usage,
)

log = logging.getLogger("routing.providers")


class SDKClientCache:
    """Thread-safe in-process cache of SDK clients (and the native service's ``urllib3`` pools)
    keyed by endpoint transport + credential.

    Keys use the credential *fingerprint*, never the secret. ``get(key, factory)`` builds at
    most one client per key (SDK clients are thread-safe and hold connection pools).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[Hashable, Any] = {}

    def get(self, key: Hashable, factory: Callable[[], Any]) -> Any:
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = factory()
                self._clients[key] = client
            return client

    def clear(self) -> None:
        """Close and forget all cached clients (tests, credential rotation)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            close = getattr(client, "close", None)
            if callable(close):
                close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._clients)


#: Process-wide cache shared by all provider clients.
sdk_clients = SDKClientCache()


def client_cache_key(kind: str, endpoint: EndpointConfig) -> tuple[str, ...]:
    return (
        kind,
        endpoint.provider_kind,
        endpoint.base_url.rstrip("/"),
        endpoint.api_version or "",
        repr(float(endpoint.timeout_s)),
        endpoint.credential.fingerprint,
    )


class ProviderClient:
    """Base class of provider clients. Subclasses implement :meth:`_complete`/:meth:`_stream`.

    Instances are stateless apart from the shared :data:`sdk_clients` cache, so one instance
    per class can serve all endpoints concurrently.
    """

    #: ``api_style`` values this client speaks.
    api_styles: ClassVar[frozenset[str]] = frozenset()

    def complete(self, endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult:
        """Run one non-streaming completion. Raises :class:`ProviderError` subclasses."""
        self._check(endpoint)
        start = time.monotonic()
        try:
            result = self._complete(endpoint, request)
        except ProviderError:
            raise
        except SDK_EXCEPTIONS as exc:
            raise map_exception(exc, endpoint) from None
        return bind_reasoning(result, request).with_latency((time.monotonic() - start) * 1000.0)

    def stream(self, endpoint: EndpointConfig, request: CompletionRequest) -> ProviderStream:
        """Stream a completion: text/tool-call deltas, then one ``done`` event.

        Failures before any delta are raised (mapped); failures after content yield an
        ``error`` event carrying :class:`StreamFailed` (``after_content=True``) and end. Either
        way the error's ``usage`` holds the tokens the attempt had cost so far. The returned
        :class:`ProviderStream` can be closed early (client gone): :meth:`ProviderStream.close`
        closes the upstream HTTP response, and :meth:`ProviderStream.usage_so_far` tells what
        the abandoned attempt cost.
        """
        self._check(endpoint)
        progress = StreamProgress(start=time.monotonic())
        progress.estimated_input_tokens = estimate_input_tokens(request)
        return ProviderStream(self._guarded_stream(endpoint, request, progress), progress)

    # -- internals -------------------------------------------------------------------------

    def _check(self, endpoint: EndpointConfig) -> None:
        if self.api_styles and endpoint.api_style not in self.api_styles:
            raise ValueError(
                f"{type(self).__name__} cannot serve api_style={endpoint.api_style!r} "
                f"(endpoint {endpoint.public_id})"
            )

    def _guarded_stream(
        self, endpoint: EndpointConfig, request: CompletionRequest, state: StreamProgress
    ) -> Iterator[StreamEvent]:
        try:
            for event in self._stream(endpoint, request, state):
                if event.kind in ("text_delta", "tool_call_delta"):
                    if state.first_token_at is None:
                        state.first_token_at = time.monotonic()
                    state.content_sent = True
                    state.content_deltas += 1
                elif event.kind == "done" and event.result is not None:
                    event = replace(event, result=bind_reasoning(event.result, request))
                yield event
        except ProviderError as exc:
            err = exc
        except SDK_EXCEPTIONS as exc:
            err = map_exception(
                exc, endpoint, in_stream=state.response_started, after_content=state.content_sent
            )
        else:
            return
        if not isinstance(err, StreamFailed) and state.response_started:
            err = StreamFailed(
                err.message,
                after_content=state.content_sent,
                cause_class=type(err).__name__,
                retryable=err.retryable,
                status_code=err.status_code,
                upstream_request_id=err.upstream_request_id or state.request_id,
                provider_kind=endpoint.provider_kind,
                endpoint_id=endpoint.public_id,
                error_type=err.error_type,
                usage=err.usage,
            )
        if err.usage is None and state.response_started:
            err.usage = state.usage_so_far()
        if isinstance(err, StreamFailed) and err.after_content:
            log.warning("stream from %s failed after content: %s", endpoint.public_id, err.message)
            yield StreamEvent(kind="error", error=err)
            return
        raise err

    def _complete(self, endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult:
        raise NotImplementedError

    def _stream(
        self, endpoint: EndpointConfig, request: CompletionRequest, progress: StreamProgress
    ) -> Iterator[StreamEvent]:
        raise NotImplementedError


class StreamProgress:
    """Mutable bookkeeping shared between :meth:`ProviderClient._guarded_stream` and subclasses.

    Subclasses keep ``usage`` up to date with the merged usage snapshot received so far
    (:func:`~routing.providers.types.merge_usage`, then normalised).
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.first_token_at: float | None = None
        self.content_sent = False
        self.content_deltas = 0
        self.response_started = False  # HTTP 200 received, body streaming
        self.request_id: str | None = None
        self.usage: Usage | None = None
        self.estimated_input_tokens = 0

    def usage_so_far(self) -> Usage:
        """What the attempt has cost so far, in tokens.

        The upstream's latest merged snapshot when it sent one; output tokens are at least the
        number of content deltas received (streams send about one token per delta, and
        Anthropic's ``message_start`` says 1). Without any snapshot (Chat Completions reports
        usage only at the end) input is estimated from the request size (~4 characters a
        token). Estimated values are flagged ``vendor["estimated"] = 1``.
        """
        reported = self.usage or Usage()
        estimated = False
        input_tokens = reported.input_tokens
        if self.usage is None and self.response_started:
            input_tokens, estimated = self.estimated_input_tokens, True
        output_tokens = reported.output_tokens
        if self.content_deltas > output_tokens:
            output_tokens, estimated = self.content_deltas, True
        vendor = dict(reported.vendor)
        if estimated:
            vendor["estimated"] = 1
        return Usage(
            input_tokens=input_tokens,
            cached_input_tokens=reported.cached_input_tokens,
            cache_write_tokens=reported.cache_write_tokens,
            cache_write_1h_tokens=reported.cache_write_1h_tokens,
            output_tokens=output_tokens,
            reasoning_tokens=reported.reasoning_tokens,
            vendor=vendor,
        )

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.start) * 1000.0

    def ttft_ms(self) -> float | None:
        return None if self.first_token_at is None else (self.first_token_at - self.start) * 1000.0


class ProviderStream(Iterator[StreamEvent]):
    """The events of one upstream stream, plus what it has cost so far.

    Iterate it like the generator it wraps; :meth:`close` ends it early and closes the upstream
    HTTP response (the provider stops generating); :meth:`usage_so_far` is the attempt's
    :class:`~routing.providers.types.Usage` at any point (see
    :meth:`StreamProgress.usage_so_far`).
    """

    def __init__(self, events: Iterator[StreamEvent], progress: StreamProgress) -> None:
        self._events = events
        self.progress = progress

    def __iter__(self) -> ProviderStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if callable(close):
            close()

    def usage_so_far(self) -> Usage:
        return self.progress.usage_so_far()


def estimate_input_tokens(request: CompletionRequest) -> int:
    """Rough prompt size in tokens (~4 characters a token) for attempts the upstream never costed."""
    chars = sum(
        len(m.content) + sum(len(json.dumps(dict(c.arguments))) for c in m.tool_calls)
        for m in request.messages
    )
    chars += sum(len(t.description) + len(json.dumps(dict(t.parameters))) for t in request.tools)
    return max(1, chars // 4)


def usage_dict(usage: Any) -> dict[str, Any]:
    """A vendor usage object (SDK pydantic model or dict) as a plain dict of the fields it carried."""
    if usage is None:
        return {}
    if isinstance(usage, dict):
        return usage
    dump = getattr(usage, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    fields = (k for k in dir(usage) if not k.startswith("_"))
    return {k: v for k in fields if not callable(v := getattr(usage, k))}


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Decode a tool-call arguments JSON string; raises :class:`BadResponse` if not an object."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise BadResponse("tool call arguments are not valid JSON") from None
    if not isinstance(value, dict):
        raise BadResponse("tool call arguments are not a JSON object")
    return value
