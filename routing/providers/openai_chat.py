"""Chat Completions client: native "Avocado" inference service, OpenAI, Azure OpenAI.

Wire format: https://platform.openai.com/docs/api-reference/chat (``POST /chat/completions``;
streaming ``data: {chunk}`` lines ending with ``data: [DONE]``; usage in the final chunk
when ``stream_options.include_usage`` is true).

Request mapping (neutral -> chat):

* messages: ``system``/``user`` -> same role; ``assistant`` -> ``content`` + ``tool_calls``
  (``function.arguments`` JSON string; ``content`` null only beside tool calls, else ``""``:
  OpenAI answers a null content without tool calls with a 400); ``tool`` -> ``{"role": "tool", "tool_call_id", "content"}``.
* tools -> ``{"type": "function", "function": {name, description, parameters}}`` after the
  ``allowed_tools`` filter.
* ``reasoning_effort`` -> ``reasoning_effort``; ``temperature`` -> ``temperature``;
  ``max_output_tokens`` -> ``max_completion_tokens`` (OpenAI/Azure) or ``max_tokens`` (native).
* output contracts -> ``response_format``, ``tool_choice``, ``parallel_tool_calls``
  (:func:`routing.providers._openai_common.contract_kwargs`).
* ``reasoning_state`` is not used: Chat Completions has no encrypted reasoning to replay.

Usage: ``prompt_tokens`` (includes ``prompt_tokens_details.cached_tokens``),
``completion_tokens`` (includes ``completion_tokens_details.reasoning_tokens``).

The call goes through the official SDK's client (its HTTP stack, Azure deployment URLs, auth,
error classes) with ``client.post`` rather than ``chat.completions.create`` (why:
:mod:`routing.providers._openai_common`). A non-streamed answer is read from the response's JSON
(``cast_to=httpx2.Response``, the raw-response cast of the SDK's README for ``client.post``)
instead of being built into the SDK's typed :class:`ChatCompletion`: the few fields read here are
checked as they are read (anything malformed is :class:`~routing.providers.errors.BadResponse`).
The typed build is on the worker's critical path and the SDK's ``construct_type`` is pure Python
(``bench/bench_execute_job.py``). Streamed chunks stay typed (:class:`ChatCompletionChunk`).

The native service (``provider_kind`` ``native``: Avocado, our own) is not a vendor with an
official SDK of its own; its non-streamed calls are POSTed through a ``urllib3`` pool
(:func:`native_route`; :func:`routing.providers.transport.watched_pool`: cancellable like the
SDK's connections), bearer auth, the same JSON body, the same answer checks. An error status
becomes the SDK's own :class:`openai.APIStatusError` and urllib3's errors map to the same classes
as ``httpx2``'s (:func:`routing.providers.sdk_errors.map_exception`). Why: what
:func:`~routing.providers.transport.watched_pool` buys. Its streams, and native endpoints reached
through an environment proxy, stay on the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import httpx2
import openai
import urllib3
from openai import Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from routing.providers._openai_common import INFERENCE_OPTIONS, contract_kwargs, openai_sdk_client
from routing.providers.base import (
    ProviderClient,
    StreamProgress,
    client_cache_key,
    parse_arguments,
    sdk_clients,
)
from routing.providers.errors import BadResponse
from routing.providers.pricing import compute_cost_usd
from routing.providers.tool_ids import ToolIdMap
from routing.providers.transport import watched_pool
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    Usage,
)

#: The ``User-Agent`` of calls to the native service.
NATIVE_USER_AGENT = f"muse-experiments urllib3/{urllib3.__version__}"

FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def build_chat_messages(request: CompletionRequest, ids: ToolIdMap | None = None) -> list[dict[str, Any]]:
    """Neutral messages -> chat ``messages``; tool-call ids mapped to what Chat Completions accepts."""
    ids = ids if ids is not None else ToolIdMap("chat_completions")
    out: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": ids.out(m.tool_call_id or ""), "content": m.content})
        elif m.role == "assistant":
            # null content only beside tool calls: OpenAI refuses it on a turn without any
            msg: dict[str, Any] = {
                "role": "assistant",
                "content": m.content or (None if m.tool_calls else ""),
            }
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": ids.out(tc.id),
                        "type": "function",
                        "function": {"name": tc.name, "arguments": json.dumps(dict(tc.arguments))},
                    }
                    for tc in m.tool_calls
                ]
            out.append(msg)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


#: The Chat Completions path, relative to the client's base URL (Azure's client maps it to its
#: deployment's URL by the body's ``model``, as ``chat.completions.create`` does).
CHAT_PATH = "/chat/completions"


def build_chat_kwargs(
    endpoint: EndpointConfig, request: CompletionRequest, ids: ToolIdMap | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": endpoint.upstream_model, "messages": build_chat_messages(request, ids)}
    tools = request.effective_tools()
    if tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            }
            for t in tools
        ]
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.max_output_tokens is not None:
        key = "max_tokens" if endpoint.provider_kind == "native" else "max_completion_tokens"
        kwargs[key] = request.max_output_tokens
    kwargs.update(contract_kwargs(request, style="chat", has_tools=bool(tools)))
    return kwargs


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a JSON object, ``obj.name`` of an SDK model; None if absent."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def chat_usage(usage: Any) -> Usage:
    """Chat Completions ``usage`` (a JSON object or the SDK's model; None) -> :class:`Usage` (tokens;
    a count the upstream left out is 0)."""
    if usage is None:
        return Usage()
    ptd = _field(usage, "prompt_tokens_details")
    ctd = _field(usage, "completion_tokens_details")
    cached = (_field(ptd, "cached_tokens") or 0) if ptd else 0
    write = (_field(ptd, "cache_write_tokens") or 0) if ptd else 0
    reasoning = (_field(ctd, "reasoning_tokens") or 0) if ctd else 0
    prompt, completion = _field(usage, "prompt_tokens") or 0, _field(usage, "completion_tokens") or 0
    vendor = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details.cached_tokens": cached,
        "prompt_tokens_details.cache_write_tokens": write,
        "completion_tokens_details.reasoning_tokens": reasoning,
    }
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=cached,
        cache_write_tokens=write,
        output_tokens=completion,
        reasoning_tokens=reasoning,
        vendor=vendor,
    )


def _answer(response: _Answer, endpoint: EndpointConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(completion, first choice)`` of a non-streamed answer's JSON. Raises :class:`BadResponse`
    if the body is not a JSON object with a first choice holding a ``message`` object whose
    ``content`` is text or null."""
    try:
        completion = json.loads(response.content)
    except ValueError:
        raise _bad(response, endpoint, "the answer is not JSON") from None
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not choices or not isinstance(choices, list):
        raise _bad(response, endpoint, "completion without choices")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise _bad(response, endpoint, "completion choice without a message")
    if not isinstance(choice["message"].get("content") or "", str):
        raise _bad(response, endpoint, "message content is not text")
    return completion, choice


