"""The simulated upstreams' Anthropic Messages answers, plain and streamed (thinking, redacted
thinking, text and tool-use blocks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .render import Renderer, StreamStop, split_n, sse, words


class MessagesRenderer(Renderer):
    """Anthropic Messages (https://docs.anthropic.com/en/api/messages, .../messages-streaming)."""

    flavour = "anthropic"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        p = self.plan
        self.msg_id = f"msg_{p.request_id[4:28]}"
        self.blocks: list[dict[str, Any]] = []
        if p.reasoning:
            self.blocks.append(
                {
                    "type": "thinking",
                    "thinking": p.thinking_text,
                    "signature": self.fake.issue_blob("EqQB", p.model),
                }
            )
            if p.redacted:
                self.blocks.append(
                    {"type": "redacted_thinking", "data": self.fake.issue_blob("EmwK", p.model)}
                )
        if p.text:
            self.blocks.append({"type": "text", "text": p.text})
        for cid, name, args in p.tool_calls:
            self.blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
        reasoning = [b for b in self.blocks if b["type"] in ("thinking", "redacted_thinking")]
        if reasoning:
            rest = [(b["type"], b.get("id"), b.get("text")) for b in self.blocks[len(reasoning) :]]
            record = {"reasoning": [dict(b) for b in reasoning], "rest": rest}
            for block in reasoning:
                self.fake.bind_issued(block.get("signature") or block["data"], record)
            for cid, _, _ in p.tool_calls:
                self.fake.bind_issued("tool_use:" + cid, record)

    def usage(self, output_tokens: int | None = None) -> dict[str, Any]:
        p = self.plan
        return {
            "input_tokens": max(0, p.input_tokens - p.cached_tokens - p.cache_write_tokens),
            "cache_creation_input_tokens": p.cache_write_tokens,
            "cache_read_input_tokens": p.cached_tokens,
            "output_tokens": p.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }

    def message(
        self, content: list[dict[str, Any]], stop_reason: str | None, usage: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.plan.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def stop_reason(self) -> str:
        return "tool_use" if self.plan.tool_calls else "end_turn"

    def full(self) -> dict[str, Any]:
        return self.message(self.blocks, self.stop_reason(), self.usage())

    def events(self) -> Iterator[bytes]:
        try:
            yield sse(
                {"type": "message_start", "message": self.message([], None, self.usage(output_tokens=1))},
                "message_start",
            )
            yield sse({"type": "ping"}, "ping")
            for idx, block in enumerate(self.blocks):
                btype = block["type"]
                if btype == "thinking":
                    yield self.block_start(idx, {"type": "thinking", "thinking": "", "signature": ""})
                    if block["thinking"]:
                        for piece in words(block["thinking"]):
                            yield from self.gate()
                            yield self.delta(idx, {"type": "thinking_delta", "thinking": piece})
                    yield self.delta(idx, {"type": "signature_delta", "signature": block["signature"]})
                elif btype == "redacted_thinking":
                    yield self.block_start(idx, block)
                elif btype == "text":
                    yield self.block_start(idx, {"type": "text", "text": ""})
                    for piece in words(block["text"]):
                        yield from self.gate()
                        yield self.delta(idx, {"type": "text_delta", "text": piece})
                else:
                    yield self.block_start(idx, {**block, "input": {}})
                    for piece in split_n(json.dumps(block["input"])):
                        yield from self.gate()
                        yield self.delta(idx, {"type": "input_json_delta", "partial_json": piece})
                yield sse({"type": "content_block_stop", "index": idx}, "content_block_stop")
            usage = self.usage()
            yield sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self.stop_reason(), "stop_sequence": None},
                    "usage": {
                        "output_tokens": usage["output_tokens"],
                        "input_tokens": usage["input_tokens"],
                        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
                        "cache_read_input_tokens": usage["cache_read_input_tokens"],
                    },
                },
                "message_delta",
            )
            yield sse({"type": "message_stop"}, "message_stop")
        except StreamStop:
            return

    def block_start(self, idx: int, block: dict[str, Any]) -> bytes:
        return sse(
            {"type": "content_block_start", "index": idx, "content_block": block}, "content_block_start"
        )

    def delta(self, idx: int, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": idx, "delta": delta}, "content_block_delta")

    def stream_error(self) -> Iterator[bytes]:
        yield sse(
            {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
                "request_id": self.plan.request_id,
            },
            "error",
        )
