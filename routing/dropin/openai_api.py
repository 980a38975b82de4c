"""OpenAI-compatible drop-ins: ``POST /v1/chat/completions`` and ``POST /v1/responses``.

Bodies are built with the ``openai`` SDK's own pydantic types (``ChatCompletion``,
``ChatCompletionChunk``, ``Response`` …) so they parse exactly as the SDK expects. Streams follow
the wire formats the SDK parses: Chat Completions sends ``data: <chunk>`` lines ending with
``data: [DONE]``; Responses sends ``event: <type>`` + ``data: <event>`` with increasing
``sequence_number``. Reasoning (summaries or encrypted content) is never returned, whatever
``include`` asks for.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response as OpenAIResponse
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
    tool_calls_in_index_order,
    tool_spec,
    usage_numbers,
)

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
CHAT_FINISH = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
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


class OpenAIView(DropinView):
    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        return openai_error(kind=kind, message=message, param=param)


def _text_of(content: Any, param: str, part_types: frozenset[str]) -> str:
    """A message's content as text: a string, or a list of text parts (other part types are a 400)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return as_str(content, param)
    parts = as_list(content, param, max_len=1000, or_string=True)
    texts = []
    for i, part in enumerate(parts):
        part = as_object(part, f"{param}[{i}]")
        require(
            part.get("type") in part_types,
            f"Content part type {part.get('type')!r} is not supported; send text.",
            f"{param}[{i}].type",
        )
        field = "refusal" if part.get("type") == "refusal" else "text"
        require(field in part, f"'{param}[{i}].{field}': Field required.", f"{param}[{i}].{field}")
        texts.append(as_str(part[field], f"{param}[{i}].{field}"))
    return "".join(texts)


# --------------------------------------------------------------------------------------------
# Chat Completions
# --------------------------------------------------------------------------------------------

CHAT_PARAMS = frozenset(
    {
        "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options",
        "user", "metadata", "temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop",
        "seed", "store", "reasoning_effort", "service_tier", "safety_identifier", "prompt_cache_key",
        "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "response_format",
        "verbosity", "modalities",
    }
)  # fmt: skip