def _usage(completion: dict[str, Any], response: _Answer, endpoint: EndpointConfig) -> Usage:
    """The answer's ``usage`` as :class:`Usage` (tokens; none reported: zeros). Raises
    :class:`BadResponse` unless it is an object (its details too) whose token counts are whole
    numbers ≥ 0."""
    raw = completion.get("usage")
    if raw is not None and not isinstance(raw, dict):
        raise _bad(response, endpoint, "usage is not an object")
    for details in ("prompt_tokens_details", "completion_tokens_details"):
        if raw and raw.get(details) is not None and not isinstance(raw[details], dict):
            raise _bad(response, endpoint, f"usage.{details} is not an object")
    usage = chat_usage(raw)
    counts = (
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
    )
    if any(type(n) is not int or n < 0 for n in counts):
        raise _bad(response, endpoint, "usage holds a token count that is not a whole number")
    return usage


def _tool_calls(
    message: dict[str, Any], ids: ToolIdMap, response: _Answer, endpoint: EndpointConfig
) -> tuple[ToolCall, ...]:
    """The function calls of an answer's ``message`` (ids mapped back). Raises :class:`BadResponse`
    on a malformed call, or arguments that are not a JSON object."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _bad(response, endpoint, "tool_calls is not a list")
    out = []
    for tc in calls:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if fn is None:
            continue
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(response, endpoint, "a tool call without a function name")
        out.append(
            ToolCall(
                id=ids.back(str(tc.get("id") or "")),
                name=fn["name"],
                arguments=parse_arguments(fn.get("arguments")),
            )
        )
    return tuple(out)


def _bad(response: _Answer, endpoint: EndpointConfig, what: str) -> BadResponse:
    """A retryable :class:`BadResponse` naming the endpoint (the body is never quoted)."""
    return BadResponse(
        f"{endpoint.public_id}: {what}",
        upstream_request_id=response.request_id,
        provider_kind=endpoint.provider_kind,
        endpoint_id=endpoint.public_id,
    )


class _Answer(NamedTuple):
    """A non-streamed answer as read here: its body and its ``x-request-id``."""

    content: bytes
    request_id: str | None


class NativeRoute(NamedTuple):
    """Where a native endpoint's non-streamed calls go: its watched ``urllib3`` pool (None when
    an environment proxy applies: the SDK's client serves it), the Chat Completions path on the
    pool's host, and the full URL (named in errors)."""

    pool: urllib3.HTTPConnectionPool | None
    path: str
    url: str

    def close(self) -> None:
        """Close the pool's connections (:meth:`~routing.providers.base.SDKClientCache.clear`)."""
        if self.pool is not None:
            self.pool.close()


