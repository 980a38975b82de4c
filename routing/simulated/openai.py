"""The simulated upstreams' OpenAI answers: Chat Completions (also the Avocado native service and
Azure deployments) and the Responses API (OpenAI and Azure), plain and streamed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from .render import Renderer, StreamStop, split_n, sse, words


class ChatRenderer(Renderer):
    """OpenAI Chat Completions (https://platform.openai.com/docs/api-reference/chat)."""

    def usage(self) -> dict[str, Any]:
        p = self.plan
        return {
            "prompt_tokens": p.input_tokens,
            "completion_tokens": p.output_tokens,
            "total_tokens": p.input_tokens + p.output_tokens,
            "prompt_tokens_details": {"cached_tokens": p.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": p.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def full(self) -> dict[str, Any]:
        p = self.plan
        message: dict[str, Any] = {"role": "assistant", "content": p.text or None, "refusal": None}
        if p.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args in p.tool_calls
            ]
        return {
            "id": f"chatcmpl-{p.request_id[:24]}",
            "object": "chat.completion",
            "created": self.created,
            "model": p.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if p.tool_calls else "stop",
                }
            ],
            "usage": self.usage(),
        }

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, usage: Any = None, choices=True
    ) -> bytes:
        p = self.plan
        data: dict[str, Any] = {
            "id": f"chatcmpl-{p.request_id[:24]}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": p.model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            if choices
            else [],
        }
        if usage is not None or (self.body.get("stream_options") or {}).get("include_usage"):
            data["usage"] = usage
        return sse(data)

    def events(self) -> Iterator[bytes]:
        p = self.plan
        try:
            yield self.chunk({"role": "assistant", "content": "", "refusal": None})
            if p.text:
                for piece in words(p.text):
                    yield from self.gate()
                    yield self.chunk({"content": piece})
            for index, (cid, name, args) in enumerate(p.tool_calls):
                yield from self.gate()
                yield self.chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": cid,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in split_n(json.dumps(args)):
                    yield from self.gate()
                    yield self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            yield self.chunk({}, finish="tool_calls" if p.tool_calls else "stop")
            if (self.body.get("stream_options") or {}).get("include_usage"):
                yield self.chunk({}, usage=self.usage(), choices=False)
            yield b"data: [DONE]\n\n"
        except StreamStop:
            return

    def stream_error(self) -> Iterator[bytes]:
        yield sse(
            {
                "error": {
                    "message": "The server had an error while processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
        )


class ResponsesRenderer(Renderer):
    """OpenAI / Azure OpenAI Responses API (https://platform.openai.com/docs/api-reference/responses)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seq = 0
        p = self.plan
        self.resp_id = f"resp_{p.request_id[:32]}"
        self.items: list[dict[str, Any]] = []
        if p.reasoning:
            item: dict[str, Any] = {
                "id": f"rs_{uuid.uuid4().hex}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "**Planning** Considering the request."}],
            }
            if p.encrypted:
                item["encrypted_content"] = self.fake.issue_blob("gAAAAA", p.model)
            self.items.append(item)
        if p.text:
            self.items.append(
                {
                    "id": f"msg_{uuid.uuid4().hex}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": p.text, "annotations": [], "logprobs": []}],
                }
            )
        for cid, name, args in p.tool_calls:
            self.items.append(
                {
                    "id": f"fc_{uuid.uuid4().hex}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": cid,
                    "name": name,
                    "arguments": json.dumps(args),
                }
            )
        reasoning_id = None
        for pos, item in enumerate(self.items):
            if item["type"] == "reasoning":
                reasoning_id = item["id"]
                following = self.items[pos + 1] if pos + 1 < len(self.items) else None
                if "encrypted_content" in item:
                    self.fake.bind_issued(
                        item["encrypted_content"], {"id": item["id"], "following": following}
                    )
            elif item["type"] == "function_call" and reasoning_id is not None:
                self.fake.bind_issued("fc:" + item["id"], {"id": reasoning_id})

    def usage(self) -> dict[str, Any]:
        p = self.plan
        return {
            "input_tokens": p.input_tokens,
            "input_tokens_details": {
                "cached_tokens": p.cached_tokens,
                "cache_write_tokens": p.cache_write_tokens,
            },
            "output_tokens": p.output_tokens,
            "output_tokens_details": {"reasoning_tokens": p.reasoning_tokens},
            "total_tokens": p.input_tokens + p.output_tokens,
        }

    def response(
        self, status: str, output: list[dict[str, Any]], usage: Any, error: Any = None
    ) -> dict[str, Any]:
        b = self.body
        return {
            "id": self.resp_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": error,
            "incomplete_details": None,
            "instructions": b.get("instructions"),
            "max_output_tokens": b.get("max_output_tokens"),
            "model": self.plan.model,
            "output": output,
            "parallel_tool_calls": b.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": b.get("reasoning") or {"effort": None, "summary": None},
            "store": b.get("store", True),
            "temperature": b.get("temperature", 1.0),
            "text": b.get("text") or {"format": {"type": "text"}},
            "tool_choice": b.get("tool_choice", "auto"),
            "tools": b.get("tools") or [],
            "top_p": b.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        }

    def full(self) -> dict[str, Any]:
        return self.response("completed", self.items, self.usage())

    def ev(self, etype: str, **fields: Any) -> bytes:
        data = {"type": etype, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(data, event=etype)

    def events(self) -> Iterator[bytes]:
        try:
            yield self.ev("response.created", response=self.response("in_progress", [], None))
            yield self.ev("response.in_progress", response=self.response("in_progress", [], None))
            for idx, item in enumerate(self.items):
                if item["type"] == "reasoning":
                    added = dict(item)
                    if "encrypted_content" in added:
                        # Real API: the blob in output_item.added "may be incomplete".
                        added["encrypted_content"] = added["encrypted_content"][:24]
                    yield self.ev("response.output_item.added", output_index=idx, item=added)
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
                elif item["type"] == "message":
                    text = item["content"][0]["text"]
                    empty = {**item, "status": "in_progress", "content": []}
                    yield self.ev("response.output_item.added", output_index=idx, item=empty)
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    yield self.ev(
                        "response.content_part.added",
                        item_id=item["id"],
                        output_index=idx,
                        content_index=0,
                        part=part,
                    )
                    for piece in words(text):
                        yield from self.gate()
                        yield self.ev(
                            "response.output_text.delta",
                            item_id=item["id"],
                            output_index=idx,
                            content_index=0,
                            delta=piece,
                            logprobs=[],
                        )
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
                        part={**part, "text": text},
                    )
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
                else:
                    empty = {**item, "status": "in_progress", "arguments": ""}
                    yield self.ev("response.output_item.added", output_index=idx, item=empty)
                    for piece in split_n(item["arguments"]):
                        yield from self.gate()
                        yield self.ev(
                            "response.function_call_arguments.delta",
                            item_id=item["id"],
                            output_index=idx,
                            delta=piece,
                        )
                    yield self.ev(
                        "response.function_call_arguments.done",
                        item_id=item["id"],
                        output_index=idx,
                        name=item["name"],
                        arguments=item["arguments"],
                    )
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
            yield self.ev("response.completed", response=self.full())
        except StreamStop:
            return

    def stream_error(self) -> Iterator[bytes]:
        if self.plan.scenario.stream_error_kind == "response.failed":
            err = {"code": "server_error", "message": "The model failed to generate a response."}
            yield self.ev("response.failed", response=self.response("failed", [], None, error=err))
        else:
            yield self.ev(
                "error",
                code="server_error",
                message="The server had an error while processing your request.",
                param=None,
            )