def chat_messages(raw: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages → our stored messages (system/developer → system; tool results kept).
    A tool message must answer a tool call of an earlier assistant message (400 otherwise, as
    OpenAI answers)."""
    out = []
    call_ids: set[str] = set()
    for i, m in enumerate(as_list(raw, "messages", max_len=MAX_MESSAGES, allow_empty=False)):
        p = f"messages[{i}]"
        m = as_object(m, p)
        role = m.get("role")
        require(
            role in ("system", "developer", "user", "assistant", "tool"),
            f"Invalid role {role!r}.",
            f"{p}.role",
        )
        text = _text_of(m.get("content"), f"{p}.content", frozenset({"text", "refusal"}))
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, c in enumerate(as_list(m["tool_calls"], f"{p}.tool_calls", max_len=MAX_TOOLS)):
                c = as_object(c, f"{p}.tool_calls[{j}]")
                fn = as_object(c.get("function"), f"{p}.tool_calls[{j}].function")
                calls.append(
                    {
                        "id": as_str(c.get("id"), f"{p}.tool_calls[{j}].id", max_len=200, allow_empty=False),
                        "name": as_str(fn.get("name"), f"{p}.tool_calls[{j}].function.name", max_len=200),
                        "arguments": parse_arguments(
                            fn.get("arguments", "{}"), f"{p}.tool_calls[{j}].function.arguments"
                        ),
                    }
                )
            msg["tool_calls"] = calls
            call_ids.update(c["id"] for c in calls)
        if role == "tool":
            msg["tool_call_id"] = as_str(
                m.get("tool_call_id"), f"{p}.tool_call_id", max_len=200, allow_empty=False
            )
            require(
                msg["tool_call_id"] in call_ids,
                "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                "message with 'tool_calls' (no tool call has this id).",
                f"{p}.tool_call_id",
            )
        out.append(msg)
    return out


def chat_tools(raw: Any) -> list[dict[str, Any]]:
    tools = []
    for i, t in enumerate(as_list(raw or [], "tools", max_len=MAX_TOOLS)):
        t = as_object(t, f"tools[{i}]")
        require(t.get("type") == "function", "Only function tools are supported.", f"tools[{i}].type")
        fn = as_object(t.get("function"), f"tools[{i}].function")
        tools.append(
            tool_spec(fn.get("name"), fn.get("description"), fn.get("parameters"), f"tools[{i}].function")
        )
    return tools


def chat_usage(result: dict[str, Any]) -> dict[str, Any]:
    u = usage_numbers(result)
    return {
        "prompt_tokens": u["input_tokens"],
        "completion_tokens": u["output_tokens"],
        "total_tokens": u["input_tokens"] + u["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": u["cached_input_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]},
    }


def chat_completion(job: CompletionJob) -> dict[str, Any]:
    """The finished job as an OpenAI ``chat.completion`` object."""
    r = job.result or {}
    tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
        }
        for c in r.get("tool_calls", [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": r.get("text") or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    completion = ChatCompletion(
        id=f"chatcmpl-{job.id.hex}",
        object="chat.completion",
        created=int(job.created_at.timestamp()),
        model=r.get("served_model") or "",
        choices=[
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls"
                if tool_calls
                else CHAT_FINISH.get(r.get("finish_reason"), "stop"),
            }
        ],
        usage=chat_usage(r),
    )
    return completion.model_dump(mode="json", exclude_none=True)


def chat_chunks(
    events: Iterator[dict], *, job: CompletionJob, model: str, include_usage: bool
) -> Iterator[bytes]:
    """Our events → ``chat.completion.chunk`` SSE lines, ending with ``data: [DONE]``."""
    created = int(time.time())
    base = {
        "id": f"chatcmpl-{job.id.hex}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = ChatCompletionChunk(
            **base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}], **extra
        )
        return sse(None, body.model_dump(mode="json", exclude_none=True))

    saw_tools = False
    started = False
    for event in tool_calls_in_index_order(events):
        kind = event["type"]
        if kind == "served":  # the model that serves this answer (sent before its first delta)
            base["model"] = event["model"]
            continue
        if not started:
            started = True
            if kind == "done":
                base["model"] = (event.get("result") or {}).get("served_model") or base["model"]
            yield chunk({"role": "assistant", "content": ""})
        if kind == "text_delta":
            yield chunk({"content": event["text"]})
        elif kind == "tool_call_delta":
            saw_tools = True
            call: dict[str, Any] = {
                "index": event["index"],
                "function": {"arguments": event["arguments_delta"] or ""},
            }
            if event.get("id"):
                call["id"] = event["id"]
                call["type"] = "function"
            if event.get("name"):
                call["function"]["name"] = event["name"]
            yield chunk({"tool_calls": [call]})
        elif kind == "done":
            r = event["result"] or {}
            finish = (
                "tool_calls"
                if saw_tools or r.get("tool_calls")
                else CHAT_FINISH.get(r.get("finish_reason"), "stop")
            )
            base["model"] = r.get("served_model") or base["model"]
            yield chunk({}, finish)
            if include_usage:
                body = ChatCompletionChunk(**base, choices=[], usage=chat_usage(r))
                yield sse(None, body.model_dump(mode="json", exclude_none=True))
            break
        elif kind == "error":
            yield sse(
                None, openai_error(kind="upstream", message=f"The completion failed: {event.get('error')}")
            )
            break
    yield b"data: [DONE]\n\n"


class ChatCompletionsApi(OpenAIView):
    """``POST /v1/chat/completions`` in the OpenAI wire format (streaming included)."""

    def post(self, request):
        body = self.body(request)
        check_known(body, CHAT_PARAMS)
        check_sampling(body, token_fields=("max_tokens", "max_completion_tokens"), temperature_max=2.0)
        model_name = as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        pinned = resolve_model(model_name)
        require(body.get("n") in (None, 1), "Only n=1 is supported.", "n")
        stream = body.get("stream") or False
        require(isinstance(stream, bool), "'stream' must be a boolean.", "stream")
        options = as_object(body.get("stream_options") or {}, "stream_options")
        tools = chat_tools(body.get("tools"))
        check_tool_choice(body.get("tool_choice"), tools, style="chat")
        job, _ = submit(
            request,
            messages=chat_messages(body.get("messages")),
            tools=tools,
            model=pinned,
            stream=stream,
            user=body.get("user"),
            safety_identifier=body.get("safety_identifier"),
            metadata=body.get("metadata"),
        )
        if stream:
            include_usage = bool(options.get("include_usage"))
            frames = stream_frames(
                job,
                lambda ev: chat_chunks(ev, job=job, model=model_name, include_usage=include_usage),
            )
            response = sse_response(frames)
            response["x-muse-job-id"] = str(job.id)
            return response
        job = finished_job(job, request)
        return Response(chat_completion(job), headers=muse_headers(job))


# --------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------

RESPONSES_PARAMS = frozenset(
    {
        "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "stream",
        "stream_options", "user", "metadata", "temperature", "top_p", "max_output_tokens", "store",
        "include", "reasoning", "text", "truncation", "service_tier", "safety_identifier",
        "prompt_cache_key", "background", "previous_response_id", "max_tool_calls", "top_logprobs",
    }
)  # fmt: skip
INPUT_PART_TYPES = frozenset({"input_text", "output_text", "text"})


def responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Responses ``instructions`` + ``input`` → our stored messages.

    Consecutive ``function_call`` items become one assistant message with parallel tool calls;
    ``function_call_output`` items become tool messages; ``reasoning`` items a client sends back are
    dropped (we never hand reasoning out, and never forward reasoning we did not issue).
    """
    out: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        out.append({"role": "system", "content": as_str(body["instructions"], "instructions")})
    raw = body.get("input")
    if isinstance(raw, str):
        out.append({"role": "user", "content": raw})
        return out
    for i, item in enumerate(as_list(raw, "input", max_len=MAX_MESSAGES, allow_empty=False, or_string=True)):
        p = f"input[{i}]"
        item = as_object(item, p)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            require(
                role in ("system", "developer", "user", "assistant"), f"Invalid role {role!r}.", f"{p}.role"
            )
            out.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _text_of(item.get("content"), f"{p}.content", INPUT_PART_TYPES),
                }
            )
        elif kind == "function_call":
            call = {
                "id": as_str(item.get("call_id"), f"{p}.call_id", max_len=200, allow_empty=False),
                "name": as_str(item.get("name"), f"{p}.name", max_len=200, allow_empty=False),
                "arguments": parse_arguments(item.get("arguments", "{}"), f"{p}.arguments"),
            }
            last = out[-1] if out else None
            if (
                last is not None
                and last["role"] == "assistant"
                and (last.get("tool_calls") or not last["content"])
            ):
                last.setdefault("tool_calls", []).append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output, f"{p}.output", INPUT_PART_TYPES)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": as_str(
                        item.get("call_id"), f"{p}.call_id", max_len=200, allow_empty=False
                    ),
                    "content": text,
                }
            )
        elif kind == "reasoning":
            continue
        else:
            raise DropinError(f"Input item type {kind!r} is not supported.", param=f"{p}.type")
    return out