def native_route(endpoint: EndpointConfig) -> NativeRoute:
    """The cached :class:`NativeRoute` of a native endpoint (one per endpoint transport and
    credential, as SDK clients are; :func:`~routing.providers.transport.watched_pool`)."""

    def build() -> NativeRoute:
        url = endpoint.base_url.rstrip("/") + CHAT_PATH
        pool = watched_pool(endpoint.base_url, timeout_s=endpoint.timeout_s)
        return NativeRoute(pool, urllib3.util.parse_url(url).path or CHAT_PATH, url)

    return sdk_clients.get(client_cache_key("native-urllib3", endpoint), build)


def _post_native(route: NativeRoute, endpoint: EndpointConfig, body: dict[str, Any]) -> _Answer:
    """POST ``body`` on ``route`` (its pool must be set) with the endpoint's key as bearer auth.
    An HTTP error status raises what the SDK would have raised for it (:class:`openai.APIStatusError`,
    mapped by the caller with the SDK's other errors)."""
    answer = route.pool.urlopen(
        "POST",
        route.path,
        body=json.dumps(body, separators=(",", ":")).encode(),
        headers={
            "Authorization": f"Bearer {endpoint.credential.reveal()}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": NATIVE_USER_AGENT,
        },
        redirect=False,
    )
    if answer.status >= 400:
        raise _status_error(answer, route.url)
    return _Answer(answer.data, answer.headers.get("x-request-id"))


def _status_error(answer: urllib3.BaseHTTPResponse, url: str) -> openai.APIStatusError:
    """The SDK's error for an error status (its body parsed as the SDK does), so that
    :func:`routing.providers.sdk_errors.map_exception` reads it as it reads the SDK's own."""
    text = answer.data.decode("utf-8", "replace").strip()
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text or None
    response = httpx2.Response(
        answer.status,
        headers=list(answer.headers.items()),
        content=answer.data,
        request=httpx2.Request("POST", url),
    )
    return openai.APIStatusError(f"Error code: {answer.status}", response=response, body=body)


