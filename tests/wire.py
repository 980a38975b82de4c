"""Exact upstream wire frames for :class:`routing.simulated.Scenario` ``wire`` scripts.

Each builder returns a list of frames (``{"data": "<bytes as text>", "delay_ms": N}``) as the
real APIs send them, so a test states the upstream's bytes instead of describing them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


def frame(payload: Any, event: str | None = None, delay_ms: int = 0) -> dict[str, Any]:
    """One SSE frame: optional ``event:`` line, one ``data:`` line (JSON unless already a str)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    head = f"event: {event}\n" if event else ""
    return {"data": f"{head}data: {data}\n\n", "delay_ms": delay_ms}


# -- Chat Completions ----------------------------------------------------------------------------


def chat_chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None, usage=None) -> dict:
    body: dict[str, Any] = {
        "id": "chatcmpl-wire",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def chat_text_stream(
    model: str, pieces: Sequence[str], *, delay_ms: int = 0, prompt_tokens: int = 12
) -> list[dict[str, Any]]:
    """A text answer: role chunk, one chunk per piece (``delay_ms`` apart), finish, usage, [DONE]."""
    frames = [frame(chat_chunk(model, {"role": "assistant", "content": ""}))]
    frames += [frame(chat_chunk(model, {"content": p}), delay_ms=delay_ms) for p in pieces]
    frames.append(frame(chat_chunk(model, {}, "stop")))
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    frames.append(frame(chat_chunk(model, None, usage=usage)))
    frames.append({"data": "data: [DONE]\n\n"})
    return frames


def chat_tool_stream(model: str, fragments: Iterable[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Tool-call fragments ``(index, fields)`` in the given order (``fields``: ``id``/``name``
    for a header, ``arguments`` for a piece), then ``finish_reason=tool_calls`` and [DONE]."""
    frames = [frame(chat_chunk(model, {"role": "assistant", "content": None}))]
    for index, fields in fragments:
        call: dict[str, Any] = {"index": index, "function": {}}
        if "id" in fields:
            call.update(id=fields["id"], type="function")
        if "name" in fields:
            call["function"]["name"] = fields["name"]
        call["function"]["arguments"] = fields.get("arguments", "")
        frames.append(frame(chat_chunk(model, {"tool_calls": [call]})))
    frames.append(frame(chat_chunk(model, {}, "tool_calls")))
    frames.append(
        frame(
            chat_chunk(model, None, usage={"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50})
        )
    )
    frames.append({"data": "data: [DONE]\n\n"})
    return frames


# -- Anthropic Messages --------------------------------------------------------------------------


def anthropic_stream(
    model: str,
    *,
    start_usage: dict[str, Any],
    delta_usage: dict[str, Any],
    text_pieces: Sequence[str] = ("Hello",),
    delay_ms: int = 0,
    stop_reason: str = "end_turn",
) -> list[dict[str, Any]]:
    """A text answer with the given ``message_start`` and ``message_delta`` usage objects, verbatim."""
    message = {
        "id": "msg_wire", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage,
    }  # fmt: skip
    frames = [frame({"type": "message_start", "message": message}, "message_start")]
    frames.append(
        frame(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        )
    )
    for piece in text_pieces:
        frames.append(
            frame(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                "content_block_delta",
                delay_ms,
            )
        )
    frames.append(frame({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    frames.append(
        frame(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": delta_usage,
            },
            "message_delta",
        )
    )
    frames.append(frame({"type": "message_stop"}, "message_stop"))
    return frames


# -- Responses -----------------------------------------------------------------------------------


def response_object(model: str, status: str, *, usage=None, output=None, error=None) -> dict[str, Any]:
    return {
        "id": "resp_wire", "object": "response", "created_at": 1_700_000_000, "model": model,
        "status": status, "output": output or [], "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "usage": usage, "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
    }  # fmt: skip


def responses_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


RESPONSE_FAILED = {"code": "server_error", "message": "The model failed to generate a response."}


def responses_failed_body(model: str, *, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A non-streamed ``status: failed`` response carrying the usage the provider billed."""
    return response_object(
        model, "failed", usage=responses_usage(input_tokens, output_tokens), error=RESPONSE_FAILED
    )


def responses_failed_stream(model: str, *, input_tokens: int, output_tokens: int) -> list[dict[str, Any]]:
    """``response.created``, then ``response.failed`` carrying the usage the provider billed."""
    error = RESPONSE_FAILED
    return [
        frame(
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": response_object(model, "in_progress"),
            },
            "response.created",
        ),
        frame(
            {
                "type": "response.failed",
                "sequence_number": 1,
                "response": response_object(
                    model, "failed", usage=responses_usage(input_tokens, output_tokens), error=error
                ),
            },
            "response.failed",
        ),
    ]


# -- Parallel tool calls, fragments in a given order, in each upstream style ---------------------

#: The issue's interleaving: headers for call_a (0) and call_b (1), both get_weather, then
#: ``{"city":`` (0), ``{"city":`` (1), ``"Paris"}`` (0), ``"Oslo"}`` (1).
ISSUE_INTERLEAVING: list[tuple[int, dict[str, Any]]] = [
    (0, {"id": "call_a", "name": "get_weather"}),
    (1, {"id": "call_b", "name": "get_weather"}),
    (0, {"arguments": '{"city":'}),
    (1, {"arguments": '{"city":'}),
    (0, {"arguments": '"Paris"}'}),
    (1, {"arguments": '"Oslo"}'}),
]


def responses_tool_stream(
    model: str, fragments: Iterable[tuple[int, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Responses events: ``output_item.added`` per header, ``function_call_arguments.delta`` per
    piece (by ``item_id``), in the given order, then ``response.completed`` with the whole calls."""
    frames, items, seq = [], {}, 0

    def ev(etype: str, **fields: Any) -> dict[str, Any]:
        nonlocal seq
        seq += 1
        return frame({"type": etype, "sequence_number": seq, **fields}, etype)

    frames.append(ev("response.created", response=response_object(model, "in_progress")))
    for index, fields in fragments:
        if "id" in fields:
            item = {"id": f"fc_{index}", "type": "function_call", "status": "in_progress",
                    "call_id": fields["id"], "name": fields["name"], "arguments": ""}  # fmt: skip
            items[index] = item
            frames.append(ev("response.output_item.added", output_index=index, item=item))
        else:
            items[index]["arguments"] += fields["arguments"]
            frames.append(
                ev(
                    "response.function_call_arguments.delta",
                    item_id=f"fc_{index}",
                    output_index=index,
                    delta=fields["arguments"],
                )
            )
    output = [{**items[i], "status": "completed"} for i in sorted(items)]
    frames.append(
        ev(
            "response.completed",
            response=response_object(model, "completed", usage=responses_usage(30, 20), output=output),
        )
    )
    return frames


def anthropic_tool_stream(
    model: str, fragments: Iterable[tuple[int, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Messages events: ``content_block_start`` (tool_use) per header and ``input_json_delta`` per
    piece, by content block index, in the given order; blocks stop at the end."""
    message = {"id": "msg_wire", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 30, "output_tokens": 1}}  # fmt: skip
    frames = [frame({"type": "message_start", "message": message}, "message_start")]
    started = []
    for index, fields in fragments:
        if "id" in fields:
            started.append(index)
            block = {"type": "tool_use", "id": fields["id"], "name": fields["name"], "input": {}}
            frames.append(
                frame(
                    {"type": "content_block_start", "index": index, "content_block": block},
                    "content_block_start",
                )
            )
        else:
            delta = {"type": "input_json_delta", "partial_json": fields["arguments"]}
            frames.append(
                frame({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            )
    for index in started:
        frames.append(frame({"type": "content_block_stop", "index": index}, "content_block_stop"))
    frames.append(
        frame(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
            "message_delta",
        )
    )
    frames.append(frame({"type": "message_stop"}, "message_stop"))
    return frames


# -- Tool-call arguments given whole, not in deltas ----------------------------------------------

#: Where a Responses stream puts a call's arguments when it sends no ``arguments.delta``:
#: ``arguments_done`` (``function_call_arguments.done`` and ``output_item.done``), ``item_done``
#: (only ``output_item.done``), ``item_done_only`` (no ``output_item.added`` either).
WHOLE_ARGUMENT_CARRIERS = ("arguments_done", "item_done", "item_done_only")


def responses_whole_arguments_stream(
    model: str, call_id: str, name: str, arguments: dict[str, Any], carrier: str
) -> list[dict[str, Any]]:
    """A Responses stream of one function call whose arguments come whole, in ``carrier``'s
    events (:data:`WHOLE_ARGUMENT_CARRIERS`), never in ``function_call_arguments.delta``; then
    ``response.completed`` with the call."""
    raw = json.dumps(arguments)
    item = {"id": "fc_whole", "type": "function_call", "status": "in_progress", "call_id": call_id,
            "name": name, "arguments": ""}  # fmt: skip
    done_item = {**item, "status": "completed", "arguments": raw}
    seq = iter(range(100))

    def ev(etype: str, **fields: Any) -> dict[str, Any]:
        return frame({"type": etype, "sequence_number": next(seq), **fields}, etype)

    frames = [ev("response.created", response=response_object(model, "in_progress"))]
    if carrier != "item_done_only":
        frames.append(ev("response.output_item.added", output_index=0, item=item))
    if carrier == "arguments_done":
        frames.append(
            ev("response.function_call_arguments.done", item_id="fc_whole", output_index=0, arguments=raw)
        )
    frames.append(ev("response.output_item.done", output_index=0, item=done_item))
    frames.append(
        ev(
            "response.completed",
            response=response_object(model, "completed", usage=responses_usage(30, 20), output=[done_item]),
        )
    )
    return frames


def anthropic_whole_input_stream(
    model: str, call_id: str, name: str, arguments: dict[str, Any], *, empty_delta: bool = False
) -> list[dict[str, Any]]:
    """An Anthropic-compatible stream of one tool call whose whole ``input`` is in its
    ``content_block_start`` (no ``input_json_delta``, or one with ``partial_json: ""`` when
    ``empty_delta``), then ``tool_use`` stop."""
    message = {"id": "msg_wire", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 30, "output_tokens": 1}}  # fmt: skip
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    frames = [
        frame({"type": "message_start", "message": message}, "message_start"),
        frame({"type": "content_block_start", "index": 0, "content_block": block}, "content_block_start"),
    ]
    if empty_delta:
        delta = {"type": "input_json_delta", "partial_json": ""}
        frames.append(
            frame({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        )
    frames += [
        frame({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        frame(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
            "message_delta",
        ),
        frame({"type": "message_stop"}, "message_stop"),
    ]
    return frames
