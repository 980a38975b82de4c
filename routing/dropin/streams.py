"""Drop-in streams: the job's events, made ready for the vendors' stream formats.

* :func:`stream_frames` — SSE frames: the job's events through a vendor formatter, keepalives as
  SSE comments;
* :func:`contiguous_tool_calls` — every tool call's fragments made contiguous (Responses items and
  Messages blocks stream one at a time);
* :func:`tool_calls_in_index_order` — calls introduced in ``index`` order (Chat Completions chunks);
* :func:`usage_numbers` — a job result's token counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings

from ..models import CompletionJob
from ..streaming import KEEPALIVE_FRAME, job_events


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
    included, since chat chunks say which call each fragment belongs to.
    """
    introduced: set[int] = set()
    held: dict[int, list[dict]] = {}

    def ready(index: int) -> bool:
        return index in introduced or all(i in introduced for i in range(index))

    for event in events:
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


def usage_numbers(result: Mapping[str, Any] | None) -> dict[str, int]:
    """Token counts of a job result (normalised: input includes cache reads and writes)."""
    u = (result or {}).get("usage") or {}
    return {
        k: int(u.get(k) or 0)
        for k in (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "output_tokens",
            "reasoning_tokens",
        )
    }