class OpenAIChatClient(ProviderClient):
    """``complete``/``stream`` over Chat Completions (native, openai, azure_openai)."""

    api_styles = frozenset({"chat_completions"})

    def _complete(self, endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult:
        ids = ToolIdMap("chat_completions")
        body = build_chat_kwargs(endpoint, request, ids)
        route = native_route(endpoint) if endpoint.provider_kind == "native" else None
        if route is not None and route.pool is not None:
            response = _post_native(route, endpoint, body)
        else:
            answer = openai_sdk_client(endpoint).post(
                CHAT_PATH, body=body, cast_to=httpx2.Response, options=INFERENCE_OPTIONS
            )
            response = _Answer(answer.content, answer.headers.get("x-request-id"))
        completion, choice = _answer(response, endpoint)
        msg = choice["message"]
        usage = _usage(completion, response, endpoint)
        return CompletionResult(
            text=msg.get("content") or "",
            tool_calls=_tool_calls(msg, ids, response, endpoint),
            finish_reason=FINISH_REASONS.get(str(choice.get("finish_reason") or ""), "stop"),
            usage=usage,
            cost_usd=compute_cost_usd(usage, endpoint),
            latency_ms=0.0,
            upstream_request_id=response.request_id,
            endpoint_id=endpoint.public_id,
            upstream_model=endpoint.upstream_model,
        )

    def _stream(
        self, endpoint: EndpointConfig, request: CompletionRequest, progress: StreamProgress
    ) -> Iterator[StreamEvent]:
        client = openai_sdk_client(endpoint)
        ids = ToolIdMap("chat_completions")
        stream = client.post(
            CHAT_PATH,
            body={
                **build_chat_kwargs(endpoint, request, ids),
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            cast_to=ChatCompletion,
            options=INFERENCE_OPTIONS,
            stream=True,
            stream_cls=Stream[ChatCompletionChunk],
        )
        progress.response_started = True
        progress.request_id = stream.response.headers.get("x-request-id")
        text_parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage = None
        with stream:
            for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                    progress.usage = chat_usage(usage)
                for choice in chunk.choices or ():
                    if choice.index != 0:
                        continue
                    delta = choice.delta
                    if delta is not None and delta.content:
                        text_parts.append(delta.content)
                        yield StreamEvent(kind="text_delta", text=delta.content)
                    for tc in (delta.tool_calls if delta is not None else None) or ():
                        entry = calls.setdefault(tc.index, {"id": None, "name": None, "args": []})
                        fn = tc.function
                        name = fn.name if fn is not None else None
                        args = (fn.arguments if fn is not None else None) or ""
                        call_id = ids.back(tc.id) if tc.id else None
                        if call_id:
                            entry["id"] = call_id
                        if name:
                            entry["name"] = name
                        entry["args"].append(args)
                        yield StreamEvent(
                            kind="tool_call_delta",
                            tool_call=ToolCallDelta(
                                index=tc.index, id=call_id, name=name, arguments_delta=args
                            ),
                        )
                    if choice.finish_reason:
                        finish = choice.finish_reason
        if finish is None:
            raise BadResponse(f"{endpoint.public_id}: stream ended before a finish_reason")
        tool_calls = tuple(
            ToolCall(id=c["id"] or "", name=c["name"] or "", arguments=parse_arguments("".join(c["args"])))
            for _, c in sorted(calls.items())
        )
        norm_usage = chat_usage(usage)
        result = CompletionResult(
            text="".join(text_parts),
            tool_calls=tool_calls,
            finish_reason=FINISH_REASONS.get(finish, "stop"),
            usage=norm_usage,
            cost_usd=compute_cost_usd(norm_usage, endpoint),
            latency_ms=progress.elapsed_ms(),
            upstream_request_id=progress.request_id,
            endpoint_id=endpoint.public_id,
            upstream_model=endpoint.upstream_model,
            time_to_first_token_ms=progress.ttft_ms(),
        )
        yield StreamEvent(kind="done", result=result)
