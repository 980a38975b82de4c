"""Anthropic-compatible drop-in: ``POST /v1/messages`` (streaming included).

Bodies are built with the ``anthropic`` SDK's pydantic types (``Message``,
``RawMessageStartEvent`` …). Streams use the Messages event sequence the SDK parses:
``message_start``, per content block ``content_block_start`` / ``content_block_delta``
(``text_delta`` or ``input_json_delta``) / ``content_block_stop``, ``message_delta`` (stop reason,
output tokens), ``message_stop``; failures end with an ``error`` event. Thinking blocks are never
returned; thinking blocks a client sends back in history are dropped.

Usage: Anthropic's ``input_tokens`` excludes cache reads and writes, so it is our normalised
``input_tokens - cached_input_tokens - cache_write_tokens``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from anthropic.types import (
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)
from rest_framework.response import Response

from ..models import CompletionJob
from ..streaming import sse, sse_response
from .common import (
    MAX_MESSAGES,
    MAX_TOOLS,
    DropinError,
    DropinView,
    as_list,
    as_object,
    as_str,
    check_known,
    check_sampling,
    check_tool_choice,
    contiguous_tool_calls,
    finished_job,
    muse_headers,
    parse_arguments,
    require,
    resolve_model,
    stream_frames,
    submit,
    tool_spec,
    usage_numbers,
)

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
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
MESSAGES_PARAMS = frozenset(
    {
        "model", "max_tokens", "messages", "system", "tools", "tool_choice", "stream", "metadata",
        "temperature", "top_p", "top_k", "stop_sequences", "thinking", "service_tier", "container",
        "context_management", "output_config",
    }
)  # fmt: skip


def anthropic_error(*, kind: str, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` as the Anthropic API answers errors."""
    return {
        "type": "error",
        "error": {"type": ANTHROPIC_ERROR_TYPES.get(kind, "api_error"), "message": message},
    }


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": as_str(content, param)}]
    return [
        as_object(b, f"{param}[{i}]")
        for i, b in enumerate(as_list(content, param, max_len=1000, or_string=True))
    ]


def _block_text(content: Any, param: str) -> str:
    return "".join(p["text"] for p in _text_parts(content, param))


def cache_control(value: Any, param: str) -> dict[str, Any] | None:
    """A block's ``cache_control`` (prompt-caching breakpoint), validated as Anthropic does."""
    if value is None:
        return None
    value = as_object(value, param)
    require(value.get("type") == "ephemeral", "cache_control.type must be 'ephemeral'.", f"{param}.type")
    require(set(value) <= {"type", "ttl"}, "cache_control accepts only 'type' and 'ttl'.", param)
    require(value.get("ttl") in (None, "5m", "1h"), "cache_control.ttl must be '5m' or '1h'.", f"{param}.ttl")
    return dict(value)


def _text_parts(content: Any, param: str) -> list[dict[str, Any]]:
    """Text blocks as stored parts: ``{"text"}`` plus the block's ``cache_control`` when it has one."""
    parts = []
    for i, b in enumerate(_blocks(content, param) if content is not None else []):
        require(
            b.get("type") == "text",
            f"Block type {b.get('type')!r} is not supported here; send text.",
            f"{param}[{i}].type",
        )
        parts.append(_part(b, f"{param}[{i}]"))
    return parts


def _part(block: dict[str, Any], param: str) -> dict[str, Any]:
    part: dict[str, Any] = {"text": as_str(block.get("text", ""), f"{param}.text")}
    cc = cache_control(block.get("cache_control"), f"{param}.cache_control")
    if cc:
        part["cache_control"] = cc
    return part


def _with_parts(message: dict[str, Any], parts: list[dict[str, Any]], structured: bool) -> dict[str, Any]:
    """``message`` with ``parts`` kept when the caller sent blocks (its block structure and breakpoints)."""
    if structured and parts:
        message["parts"] = parts
    return message


