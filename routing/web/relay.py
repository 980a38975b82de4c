"""Web side of a job's events: relay them from the job's Redis Stream as Server-Sent Events, and
ask the worker to stop when the caller goes away.

The worker appends the events (:class:`routing.state.events.RedisEventLog`); the web process reads
them from the first entry (``XREAD BLOCK`` from id ``0``), so a reader that arrives late misses
nothing. Event shapes are listed in :mod:`routing.pipeline.streaming`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse

from muse_experiments.infra.redis_client import redis_client
from routing.jobs import completion_job_flag_cancel
from routing.models import FINISHED_STATUSES, CompletionJob, JobStatus
from routing.state.events import TERMINAL, cancel_key, stream_key, terminal_event

log = logging.getLogger(__name__)


def job_cancel_request(*, job_id: str) -> None:
    """Ask whoever runs the job to stop: its caller went away (stream closed, or gave up waiting).

    A Redis key with a TTL (``COMPLETION_STREAM_TTL_S``); if Redis refuses it, the job row's
    ``cancel_requested`` flag. The runner checks it between stream chunks (:class:`CancelWatch`),
    closes the upstream call and records the job ``cancelled`` (a non-streamed call:
    :data:`cancel_watcher` cuts the upstream connection). Harmless on a finished job.
    """
    try:
        redis_client().set(cancel_key(job_id), b"1", ex=settings.COMPLETION_STREAM_TTL_S)
        return
    except Exception:  # noqa: BLE001 - fall back to the row: the flag must not be lost
        log.exception("could not set the cancel key of job %s; flagging the row", job_id)
    completion_job_flag_cancel(job_id=job_id)


def relay_events(
    *,
    job_id: str,
    keepalive_s: float = 15.0,
    recheck_s: float = 5.0,
    block_ms: int = 1000,
    start_timeout_s: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Web side: yield a job's events from its Redis Stream, from the first, until the terminal one.

    While the stream is idle it yields ``{"type": "keepalive"}`` every ``keepalive_s`` seconds
    (formatters turn it into an SSE comment) and re-reads the job row every ``recheck_s`` seconds as
    a safety net, ending with the job's terminal event if it finished without one reaching the
    stream. If no worker has started the job after ``start_timeout_s`` (default
    ``COMPLETION_SYNC_WAIT_S``) the relay ends with an ``error`` event of status ``queued`` naming
    the job URL (the job still runs later; its result is at ``GET /api/v1/completions/{id}``).
    Events arrive by blocking ``XREAD``; nothing is polled while they flow.
    """
    client = redis_client()
    key = stream_key(job_id)
    last_id = "0"
    start_timeout_s = settings.COMPLETION_SYNC_WAIT_S if start_timeout_s is None else start_timeout_s
    recheck_s = min(recheck_s, max(start_timeout_s, 0.5))
    started = idle_since = last_check = last_keepalive = time.monotonic()
    seen_any = False
    while True:
        response = client.xread({key: last_id}, block=block_ms, count=256)
        now = time.monotonic()
        if response:
            idle_since = now
            seen_any = True
            for entry_id, fields in response[0][1]:
                last_id = entry_id
                event = json.loads(fields[b"e"])
                yield event
                if event.get("type") in TERMINAL:
                    return
            continue
        if now - last_keepalive >= keepalive_s:
            last_keepalive = now
            yield {"type": "keepalive"}
        if now - last_check >= recheck_s and now - idle_since >= recheck_s:
            last_check = now
            job = CompletionJob.objects.filter(pk=job_id).first()
            if job is not None and job.status == JobStatus.QUEUED and not seen_any:
                if now - started >= start_timeout_s:
                    yield {
                        "type": "error",
                        "id": job_id,
                        "status": job.status,
                        "error": f"no worker started the job within {start_timeout_s:g}s; "
                        f"its result will be at /api/v1/completions/{job_id}",
                    }
                    return
                continue
            if job is None or job.status in FINISHED_STATUSES:
                # the terminal event may have landed between our read and this check: read once more
                tail = client.xread({key: last_id}, count=256)
                for entry_id, fields in tail[0][1] if tail else ():
                    last_id = entry_id
                    event = json.loads(fields[b"e"])
                    yield event
                    if event.get("type") in TERMINAL:
                        return
                yield (
                    terminal_event(job)
                    if job
                    else {"type": "error", "id": job_id, "status": "failed", "error": "job vanished"}
                )
                return


def job_events(*, job_id: str, start_timeout_s: float | None = None) -> Iterator[dict[str, Any]]:
    """The events a web request streams for a job: relayed from the job's Redis stream (the worker
    produces them, :func:`routing.pipeline.streaming.publish_job_events`). If the request's consumer goes away, the job's
    cancel flag is set (the worker closes the upstream call)."""
    try:
        yield from relay_events(job_id=job_id, start_timeout_s=start_timeout_s)
    except GeneratorExit:  # the caller went away: tell the worker to close the upstream call
        job_cancel_request(job_id=job_id)
        raise


def sse(event: str | None, data: Any) -> bytes:
    """One Server-Sent Events frame: optional ``event:`` line, one ``data:`` line of JSON."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), default=str)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


KEEPALIVE_FRAME = b": keep-alive\n\n"


def sse_response(frames: Iterator[bytes]) -> StreamingHttpResponse:
    """A ``text/event-stream`` response that proxies must not buffer."""
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
