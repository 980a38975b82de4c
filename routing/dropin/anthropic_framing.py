"""Anthropic answers of the drop-in: ``message`` objects and the Messages event stream.

Bodies are built with the ``anthropic`` SDK's pydantic types (``Message``,
``RawMessageStartEvent`` …). Streams use the Messages event sequence the SDK parses:
``message_start``, per content block ``content_block_start`` / ``content_block_delta``
(``text_delta`` or ``input_json_delta``) / ``content_block_stop``, ``message_delta`` (stop reason,
output tokens), ``message_stop``; failures end with an ``error`` event. Thinking blocks are never
returned.

Usage: Anthropic's ``input_tokens`` excludes cache reads and writes, so it is our normalised
``input_tokens - cached_input_tokens - cache_write_tokens``; ``cache_creation`` splits the writes
by TTL (5 minutes, 1 hour).
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

from routing.models import CompletionJob
from routing.web.relay import sse

from .errors import anthropic_error
from .streams import contiguous_tool_calls, usage_numbers

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def anthropic_usage(result: dict[str, Any]) -> dict[str, int]:
    u = usage_numbers(result)
    return {
        "input_tokens": max(0, u["input_tokens"] - u["cached_input_tokens"] - u["cache_write_tokens"]),
        "output_tokens": u["output_tokens"],
        "cache_read_input_tokens": u["cached_input_tokens"],
        "cache_creation_input_tokens": u["cache_write_tokens"],
        "cache_creation": {
            "ephemeral_5m_input_tokens": u["cache_write_tokens"] - u["cache_write_1h_tokens"],
            "ephemeral_1h_input_tokens": u["cache_write_1h_tokens"],
        },
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