def messages_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Anthropic ``system`` + ``messages`` → our stored messages (tool_result blocks → tool messages)."""
    out: list[dict[str, Any]] = []
    if body.get("system") is not None:
        parts = _text_parts(body["system"], "system")
        message = {"role": "system", "content": "".join(p["text"] for p in parts)}
        out.append(_with_parts(message, parts, isinstance(body["system"], list)))
    for i, m in enumerate(as_list(body.get("messages"), "messages", max_len=MAX_MESSAGES, allow_empty=False)):
        p = f"messages[{i}]"
        m = as_object(m, p)
        role = m.get("role")
        require(role in ("user", "assistant"), f"Invalid role {role!r}.", f"{p}.role")
        texts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, b in enumerate(_blocks(m.get("content"), f"{p}.content")):
            q = f"{p}.content[{j}]"
            kind = b.get("type")
            if kind == "text":
                texts.append(_part(b, q))
            elif kind == "tool_use" and role == "assistant":
                calls.append(
                    {
                        "id": as_str(b.get("id"), f"{q}.id", max_len=200, allow_empty=False),
                        "name": as_str(b.get("name"), f"{q}.name", max_len=200, allow_empty=False),
                        "arguments": parse_arguments(b.get("input", {}), f"{q}.input"),
                    }
                )
            elif kind == "tool_result" and role == "user":
                content = b.get("content")
                text = content if isinstance(content, str) else _block_text(content, f"{q}.content")
                result = {
                    "role": "tool",
                    "tool_call_id": as_str(
                        b.get("tool_use_id"), f"{q}.tool_use_id", max_len=200, allow_empty=False
                    ),
                    "content": as_str(text, f"{q}.content"),
                }
                cc = cache_control(b.get("cache_control"), f"{q}.cache_control")
                results.append(_with_parts(result, [{"text": text, "cache_control": cc}], bool(cc)))
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                continue  # never forwarded: we did not hand it out
            else:
                raise DropinError(
                    f"Content block type {kind!r} is not supported in a {role} message.", param=f"{q}.type"
                )
        structured = isinstance(m.get("content"), list)
        joined = "".join(p["text"] for p in texts)
        if role == "assistant":
            msg: dict[str, Any] = _with_parts({"role": "assistant", "content": joined}, texts, structured)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.extend(results)
            if texts or not results:
                out.append(_with_parts({"role": "user", "content": joined}, texts, structured))
    return out


def tools_in(raw: Any) -> list[dict[str, Any]]:
    tools = []
    for i, t in enumerate(as_list(raw or [], "tools", max_len=MAX_TOOLS)):
        t = as_object(t, f"tools[{i}]")
        require(
            t.get("type") in (None, "custom"), "Only custom (client) tools are supported.", f"tools[{i}].type"
        )
        spec = tool_spec(
            t.get("name"),
            t.get("description"),
            t.get("input_schema"),
            f"tools[{i}]",
            schema_field="input_schema",
        )
        cc = cache_control(t.get("cache_control"), f"tools[{i}].cache_control")
        tools.append(spec | ({"cache_control": cc} if cc else {}))
    return tools


def anthropic_usage(result: dict[str, Any]) -> dict[str, int]:
    u = usage_numbers(result)
    return {
        "input_tokens": max(0, u["input_tokens"] - u["cached_input_tokens"] - u["cache_write_tokens"]),
        "output_tokens": u["output_tokens"],
        "cache_read_input_tokens": u["cached_input_tokens"],
        "cache_creation_input_tokens": u["cache_write_tokens"],
    }


def _stop_reason(result: dict[str, Any]) -> str:
    return (
        "tool_use" if result.get("tool_calls") else STOP_REASONS.get(result.get("finish_reason"), "end_turn")
    )


def message_object(job: CompletionJob) -> dict[str, Any]:
    """The finished job as an Anthropic ``message``."""
    r = job.result or {}
    content: list[dict[str, Any]] = []
    if r.get("text"):
        content.append({"type": "text", "text": r["text"]})
    for c in r.get("tool_calls", []):
        content.append({"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]})
    message = Message(
        id=f"msg_{job.id.hex}",
        type="message",
        role="assistant",
        model=r.get("served_model") or "",
        content=content,
        stop_reason=_stop_reason(r),
        stop_sequence=None,
        usage=anthropic_usage(r),
    )
    return message.model_dump(mode="json", exclude_none=True)


def _ev(model) -> bytes:
    data = model.model_dump(mode="json", exclude_none=True)
    return sse(data["type"], data)


def message_frames(events: Iterator[dict], *, job: CompletionJob, model: str) -> Iterator[bytes]:
    """Our events → the Messages streaming event sequence (one content block open at a time).

    ``message_start`` waits for the first event so that it names the served model."""
    index = -1
    open_kind: str | None = None
    open_call: int | None = None

    def close() -> Iterator[bytes]:
        nonlocal open_kind
        if open_kind is not None:
            yield _ev(RawContentBlockStopEvent(type="content_block_stop", index=index))
            open_kind = None

    started = False
    for event in contiguous_tool_calls(events):
        kind = event["type"]
        if kind == "served":  # the model that serves this answer (sent before its first delta)
            model = event["model"]
            continue
        if not started:
            started = True
            if kind == "done":
                model = (event.get("result") or {}).get("served_model") or model
            start = Message(
                id=f"msg_{job.id.hex}", type="message", role="assistant", model=model, content=[],
                stop_reason=None, stop_sequence=None, usage={"input_tokens": 0, "output_tokens": 0},
            )  # fmt: skip
            yield _ev(RawMessageStartEvent(type="message_start", message=start))
            yield sse("ping", {"type": "ping"})
        if kind == "text_delta":
            if open_kind != "text":
                yield from close()
                index += 1
                open_kind = "text"
                yield _ev(
                    RawContentBlockStartEvent(
                        type="content_block_start", index=index, content_block={"type": "text", "text": ""}
                    )
                )
            yield _ev(
                RawContentBlockDeltaEvent(
                    type="content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": event["text"]},
                )
            )
        elif kind == "tool_call_delta":
            if open_kind != "tool_use" or open_call != event["index"]:
                yield from close()
                index += 1
                open_kind, open_call = "tool_use", event["index"]
                block = {
                    "type": "tool_use",
                    "id": event.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": event.get("name") or "",
                    "input": {},
                }
                yield _ev(
                    RawContentBlockStartEvent(type="content_block_start", index=index, content_block=block)
                )
            if event.get("arguments_delta"):
                yield _ev(
                    RawContentBlockDeltaEvent(
                        type="content_block_delta", index=index,
                        delta={"type": "input_json_delta", "partial_json": event["arguments_delta"]},
                    )
                )  # fmt: skip
        elif kind == "done":
            yield from close()
            r = event["result"] or {}
            yield _ev(
                RawMessageDeltaEvent(
                    type="message_delta",
                    delta={"stop_reason": _stop_reason(r), "stop_sequence": None},
                    usage=anthropic_usage(r),
                )
            )
            yield _ev(RawMessageStopEvent(type="message_stop"))
            return
        elif kind == "error":
            yield sse(
                "error",
                anthropic_error(kind="upstream", message=f"The completion failed: {event.get('error')}"),
            )
            return


def check_thinking(thinking: Any, max_tokens: int) -> None:
    """``thinking`` held to Anthropic's rules (the variant decides the real setting): an object
    whose ``type`` is ``enabled`` (with an integer ``budget_tokens`` of at least 1,024 and below
    ``max_tokens``), ``disabled`` or ``adaptive``. Raises :class:`DropinError` (400)."""
    if thinking is None:
        return
    thinking = as_object(thinking, "thinking")
    kind = thinking.get("type")
    require(
        kind in ("enabled", "disabled", "adaptive"),
        "thinking.type: must be one of 'enabled', 'disabled', 'adaptive'.",
        "thinking.type",
    )
    if kind != "enabled":
        return
    budget = thinking.get("budget_tokens")
    require(
        isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1024,
        "thinking.budget_tokens: must be an integer of at least 1024.",
        "thinking.budget_tokens",
    )
    require(
        budget < max_tokens,
        "thinking.budget_tokens: must be less than max_tokens.",
        "thinking.budget_tokens",
    )


class MessagesApi(DropinView):
    """``POST /v1/messages`` in the Anthropic wire format (streaming included)."""

    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        # Anthropic names the field in the message itself; prefix it only where the message does not
        named = (
            not param or f"'{param}'" in message or message.startswith(f"{param}:") or message.endswith(param)
        )
        return anthropic_error(kind=kind, message=message if named else f"{param}: {message}")

    def post(self, request):
        body = self.body(request)
        check_known(body, MESSAGES_PARAMS)
        model_name = as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        pinned = resolve_model(model_name)
        max_tokens = body.get("max_tokens")
        require(max_tokens is not None, "max_tokens: Field required (a positive integer).", "max_tokens")
        require(
            isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1,
            "max_tokens: must be a positive integer.",
            "max_tokens",
        )
        check_sampling(body, token_fields=("max_tokens",), temperature_max=1.0, top_k=True)
        check_thinking(body.get("thinking"), max_tokens)
        stream = body.get("stream") or False
        require(isinstance(stream, bool), "'stream' must be a boolean.", "stream")
        metadata = body.get("metadata")
        tools = tools_in(body.get("tools"))
        check_tool_choice(body.get("tool_choice"), tools, style="anthropic")
        job, _ = submit(
            request,
            messages=messages_in(body),
            tools=tools,
            model=pinned,
            stream=stream,
            metadata=metadata,
        )
        if stream:
            frames = stream_frames(job, lambda ev: message_frames(ev, job=job, model=model_name))
            response = sse_response(frames)
            response["x-muse-job-id"] = str(job.id)
            return response
        job = finished_job(job, request)
        return Response(message_object(job), headers=muse_headers(job))