def responses_tools(raw: Any) -> list[dict[str, Any]]:
    tools = []
    for i, t in enumerate(as_list(raw or [], "tools", max_len=MAX_TOOLS)):
        t = as_object(t, f"tools[{i}]")
        require(t.get("type") == "function", "Only function tools are supported.", f"tools[{i}].type")
        tools.append(tool_spec(t.get("name"), t.get("description"), t.get("parameters"), f"tools[{i}]"))
    return tools


def responses_usage(result: dict[str, Any]) -> dict[str, Any]:
    u = usage_numbers(result)
    return {
        "input_tokens": u["input_tokens"],
        "input_tokens_details": {
            "cached_tokens": u["cached_input_tokens"],
            "cache_write_tokens": u["cache_write_tokens"],
        },
        "output_tokens": u["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]},
        "total_tokens": u["input_tokens"] + u["output_tokens"],
    }


def _response_object(
    *,
    resp_id: str,
    created: float,
    model: str,
    status: str,
    output: list,
    usage: dict | None,
    error: dict | None = None,
) -> dict[str, Any]:
    response = OpenAIResponse(
        id=resp_id,
        object="response",
        created_at=created,
        completed_at=time.time() if status == "completed" else None,
        model=model,
        status=status,
        output=output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        usage=usage,
        error=error,
        incomplete_details={"reason": "max_output_tokens"} if status == "incomplete" else None,
    )
    return response.model_dump(mode="json", exclude_none=True)


def response_output(result: dict[str, Any], msg_id: str) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if result.get("text"):
        output.append(
            {
                "id": msg_id,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": result["text"], "annotations": []}],
            }
        )
    for call in result.get("tool_calls", []):
        output.append(
            {
                "id": f"fc_{uuid.uuid4().hex}",
                "type": "function_call",
                "status": "completed",
                "call_id": call["id"],
                "name": call["name"],
                "arguments": json.dumps(call["arguments"]),
            }
        )
    return output


def responses_object(job: CompletionJob) -> dict[str, Any]:
    """The finished job as an OpenAI ``response`` object."""
    r = job.result or {}
    return _response_object(
        resp_id=f"resp_{job.id.hex}",
        created=job.created_at.timestamp(),
        model=r.get("served_model") or "",
        status="incomplete" if r.get("finish_reason") == "length" else "completed",
        output=response_output(r, f"msg_{job.id.hex}"),
        usage=responses_usage(r),
    )


class _ResponsesStream:
    """Our events → Responses streaming events (one output item open at a time)."""

    def __init__(self, job: CompletionJob, model: str) -> None:
        self.job = job
        self.model = model
        self.seq = 0
        self.resp_id = f"resp_{job.id.hex}"
        self.created = time.time()
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.calls: dict[int, dict[str, Any]] = {}

    def ev(self, etype: str, **fields: Any) -> bytes:
        data = {"type": etype, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(etype, data)

    def response(
        self, status: str, output: list, usage: dict | None = None, error: dict | None = None, model=None
    ):
        return _response_object(
            resp_id=self.resp_id,
            created=self.created,
            model=model or self.model,
            status=status,
            output=output,
            usage=usage,
            error=error,
        )

    def close_open(self) -> Iterator[bytes]:
        item, self.open = self.open, None
        if item is None:
            return
        idx = len(self.items)
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield self.ev(
                "response.output_text.done",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                text=text,
                logprobs=[],
            )
            yield self.ev(
                "response.content_part.done",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                part=item["content"][0],
            )
        else:
            yield self.ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=idx,
                name=item["name"],
                arguments=item["arguments"],
            )
        item["status"] = "completed"
        yield self.ev("response.output_item.done", output_index=idx, item=item)
        self.items.append(item)

    def frames(self, events: Iterator[dict]) -> Iterator[bytes]:
        started = False
        for event in contiguous_tool_calls(events):
            kind = event["type"]
            if kind == "served":  # the model that serves this answer (sent before its first delta)
                self.model = event["model"]
                continue
            if not started:
                started = True
                if kind == "done":
                    self.model = (event.get("result") or {}).get("served_model") or self.model
                yield self.ev("response.created", response=self.response("in_progress", []))
                yield self.ev("response.in_progress", response=self.response("in_progress", []))
            idx = len(self.items)
            if kind == "text_delta":
                if self.open is None or self.open["type"] != "message":
                    yield from self.close_open()
                    idx = len(self.items)
                    self.open = {
                        "id": f"msg_{uuid.uuid4().hex}", "type": "message", "status": "in_progress", "role": "assistant",
                        "content": [{"type": "output_text", "text": "", "annotations": []}],
                    }  # fmt: skip
                    yield self.ev(
                        "response.output_item.added", output_index=idx, item={**self.open, "content": []}
                    )
                    yield self.ev(
                        "response.content_part.added", item_id=self.open["id"], output_index=idx, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []},
                    )  # fmt: skip
                self.open["content"][0]["text"] += event["text"]
                yield self.ev(
                    "response.output_text.delta",
                    item_id=self.open["id"],
                    output_index=idx,
                    content_index=0,
                    delta=event["text"],
                    logprobs=[],
                )
            elif kind == "tool_call_delta":
                if self.open is None or self.open.get("_index") != event["index"]:
                    yield from self.close_open()
                    idx = len(self.items)
                    self.open = {
                        "id": f"fc_{uuid.uuid4().hex}", "type": "function_call", "status": "in_progress",
                        "call_id": event.get("id") or "", "name": event.get("name") or "", "arguments": "", "_index": event["index"],
                    }  # fmt: skip
                    yield self.ev(
                        "response.output_item.added", output_index=idx, item=self._public(self.open)
                    )
                if event.get("arguments_delta"):
                    self.open["arguments"] += event["arguments_delta"]
                    yield self.ev(
                        "response.function_call_arguments.delta",
                        item_id=self.open["id"],
                        output_index=idx,
                        delta=event["arguments_delta"],
                    )
            elif kind == "done":
                yield from self.close_open()
                r = event["result"] or {}
                items = [self._public(i) for i in self.items]
                status = "incomplete" if r.get("finish_reason") == "length" else "completed"
                final = self.response(status, items, responses_usage(r), model=r.get("served_model"))
                yield self.ev(f"response.{status}", response=final)
                return
            elif kind == "error":
                error = {"code": "server_error", "message": f"The completion failed: {event.get('error')}"}
                yield self.ev(
                    "response.failed",
                    response=self.response("failed", [self._public(i) for i in self.items], error=error),
                )
                return

    @staticmethod
    def _public(item: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in item.items() if not k.startswith("_")}


