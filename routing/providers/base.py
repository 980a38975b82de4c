"""Provider client interface, SDK-client cache and SDK-exception mapping (Django-free).

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
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

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
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    ReasoningState,
    StreamEvent,
    Usage,
    assistant_turn_digest,
    conversation_digests,
)

log = logging.getLogger("routing.providers")

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
        progress = _StreamProgress(start=time.monotonic())
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
        self, endpoint: EndpointConfig, request: CompletionRequest, state: _StreamProgress
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
        self, endpoint: EndpointConfig, request: CompletionRequest, progress: _StreamProgress
    ) -> Iterator[StreamEvent]:
        raise NotImplementedError


class _StreamProgress:
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
    :meth:`_StreamProgress.usage_so_far`).
    """

    def __init__(self, events: Iterator[StreamEvent], progress: _StreamProgress) -> None:
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


# --------------------------------------------------------------------------------------------
# Reasoning-state selection
# --------------------------------------------------------------------------------------------


def bind_reasoning(result: CompletionResult, request: CompletionRequest) -> CompletionResult:
    """``result`` with its reasoning state bound to the assistant turn it came with: the state's
    ``turn_digest`` is the :func:`~routing.providers.types.assistant_turn_digest` of the request's
    history plus the result's text and tool calls (see :func:`anchor_reasoning`)."""
    state = result.reasoning_state
    if state is None:
        return result
    digest = assistant_turn_digest(request.messages, result.text, result.tool_calls)
    return replace(result, reasoning_state=replace(state, turn_digest=digest))


def usable_reasoning_state(endpoint: EndpointConfig, request: CompletionRequest) -> list[ReasoningState]:
    """States produced by this exact endpoint+credential; others are dropped (logged, no content)."""
    usable = []
    for state in request.reasoning_state:
        if state.matches(endpoint):
            usable.append(state)
        else:
            log.info(
                "dropping reasoning state from another endpoint (items=%d) for %s",
                len(state.items),
                endpoint.public_id,
            )
    return usable


def anchor_reasoning(
    request: CompletionRequest, states: list[ReasoningState]
) -> dict[int, list[ReasoningState]]:
    """Map assistant-message index -> reasoning states to replay before that turn's content.

    ``states`` are in the order they were produced (oldest first). Each assistant message gets at
    most one state: the one that came with exactly that turn. A state *matches* a message when its
    ``turn_digest`` equals the message's :func:`~routing.providers.types.conversation_digests`
    entry (states without a digest: when its tool-call ids intersect the message's) and its
    ``tool_call_ids`` are the ids of the message's tool calls (a state that recorded none is not
    told apart by ids).

    A session may hold several states with the same digest: the same turn retried or regenerated
    (one ``X-Muse-Session-Id``, the same question asked twice, through one drop-in or several).
    Their reasoning is not interchangeable (each upstream response has its own tool-call ids and
    provider item ids; Responses then refuses a reasoning item "without its required following
    item", Anthropic thinking blocks that "cannot be modified"), so the tool-call ids the client
    sent back decide: the NEWEST state whose ids are the message's wins. When the digest matches
    but no state's ids do (ambiguous or inconsistent: e.g. the answer the client kept came
    without reasoning, or from another endpoint), nothing is replayed for that turn -- both APIs
    accept a turn without its reasoning (Anthropic's tool loop then goes without ``thinking``:
    :func:`routing.providers.anthropic_messages._tool_loop_without_thinking`), never a wrong one.

    A state whose turn is not in the history any more (the client edited or dropped it) is
    dropped, never moved to another turn, and no state is replayed twice.
    """
    digests = conversation_digests(request.messages)
    out: dict[int, list[ReasoningState]] = {}
    used: set[int] = set()
    ambiguous = 0
    for i, m in enumerate(request.messages):
        if m.role != "assistant":
            continue
        ids = {tc.id for tc in m.tool_calls}
        exact: int | None = None  # newest state with these very tool-call ids
        unlabelled: int | None = None  # newest state that recorded no tool-call ids
        same_turn = False
        for n, state in enumerate(states):
            if n in used:
                continue
            if state.turn_digest:
                if digests[i] != state.turn_digest:
                    continue
            elif not (set(state.tool_call_ids) & ids):
                continue
            same_turn = True
            if not state.tool_call_ids:
                unlabelled = n
            elif set(state.tool_call_ids) == ids:
                exact = n
        chosen = exact if exact is not None else unlabelled
        if chosen is None:
            ambiguous += same_turn
            continue
        used.add(chosen)
        out[i] = [states[chosen]]
    dropped = len(states) - len(used)
    if ambiguous:
        log.info(
            "reasoning: %d turn(s) sent without reasoning (stored states of that turn do not match its tool calls)",
            ambiguous,
        )
    if dropped:
        log.info(
            "reasoning: %d state(s) not replayed (superseded, or their assistant turn is no longer in the history)",
            dropped,
        )
    return out


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


# --------------------------------------------------------------------------------------------
# Exception mapping
# --------------------------------------------------------------------------------------------


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
