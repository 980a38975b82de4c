"""OpenAI answers of the drop-ins: Chat Completions and Responses objects and streams.

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

from routing.models import CompletionJob
from routing.web.relay import sse

from .errors import openai_error
from .streams import contiguous_tool_calls, tool_calls_in_index_order, usage_numbers

CHAT_FINISH = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


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


class ResponsesStream:
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