class ResponsesApi(OpenAIView):
    """``POST /v1/responses`` in the OpenAI wire format (streaming included; stateless)."""

    def post(self, request):
        body = self.body(request)
        check_known(body, RESPONSES_PARAMS)
        check_sampling(body, token_fields=("max_output_tokens",), temperature_max=2.0)
        model_name = as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        pinned = resolve_model(model_name)
        require(
            body.get("previous_response_id") is None,
            "previous_response_id is not supported: send the whole conversation in 'input'.",
            "previous_response_id",
        )
        require(not body.get("background"), "background responses are not supported.", "background")
        stream = body.get("stream") or False
        require(isinstance(stream, bool), "'stream' must be a boolean.", "stream")
        tools = responses_tools(body.get("tools"))
        check_tool_choice(body.get("tool_choice"), tools, style="responses")
        job, _ = submit(
            request,
            messages=responses_messages(body),
            tools=tools,
            model=pinned,
            stream=stream,
            user=body.get("user"),
            safety_identifier=body.get("safety_identifier"),
            metadata=body.get("metadata"),
        )
        if stream:
            frames = stream_frames(job, _ResponsesStream(job, model_name).frames)
            response = sse_response(frames)
            response["x-muse-job-id"] = str(job.id)
            return response
        job = finished_job(job, request)
        return Response(responses_object(job), headers=muse_headers(job))
