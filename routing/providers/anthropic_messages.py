"""Anthropic Messages API client.

Wire format: https://docs.anthropic.com/en/api/messages and
https://docs.anthropic.com/en/docs/build-with-claude/streaming (``message_start``,
``content_block_start/delta/stop`` with ``text_delta``/``input_json_delta``/
``thinking_delta``/``signature_delta``, ``message_delta``, ``message_stop``, ``error``).
SDK: ``anthropic.Anthropic(base_url=..., api_key=..., max_retries=0, timeout=..., http_client=...)``
(the HTTP client: :func:`~routing.providers.transport.watched_http_client`)
(anthropic>=2 sends the key as ``Authorization: Bearer``).

Request mapping: system messages -> ``system`` text blocks (prompt-caching breakpoints: see
:func:`build_kwargs`); ``tool`` messages -> ``tool_result`` blocks in
a user message (consecutive results merged); assistant tool calls -> ``tool_use`` blocks;
empty text dropped and same-role turns merged (:mod:`routing.providers.anthropic_turns`);
``max_output_tokens`` -> ``max_tokens`` (default 4096); with the ``reasoning`` capability
``thinking={"type": "adaptive"}`` and ``reasoning_effort`` -> ``output_config.effort``
(``minimal`` -> ``low``); ``temperature`` is sent via ``extra_body`` (the 2.x SDK has no
parameter for it). Output contracts: ``output_format`` -> ``output_config.format``
(:func:`output_format`), ``tool_choice`` and ``parallel_tool_calls`` -> ``tool_choice``
(:func:`tool_choice`); a forced tool call is sent without ``thinking``, which allows only
``auto`` and ``none``.

Extended thinking (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking):
``thinking`` blocks (with ``signature``, also when the thinking text is empty) and
``redacted_thinking`` blocks (with ``data``) go only into ``CompletionResult.reasoning_state``
and are replayed unmodified, in order, at the start of the assistant turn they came with
(:func:`routing.providers.reasoning.anchor_reasoning`). A tool loop whose latest assistant turn has
no thinking to replay is sent without ``thinking`` (:func:`_tool_loop_without_thinking`).

A tool call's arguments are its ``input_json_delta`` pieces or, when none came (some
Anthropic-compatible servers), the whole ``input`` of its ``content_block_start``.

Usage: Anthropic ``input_tokens`` EXCLUDES ``cache_read_input_tokens`` and
``cache_creation_input_tokens``; the normalised ``Usage.input_tokens`` is their sum. Writes with a
1-hour TTL (``cache_creation.ephemeral_1h_input_tokens``) are priced at their own rate. In a stream,
``message_start`` and ``message_delta`` each carry a cumulative snapshot, and ``message_delta`` may
leave the cache fields out: snapshots are merged field by field (``merge_usage``), never summed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anthropic

from routing.providers.anthropic_turns import acceptable_blocks, acceptable_messages
from routing.providers.base import (
    ProviderClient,
    StreamProgress,
    client_cache_key,
    parse_arguments,
    sdk_clients,
    usage_dict,
)
from routing.providers.contracts import OutputFormat
from routing.providers.errors import BadResponse, ClientRequestError
from routing.providers.pricing import compute_cost_usd
from routing.providers.reasoning import anchor_reasoning, usable_reasoning_state
from routing.providers.tool_ids import ToolIdMap
from routing.providers.transport import watched_http_client
from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Message,
    ReasoningState,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    Usage,
    merge_usage,
)

DEFAULT_MAX_TOKENS = 4096
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}
REASONING_BLOCK_TYPES = frozenset({"thinking", "redacted_thinking"})
EPHEMERAL = {"type": "ephemeral"}


def anthropic_sdk_client(endpoint: EndpointConfig) -> anthropic.Anthropic:
    def factory() -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=endpoint.base_url.rstrip("/"),
            api_key=endpoint.credential.reveal(),
            max_retries=0,
            timeout=endpoint.timeout_s,
            http_client=watched_http_client(anthropic),
        )

    return sdk_clients.get(client_cache_key("anthropic-sdk", endpoint), factory)


def build_messages(
    endpoint: EndpointConfig, request: CompletionRequest, ids: ToolIdMap | None = None
) -> list[dict[str, Any]]:
    """Neutral messages -> Anthropic ``messages``; tool-call ids mapped to what Anthropic accepts,
    and nothing it would refuse (:func:`~routing.providers.anthropic_turns.acceptable_messages`)."""
    ids = ids if ids is not None else ToolIdMap("messages")
    anchored = anchor_reasoning(request, usable_reasoning_state(endpoint, request))
    out: list[dict[str, Any]] = []
    for idx, m in enumerate(request.messages):
        if m.role == "system":
            continue
        if m.role == "user":
            out.append({"role": "user", "content": text_blocks(m) if m.parts else m.content})
        elif m.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": ids.out(m.tool_call_id or ""),
                "content": m.content,
            }
            if m.parts and m.parts[-1].cache_control:
                block["cache_control"] = dict(m.parts[-1].cache_control)
            prev = out[-1] if out else None
            if (
                prev is not None
                and prev["role"] == "user"
                and isinstance(prev["content"], list)
                and all(b.get("type") == "tool_result" for b in prev["content"])
            ):
                prev["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            blocks: list[dict[str, Any]] = []
            for state in anchored.get(idx, ()):
                blocks.extend(dict(item) for item in state.items)
            if m.parts:
                blocks.extend(text_blocks(m))
            elif m.content:
                blocks.append({"type": "text", "text": m.content})
            for tc in m.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": ids.out(tc.id), "name": tc.name, "input": dict(tc.arguments)}
                )
            out.append({"role": "assistant", "content": blocks})
    return acceptable_messages(out)


def _tool_loop_without_thinking(messages: list[dict[str, Any]]) -> bool:
    """Whether a tool loop is in progress (the request ends with ``tool_result``) and the latest
    assistant message (holding its ``tool_use``) has no thinking to replay -- e.g. the session's
    previous turn ran on another endpoint. Anthropic then rejects ``thinking`` ("a final
    assistant message must start with a thinking block"); its documented way out is to send this
    request without thinking."""
    last = messages[-1] if messages else {}
    if last.get("role") != "user" or not isinstance(last.get("content"), list):
        return False
    if not any(b.get("type") == "tool_result" for b in last["content"]):
        return False
    assistant = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    if assistant is None:
        return False
    kinds = [b.get("type") for b in assistant["content"]]
    return "tool_use" in kinds and kinds[0] not in REASONING_BLOCK_TYPES


def text_blocks(m: Message) -> list[dict[str, Any]]:
    """A message's text blocks as the caller structured them, cache breakpoints included."""
    return [
        {"type": "text", "text": p.text}
        | ({"cache_control": dict(p.cache_control)} if p.cache_control else {})
        for p in m.parts
    ]


def system_blocks(request: CompletionRequest) -> list[dict[str, Any]]:
    """``system`` as a list of text blocks: each system message's parts (with the caller's cache
    breakpoints) or its text as one block."""
    blocks: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role != "system":
            continue
        if m.parts:
            blocks.extend(text_blocks(m))
        elif m.content:
            blocks.append({"type": "text", "text": m.content})
    return acceptable_blocks(blocks)


def build_kwargs(
    endpoint: EndpointConfig, request: CompletionRequest, ids: ToolIdMap | None = None
) -> dict[str, Any]:
    """The ``messages.create`` arguments for ``request``.

    Prompt caching (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): the
    caller's ``cache_control`` breakpoints and block structure are kept as sent (``system`` as
    blocks). A request without any — built by the platform from a chat or REST call — gets
    breakpoints on its stable prefix: the last tool definition and the last system block
    (2 of Anthropic's 4; a prefix shorter than the model's minimum is simply not cached).
    """
    kwargs: dict[str, Any] = {
        "model": endpoint.upstream_model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": build_messages(endpoint, request, ids),
    }
    platform_breakpoints = not request.has_cache_breakpoints()
    system = system_blocks(request)
    if system:
        if platform_breakpoints:  # the system prompt is the stable prefix of a session's calls
            system[-1]["cache_control"] = dict(EPHEMERAL)
        kwargs["system"] = system
    tools = request.effective_tools()
    if tools:
        kwargs["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            | ({"cache_control": dict(t.cache_control)} if t.cache_control else {})
            for t in tools
        ]
        if platform_breakpoints:  # tools come first in the cached prefix
            kwargs["tools"][-1]["cache_control"] = dict(EPHEMERAL)
        choice = tool_choice(request)
        if choice is not None:
            kwargs["tool_choice"] = choice
    forced = kwargs.get("tool_choice", {}).get("type") in ("any", "tool")
    # thinking allows only tool_choice auto or none: a forced call is made without it
    if endpoint.has("reasoning") and not forced and not _tool_loop_without_thinking(kwargs["messages"]):
        kwargs["thinking"] = {"type": "adaptive"}
    output_config: dict[str, Any] = {}
    if request.reasoning_effort is not None:
        output_config["effort"] = EFFORTS.get(request.reasoning_effort, request.reasoning_effort)
    if request.output_format is not None:
        output_config["format"] = output_format(endpoint, request.output_format)
    if output_config:
        kwargs["output_config"] = output_config
    if request.temperature is not None:
        kwargs["extra_body"] = {"temperature": request.temperature}
    return kwargs


def tool_choice(request: CompletionRequest) -> dict[str, Any] | None:
    """The caller's ``tool_choice`` and ``parallel_tool_calls`` in Anthropic's terms (tools are
    offered): ``none`` → ``{"type": "none"}``, ``required`` → ``{"type": "any"}`` or, naming a
    tool, ``{"type": "tool", "name"}``; ``parallel_tool_calls: false`` →
    ``disable_parallel_tool_use: true`` (on ``{"type": "auto"}`` when nothing else is asked).
    ``None``: Anthropic's default (auto, parallel calls allowed).
    Source: https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use#forcing-tool-use
    """
    choice = request.tool_choice
    wire: dict[str, Any] | None = None
    if choice is not None and choice.mode == "none":
        return {"type": "none"}
    if choice is not None and choice.mode == "required":
        wire = {"type": "tool", "name": choice.name} if choice.name else {"type": "any"}
    if request.parallel_tool_calls is False:
        wire = (wire or {"type": "auto"}) | {"disable_parallel_tool_use": True}
    return wire


def output_format(endpoint: EndpointConfig, fmt: OutputFormat) -> dict[str, Any]:
    """``output_config.format`` for a JSON Schema output contract: the schema as the SDK's own
    :func:`anthropic.transform_schema` makes it acceptable to the API (every object
    ``additionalProperties: false``; keywords it does not enforce moved into descriptions), as
    ``messages.parse`` sends it. Anthropic has no JSON mode: a ``json_object`` contract (or a
    schema it cannot take) raises :class:`ClientRequestError`; routing never sends one to a
    Messages endpoint (:attr:`routing.selectors.EndpointInfo.capabilities`).
    Source: https://platform.claude.com/docs/en/build-with-claude/structured-outputs
    """
    if fmt.type != "json_schema":
        raise ClientRequestError(
            f"{endpoint.public_id}: Anthropic Messages has no JSON mode (json_object)",
            provider_kind=endpoint.provider_kind,
            endpoint_id=endpoint.public_id,
        )
    try:
        schema = anthropic.transform_schema(dict(fmt.schema or {}))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ClientRequestError(
            f"{endpoint.public_id}: the output schema cannot be sent to Anthropic ({exc})",
            provider_kind=endpoint.provider_kind,
            endpoint_id=endpoint.public_id,
        ) from None
    return {"type": "json_schema", "schema": schema}


def anthropic_usage(usage: Any) -> Usage:
    """Normalised :class:`Usage` from an Anthropic usage object or (merged) dict."""
    raw = usage_dict(usage)
    if not raw:
        return Usage()
    raw_in = raw.get("input_tokens") or 0
    read = raw.get("cache_read_input_tokens") or 0
    ttl = raw.get("cache_creation") if isinstance(raw.get("cache_creation"), dict) else {}
    write_1h = ttl.get("ephemeral_1h_input_tokens") or 0
    write = raw.get("cache_creation_input_tokens") or (ttl.get("ephemeral_5m_input_tokens") or 0) + write_1h
    out = raw.get("output_tokens") or 0
    details = raw.get("output_tokens_details")
    thinking = (details.get("thinking_tokens") or 0) if isinstance(details, dict) else 0
    return Usage(
        input_tokens=raw_in + read + write,
        cached_input_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        output_tokens=out,
        reasoning_tokens=thinking,
        vendor={
            "input_tokens": raw_in,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "cache_creation.ephemeral_1h_input_tokens": write_1h,
            "output_tokens": out,
            "output_tokens_details.thinking_tokens": thinking,
        },
    )


def _result(
    endpoint: EndpointConfig,
    *,
    text: str,
    tool_calls: list[ToolCall],
    reasoning_blocks: list[dict[str, Any]],
    stop_reason: str | None,
    usage: Usage,
    request_id: str | None,
) -> CompletionResult:
    state = None
    if reasoning_blocks:
        state = ReasoningState(
            endpoint_fingerprint=endpoint.fingerprint,
            provider_kind=endpoint.provider_kind,
            api_style="messages",
            items=tuple(reasoning_blocks),
            tool_call_ids=tuple(tc.id for tc in tool_calls),
        )
    return CompletionResult(
        text=text,
        tool_calls=tuple(tool_calls),
        finish_reason=STOP_REASONS.get(stop_reason or "", "stop"),
        usage=usage,
        cost_usd=compute_cost_usd(usage, endpoint),
        latency_ms=0.0,
        upstream_request_id=request_id,
        endpoint_id=endpoint.public_id,
        upstream_model=endpoint.upstream_model,
        reasoning_state=state,
    )


def _whole_input(block: dict[str, Any], index: int) -> Iterator[StreamEvent]:
    """A tool call's ``input`` as one arguments delta, when the upstream gave it whole in
    ``content_block_start`` and sent no ``input_json_delta`` with content (Anthropic-compatible
    servers do; Anthropic itself starts with ``{}`` and streams the JSON). Once per block."""
    done, block["input_sent"] = block.get("input_sent", False), True
    if done or "".join(block["json"]).strip() or not block["input"]:
        return
    yield StreamEvent(
        kind="tool_call_delta",
        tool_call=ToolCallDelta(index=index, arguments_delta=json.dumps(block["input"])),
    )


class AnthropicMessagesClient(ProviderClient):
    """``complete``/``stream`` over Anthropic Messages."""

    api_styles = frozenset({"messages"})

    def _complete(self, endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResult:
        client = anthropic_sdk_client(endpoint)
        ids = ToolIdMap("messages")
        message = client.messages.create(**build_kwargs(endpoint, request, ids))
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for block in message.content or ():
            btype = getattr(block, "type", None)
            if btype in REASONING_BLOCK_TYPES:
                reasoning.append(block.model_dump(mode="json", exclude_unset=True))
            elif btype == "text":
                text.append(block.text)
            elif btype == "tool_use":
                calls.append(
                    ToolCall(id=ids.back(block.id), name=block.name, arguments=dict(block.input or {}))
                )
        return _result(
            endpoint,
            text="".join(text),
            tool_calls=calls,
            reasoning_blocks=reasoning,
            stop_reason=message.stop_reason,
            usage=anthropic_usage(message.usage),
            request_id=getattr(message, "_request_id", None),
        )

    def _stream(
        self, endpoint: EndpointConfig, request: CompletionRequest, progress: StreamProgress
    ) -> Iterator[StreamEvent]:
        client = anthropic_sdk_client(endpoint)
        ids = ToolIdMap("messages")
        stream = client.messages.create(**build_kwargs(endpoint, request, ids), stream=True)
        progress.response_started = True
        progress.request_id = stream.response.headers.get("request-id")
        blocks: dict[int, dict[str, Any]] = {}  # content index -> accumulating block
        tool_index: dict[int, int] = {}  # content index -> tool call index
        raw_usage: dict[str, Any] = {}  # snapshots merged field by field (merge_usage)
        stop_reason = None
        stopped = False
        with stream:
            for event in stream:
                etype = getattr(event, "type", None)
                if etype == "message_start":
                    raw_usage = merge_usage(raw_usage, usage_dict(event.message.usage))
                    progress.usage = anthropic_usage(raw_usage)
                elif etype == "content_block_start":
                    cb = event.content_block
                    btype = getattr(cb, "type", None)
                    if btype == "thinking":
                        blocks[event.index] = {"type": "thinking", "thinking": "", "signature": ""}
                    elif btype == "redacted_thinking":
                        blocks[event.index] = cb.model_dump(mode="json", exclude_unset=True)
                    elif btype == "text":
                        blocks[event.index] = {"type": "text", "text": ""}
                    elif btype == "tool_use":
                        index = len(tool_index)
                        tool_index[event.index] = index
                        call_id = ids.back(cb.id)
                        blocks[event.index] = {
                            "type": "tool_use", "id": call_id, "name": cb.name, "json": [],
                            "input": dict(getattr(cb, "input", None) or {}),
                        }  # fmt: skip
                        yield StreamEvent(
                            kind="tool_call_delta",
                            tool_call=ToolCallDelta(index=index, id=call_id, name=cb.name),
                        )
                elif etype == "content_block_delta":
                    block = blocks.get(event.index)
                    d = event.delta
                    dtype = getattr(d, "type", None)
                    if block is None:
                        raise BadResponse(f"{endpoint.public_id}: delta for unknown content block")
                    if dtype == "text_delta":
                        block["text"] += d.text
                        yield StreamEvent(kind="text_delta", text=d.text)
                    elif dtype == "input_json_delta":
                        block["json"].append(d.partial_json)
                        yield StreamEvent(
                            kind="tool_call_delta",
                            tool_call=ToolCallDelta(
                                index=tool_index[event.index], arguments_delta=d.partial_json
                            ),
                        )
                    elif dtype == "thinking_delta":
                        block["thinking"] += d.thinking
                    elif dtype == "signature_delta":
                        block["signature"] += d.signature
                elif etype == "content_block_stop" and event.index in tool_index:
                    yield from _whole_input(blocks[event.index], tool_index[event.index])
                elif etype == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    raw_usage = merge_usage(raw_usage, usage_dict(event.usage))
                    progress.usage = anthropic_usage(raw_usage)
                elif etype == "message_stop":
                    stopped = True
                    for content_index, index in tool_index.items():  # blocks never stopped
                        yield from _whole_input(blocks[content_index], index)
        if not stopped:
            raise BadResponse(f"{endpoint.public_id}: stream ended before message_stop")
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for _, block in sorted(blocks.items()):
            if block["type"] in REASONING_BLOCK_TYPES:
                reasoning.append(block)
            elif block["type"] == "text":
                text.append(block["text"])
            elif block["type"] == "tool_use":
                streamed = "".join(block["json"])
                arguments = parse_arguments(streamed) if streamed.strip() else block["input"]
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=arguments))
        # message_delta.usage is cumulative and may leave fields out: merged, never summed.
        usage = anthropic_usage(raw_usage)
        result = _result(
            endpoint,
            text="".join(text),
            tool_calls=calls,
            reasoning_blocks=reasoning,
            stop_reason=stop_reason,
            usage=usage,
            request_id=progress.request_id,
        )
        yield StreamEvent(
            kind="done",
            result=replace(
                result, latency_ms=progress.elapsed_ms(), time_to_first_token_ms=progress.ttft_ms()
            ),
        )
