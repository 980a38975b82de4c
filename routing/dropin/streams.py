"""Drop-in streams: the job's events, made ready for the vendors' stream formats.

* :func:`stream_frames` — SSE frames: the job's events through a vendor formatter, keepalives as
  SSE comments;
* :func:`contiguous_tool_calls` — every tool call's fragments made contiguous (Responses items and
  Messages blocks stream one at a time);
* :func:`tool_calls_in_index_order` — calls introduced in ``index`` order (Chat Completions chunks),
  each whole as the result assembled it (:func:`assembled_tool_calls`);
* :func:`usage_numbers` — a job result's token counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings

from routing.models import CompletionJob
from routing.web.relay import KEEPALIVE_FRAME, job_events


def stream_frames(
    job: CompletionJob, formatter: Callable[[Iterator[dict]], Iterator[bytes]]
) -> Iterator[bytes]:
    """SSE frames: the job's events through a provider formatter; keepalives become comments."""
    keepalive_pending = False

    def events() -> Iterator[dict]:
        nonlocal keepalive_pending
        for event in job_events(job_id=str(job.id), start_timeout_s=settings.DROPIN_WAIT_S):
            if event["type"] == "keepalive":
                keepalive_pending = True
                continue
            yield event

    for frame in formatter(events()):
        if keepalive_pending:
            keepalive_pending = False
            yield KEEPALIVE_FRAME
        yield frame


def contiguous_tool_calls(events: Iterator[dict]) -> Iterator[dict]:
    """Our events with every tool call's fragments made contiguous, for formats that stream one
    output item (Responses) or content block (Messages) at a time.

    Upstreams may interleave parallel tool calls (Chat Completions fragments carry an ``index``:
    ``{"city":`` for 0, ``{"city":`` for 1, ``"Paris"}`` for 0 …). The first tool call seen streams
    live; fragments of any other call — and text that arrives once a tool call has begun — are
    held back and released when the stream finishes, each call as one ``tool_call_delta`` that
    carries its id, name and whole arguments, in ``index`` order (calls are introduced in index
    order first: :func:`tool_calls_in_index_order`). Calls are keyed by ``index``; a call's ``id`` and
    ``name`` are the first non-empty ones seen. A stream that fails (``error``) drops what was
    held back: those calls were never complete.
    """
    live: int | None = None
    held: dict[int, dict[str, Any]] = {}
    held_text: list[str] = []
    for event in tool_calls_in_index_order(events):
        kind = event.get("type")
        if kind == "tool_call_delta":
            index = event["index"]
            if live is None:
                live = index
            if index == live:
                yield event
                continue
            call = held.setdefault(index, {"id": None, "name": None, "arguments": []})
            call["id"] = call["id"] or event.get("id")
            call["name"] = call["name"] or event.get("name")
            call["arguments"].append(event.get("arguments_delta") or "")
        elif kind == "text_delta" and live is not None:
            held_text.append(event["text"])
        elif kind == "done":
            for index, call in sorted(held.items()):
                yield {
                    "type": "tool_call_delta",
                    "index": index,
                    "id": call["id"],
                    "name": call["name"],
                    "arguments_delta": "".join(call["arguments"]),
                }
            if held_text:
                yield {"type": "text_delta", "text": "".join(held_text)}
            yield event
            return
        else:
            yield event
            if kind == "error":
                return


def tool_calls_in_index_order(events: Iterator[dict]) -> Iterator[dict]:
    """Our events with tool calls *introduced* in ``index`` order, for Chat Completions chunks.

    Chat clients (the ``openai`` SDK's stream accumulator among them) expect call ``n`` to be
    announced before call ``n + 1`` and fail on an index they have not seen the previous ones of.
    Fragments of a call whose lower-numbered calls have not appeared yet are held back until they
    have (or until the stream finishes); everything else passes through at once, interleaving
    included, since chat chunks say which call each fragment belongs to. Calls are first made
    whole from the assembled result (:func:`assembled_tool_calls`).
    """
    introduced: set[int] = set()
    held: dict[int, list[dict]] = {}

    def ready(index: int) -> bool:
        return index in introduced or all(i in introduced for i in range(index))

    for event in assembled_tool_calls(events):
        if event.get("type") == "tool_call_delta":
            index = event["index"]
            if not ready(index):
                held.setdefault(index, []).append(event)
                continue
            introduced.add(index)
            yield event
            while (nxt := min((i for i in held if ready(i)), default=None)) is not None:
                introduced.add(nxt)
                yield from held.pop(nxt)
            continue
        if event.get("type") == "done":
            for index in sorted(held):
                yield from held.pop(index)
        yield event


def assembled_tool_calls(events: Iterator[dict]) -> Iterator[dict]:
    """Our events with every tool call streamed whole: before ``done``, the arguments of each call
    of the assembled result (``result.tool_calls``, matched by id, else by position) that its
    deltas did not carry — all of them (``{}`` for none) when no delta carried any, the rest when
    the deltas sent are the beginning of their JSON — and any call no delta introduced, with its
    id and name. An upstream may give a call's arguments whole in an event other than its deltas
    (Responses ``*.done`` items, an Anthropic-compatible ``content_block_start``); the result is
    what the call was."""
    streamed: dict[int, str] = {}
    index_of: dict[str, int] = {}
    for event in events:
        kind = event.get("type")
        if kind == "tool_call_delta":
            index = event["index"]
            streamed[index] = streamed.get(index, "") + (event.get("arguments_delta") or "")
            if event.get("id"):
                index_of.setdefault(event["id"], index)
        elif kind == "done":
            for position, call in enumerate((event.get("result") or {}).get("tool_calls") or ()):
                index = index_of.get(call.get("id") or "")
                if index is None:
                    index = position if position not in streamed else max(streamed) + 1
                have = streamed.get(index)
                whole = json.dumps(call.get("arguments") or {})
                rest = (
                    whole
                    if not (have or "").strip()
                    else whole[len(have) :]
                    if whole.startswith(have)
                    else ""
                )
                if rest or have is None:
                    streamed[index] = (have or "") + rest
                    intro = {"id": call.get("id"), "name": call.get("name")} if have is None else {}
                    yield {"type": "tool_call_delta", "index": index, "id": None, "name": None, **intro,
                           "arguments_delta": rest}  # fmt: skip
        yield event


def usage_numbers(result: Mapping[str, Any] | None) -> dict[str, int]:
    """Token counts of a job result (normalised: input includes cache reads and writes)."""
    u = (result or {}).get("usage") or {}
    return {
        k: int(u.get(k) or 0)
        for k in (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "reasoning_tokens",
        )
    }
