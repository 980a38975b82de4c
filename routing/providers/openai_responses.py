"""Responses API client: OpenAI and Azure OpenAI (dated api-version or ``/openai/v1/``).

Wire format: https://platform.openai.com/docs/api-reference/responses and
https://platform.openai.com/docs/guides/reasoning#keeping-reasoning-items-in-context .

Always ``store=False`` (nothing kept upstream), so multi-turn reasoning must be replayed by us:
with the ``reasoning`` capability the request sets ``include=["reasoning.encrypted_content"]``
and every returned ``reasoning`` item (``id``, ``summary``, ``encrypted_content``) goes -- and
only goes -- into ``CompletionResult.reasoning_state``. On the next turn the items are put back
verbatim, in order, right before that turn's assistant message / ``function_call`` items and
their ``function_call_output`` items. State from another endpoint/credential is dropped
(the blob is bound to the producing organisation/deployment).

Output contracts -> ``text.format``, ``tool_choice``, ``parallel_tool_calls``
(:func:`routing.providers._openai_common.contract_kwargs`).

Streaming: ``response.output_text.delta`` -> text delta; ``response.output_item.added``
(``function_call``) + ``response.function_call_arguments.delta`` -> tool-call deltas, and the
arguments any of ``function_call_arguments.done`` / ``output_item.done`` carries whole that the
deltas did not (some servers send them only there: :func:`_arguments`); reasoning
is taken from ``response.completed`` (the ``output_item.added`` blob "may be incomplete");
``error`` / ``response.failed`` -> failure. Reasoning never appears in any emitted event.

The call goes through the official SDK's client (its HTTP stack, Azure URLs, auth, error classes,
typed :class:`Response` / :class:`ResponseStreamEvent` parsing) with ``client.post`` rather than
``responses.create`` (why: :mod:`routing.providers._openai_common`).

Usage: ``input_tokens`` includes ``input_tokens_details.cached_tokens`` (and
``cache_write_tokens``); ``output_tokens`` includes ``output_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from openai import Stream
from openai.types.responses import Response, ResponseStreamEvent

from routing.providers._openai_common import INFERENCE_OPTIONS, contract_kwargs, openai_sdk_client
from routing.providers.base import (
    ProviderClient,
    StreamProgress,
    parse_arguments,
    usage_dict,
)
from routing.providers.errors import BadResponse, UpstreamUnavailable, safe_error_type, safe_upstream_message
from routing.providers.pricing import compute_cost_usd
from routing.providers.reasoning import anchor_reasoning, usable_reasoning_state
from routing.providers.tool_ids import ToolIdMap
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    ReasoningState,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    Usage,
    merge_usage,
)

RESPONSES_PATH = "/responses"


def _dump(item: Any) -> dict[str, Any]:
    """Provider item as the JSON object received (fields present on the wire, incl. extras)."""
    return item.model_dump(mode="json", exclude_unset=True, by_alias=True)


def build_input(
    endpoint: EndpointConfig, request: CompletionRequest, ids: ToolIdMap | None = None
) -> list[dict[str, Any]]:
    """Neutral messages -> Responses ``input`` items; call ids mapped to what Responses accepts."""
    ids = ids if ids is not None else ToolIdMap("responses")
    anchored = anchor_reasoning(request, usable_reasoning_state(endpoint, request))
    items: list[dict[str, Any]] = []
    for idx, m in enumerate(request.messages):
        if m.role == "system":
            continue  # -> instructions
        if m.role == "user":
            items.append({"role": "user", "content": m.content})
        elif m.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": ids.out(m.tool_call_id or ""),
                    "output": m.content,
                }
            )
        else:
            native_ids: dict[str, str] = {}
            for state in anchored.get(idx, ()):
                items.extend(dict(item) for item in state.items)
                native_ids.update(state.native_ids)
            if m.content:
                items.append({"role": "assistant", "content": m.content})
            for tc in m.tool_calls:
                call: dict[str, Any] = {
                    "type": "function_call",
                    "call_id": ids.out(tc.id),
                    "name": tc.name,
                    "arguments": json.dumps(dict(tc.arguments)),
                }
                if tc.id in native_ids:
                    call["id"] = native_ids[tc.id]
                items.append(call)
    return items


def build_responses_kwargs(
    endpoint: EndpointConfig, request: CompletionRequest, ids: ToolIdMap | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": endpoint.upstream_model,
        "input": build_input(endpoint, request, ids),
        "store": False,
    }
    system = request.system_text()
    if system:
        kwargs["instructions"] = system
    tools = request.effective_tools()
    if tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
                "strict": False,
            }
            for t in tools
        ]
    if endpoint.has("reasoning"):
        kwargs["include"] = ["reasoning.encrypted_content"]
    if request.reasoning_effort is not None:
        kwargs["reasoning"] = {"effort": request.reasoning_effort}
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.max_output_tokens is not None:
        kwargs["max_output_tokens"] = request.max_output_tokens
    kwargs.update(contract_kwargs(request, style="responses", has_tools=bool(tools)))
    return kwargs


def responses_usage(usage: Any) -> Usage:
    """Normalised :class:`Usage` from a Responses usage object or (merged) dict."""
    raw = usage_dict(usage)
    if not raw:
        return Usage()
    itd = raw.get("input_tokens_details") or {}
    otd = raw.get("output_tokens_details") or {}
    cached = itd.get("cached_tokens") or 0
    write = itd.get("cache_write_tokens") or 0
    reasoning = otd.get("reasoning_tokens") or 0
    input_tokens = raw.get("input_tokens") or 0
    output_tokens = raw.get("output_tokens") or 0
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        cache_write_tokens=write,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning,
        vendor={
            "input_tokens": input_tokens,
            "input_tokens_details.cached_tokens": cached,
            "input_tokens_details.cache_write_tokens": write,
            "output_tokens": output_tokens,
            "output_tokens_details.reasoning_tokens": reasoning,
        },
    )


def parse_response(
    endpoint: EndpointConfig,
    response: Any,
    request_id: str | None,
    usage: Usage | None = None,
    ids: ToolIdMap | None = None,
) -> CompletionResult:
    """Normalise a ``Response`` object. Raises :class:`UpstreamUnavailable` if it failed.

    ``usage`` (a stream's merged snapshots) overrides the response's own; a failed response's
    usage travels on the error (``ProviderError.usage``): the provider billed those tokens.
    """
    ids = ids if ids is not None else ToolIdMap("responses")
    status = getattr(response, "status", None)
    if usage is None:
        usage = responses_usage(getattr(response, "usage", None))
    if status == "failed":
        err = getattr(response, "error", None)
        code = getattr(err, "code", None)
        msg = getattr(err, "message", "") or ""
        code = safe_error_type(code) if code else None
        msg = safe_upstream_message(msg, [endpoint.credential.reveal()])
        raise UpstreamUnavailable(
            f"{endpoint.public_id}: response failed {code or ''}: {msg}",
            upstream_request_id=request_id,
            provider_kind=endpoint.provider_kind,
            endpoint_id=endpoint.public_id,
            error_type=code,
            usage=usage,
        )
    text_parts: list[str] = []
    tool_calls: list[ToolCall] = []
    reasoning_items: list[dict[str, Any]] = []
    native_ids: dict[str, str] = {}
    refused = False
    for item in response.output or ():
        itype = getattr(item, "type", None)
        if itype == "reasoning":
            dumped = _dump(item)
            if dumped.get("encrypted_content"):
                reasoning_items.append(dumped)
        elif itype == "message":
            for part in item.content or ():
                ptype = getattr(part, "type", None)
                if ptype == "output_text":
                    text_parts.append(part.text)
                elif ptype == "refusal":
                    refused = True
        elif itype == "function_call":
            tool_calls.append(
                ToolCall(id=ids.back(item.call_id), name=item.name, arguments=parse_arguments(item.arguments))
            )
            if getattr(item, "id", None):
                native_ids[ids.back(item.call_id)] = item.id
    if status == "incomplete":
        reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
        finish = "content_filter" if reason == "content_filter" else "length"
    elif refused:
        finish = "content_filter"
    else:
        finish = "tool_calls" if tool_calls else "stop"
    state = None
    if reasoning_items:
        state = ReasoningState(
            endpoint_fingerprint=endpoint.fingerprint,
            provider_kind=endpoint.provider_kind,
            api_style="responses",
            items=tuple(reasoning_items),
            tool_call_ids=tuple(tc.id for tc in tool_calls),
            native_ids=native_ids,
        )
    return CompletionResult(
        text="".join(text_parts),
        tool_calls=tuple(tool_calls),
        finish_reason=finish,
        usage=usage,
        cost_usd=compute_cost_usd(usage, endpoint),
        latency_ms=0.0,
        upstream_request_id=request_id,
        endpoint_id=endpoint.public_id,
        upstream_model=endpoint.upstream_model,
        reasoning_state=state,
    )


def _arguments(
    index: int, sent: dict[str, str], item_id: str, value: str | None, *, whole: bool
) -> Iterator[StreamEvent]:
    """The arguments delta of function call ``index`` for ``value``: a delta as it is; the whole
    arguments (``output_item.added`` / ``.done``, ``function_call_arguments.done``) as what of
    them was not streamed yet — all of them when nothing was, the rest when the deltas sent are
    their beginning, nothing otherwise (the final value comes from ``response.completed``).
    ``sent`` (item id -> arguments streamed) is updated."""
    have = sent[item_id]
    piece = value or ""
    if whole:
        piece = piece[len(have) :] if piece.startswith(have) else ""
    if piece:
        sent[item_id] = have + piece
        yield StreamEvent(kind="tool_call_delta", tool_call=ToolCallDelta(index=index, arguments_delta=piece))


class OpenAIResponsesClient(ProviderClient):
    """``complete``/``stream`` over the Responses API (openai, azure_openai)."""

    api_styles = frozenset({"responses"})

    def _complete(self, endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult:
        client = openai_sdk_client(endpoint)
        ids = ToolIdMap("responses")
        response = client.post(
            RESPONSES_PATH,
            body=build_responses_kwargs(endpoint, request, ids),
            cast_to=Response,
            options=INFERENCE_OPTIONS,
        )
        return parse_response(endpoint, response, getattr(response, "_request_id", None), ids=ids)

    def _stream(
        self, endpoint: EndpointConfig, request: CompletionRequest, progress: StreamProgress
    ) -> Iterator[StreamEvent]:
        client = openai_sdk_client(endpoint)
        ids = ToolIdMap("responses")
        stream = client.post(
            RESPONSES_PATH,
            body={**build_responses_kwargs(endpoint, request, ids), "stream": True},
            cast_to=Response,
            options=INFERENCE_OPTIONS,
            stream=True,
            stream_cls=Stream[ResponseStreamEvent],
        )
        progress.response_started = True
        progress.request_id = stream.response.headers.get("x-request-id")
        tool_index: dict[str, int] = {}  # output item id -> tool call index
        sent: dict[str, str] = {}  # output item id -> arguments streamed so far
        final = None
        raw_usage: dict[str, Any] = {}  # usage snapshots of response.* events, merged field by field
        secrets = [endpoint.credential.reveal()]
        with stream:
            for event in stream:
                etype = getattr(event, "type", None)
                snapshot = getattr(getattr(event, "response", None), "usage", None)
                if snapshot is not None:
                    raw_usage = merge_usage(raw_usage, usage_dict(snapshot))
                    progress.usage = responses_usage(raw_usage)
                if etype == "response.output_text.delta":
                    yield StreamEvent(kind="text_delta", text=event.delta)
                elif etype in ("response.output_item.added", "response.output_item.done") and (
                    getattr(event.item, "type", None) == "function_call"
                ):
                    item_id = event.item.id or f"#{event.output_index}"
                    if item_id not in tool_index:
                        tool_index[item_id], sent[item_id] = len(tool_index), ""
                        yield StreamEvent(
                            kind="tool_call_delta",
                            tool_call=ToolCallDelta(
                                index=tool_index[item_id],
                                id=ids.back(event.item.call_id),
                                name=event.item.name,
                            ),
                        )
                    yield from _arguments(
                        tool_index[item_id], sent, item_id, event.item.arguments, whole=True
                    )
                elif etype in (
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                ):
                    if event.item_id not in tool_index:
                        raise BadResponse(f"{endpoint.public_id}: function call arguments for unknown item")
                    whole = etype.endswith(".done")
                    value = event.arguments if whole else event.delta
                    yield from _arguments(tool_index[event.item_id], sent, event.item_id, value, whole=whole)
                elif etype in ("response.completed", "response.incomplete"):
                    final = event.response
                elif etype == "response.failed":
                    parse_response(
                        endpoint, event.response, progress.request_id, progress.usage, ids
                    )  # raises
                    raise UpstreamUnavailable(f"{endpoint.public_id}: response failed", usage=progress.usage)
                elif etype == "error":
                    code = safe_error_type(getattr(event, "code", None))
                    msg = safe_upstream_message(getattr(event, "message", "") or "", secrets)
                    raise UpstreamUnavailable(
                        f"{endpoint.public_id}: in-stream error {code or ''}: {msg}",
                        upstream_request_id=progress.request_id,
                        error_type=code,
                    )
                # Everything else (reasoning items, content parts, *.done) carries nothing new.
        if final is None:
            raise BadResponse(f"{endpoint.public_id}: stream ended before response.completed")
        result = parse_response(endpoint, final, progress.request_id, progress.usage, ids)
        yield StreamEvent(
            kind="done",
            result=replace(
                result, latency_ms=progress.elapsed_ms(), time_to_first_token_ms=progress.ttft_ms()
            ),
        )
