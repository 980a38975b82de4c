"""A job's event log in Redis: the worker appends events, the web process relays them.

One Redis Stream per job, ``muse:job:<id>:events`` (``XADD``; the key expires
``COMPLETION_STREAM_TTL_S`` after the first event). The web process reads it from the first entry
(``XREAD BLOCK`` from id ``0``), so a reader that arrives late misses nothing.

Event shapes are listed in :mod:`routing.streaming`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client
from routing.models import FINISHED_STATUSES, CompletionJob, JobStatus
from routing.providers.transport import UpstreamCall, upstream_call

log = logging.getLogger(__name__)

TERMINAL = frozenset({"done", "error"})


def stream_key(job_id: str) -> str:
    """The Redis key of a job's event stream."""
    return f"muse:job:{job_id}:events"


def cancel_key(job_id: str) -> str:
    """The Redis key that says a job's caller went away (set by the web process)."""
    return f"muse:job:{job_id}:cancel"


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
    CompletionJob.objects.filter(pk=job_id).exclude(status__in=FINISHED_STATUSES).update(
        cancel_requested=True
    )


class CancelWatch:
    """``watch()`` -> True once the job's caller asked to stop (:func:`job_cancel_request`).

    Reads the flag at most every ``every_s`` seconds (default 0.2 s), so checking between every
    chunk of a fast stream costs one Redis ``EXISTS`` per interval (one indexed row read when
    Redis fails: the flag may be on the row then).
    """

    def __init__(self, job_id: str, every_s: float = 0.2) -> None:
        self.job_id = job_id
        self.every_s = every_s
        self._next_check = 0.0
        self._cancelled = False

    def __call__(self) -> bool:
        if self._cancelled:
            return True
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + self.every_s
        try:
            self._cancelled = bool(redis_client().exists(cancel_key(self.job_id)))
            return self._cancelled
        except Exception:  # noqa: BLE001 - a Redis hiccup must not end the call; read the row
            log.warning("could not read the cancel key of job %s", self.job_id)
        self._cancelled = CompletionJob.objects.filter(pk=self.job_id, cancel_requested=True).exists()
        return self._cancelled


class CancelWatcher:
    """Per process: cuts off the non-streamed upstream calls of jobs whose caller went away, or
    whose endpoint a kill switch has covered since the call started.

    :meth:`watching` registers a job's attempt (one
    :class:`~routing.providers.transport.UpstreamCall`) for the duration of the block. While any is
    registered, one daemon thread reads the cancel flags (:func:`cancel_key`) of all of them in one
    Redis round trip (``MGET``) every ``every_s`` seconds (default 0.15 s; a call that ends sooner
    costs no round trip) and cancels the calls of flagged jobs: their sockets are shut down and the
    blocked SDK calls fail at once (:mod:`routing.providers.transport`).
    """

    def __init__(self, every_s: float = 0.15) -> None:
        self.every_s = every_s
        self._calls: dict[str, list[UpstreamCall]] = {}
        self._kills: dict[UpstreamCall, Callable[[], Any]] = {}
        self._lock = threading.Lock()
        self._pending = threading.Event()
        self._pid = 0  # the process whose thread runs: a forked child starts its own

    @contextmanager
    def watching(self, job_id: str, killed: Callable[[], Any] | None = None) -> Iterator[UpstreamCall]:
        """Run the block's SDK calls as job ``job_id``'s cancellable upstream call. ``killed``
        (no I/O; :func:`routing.attempts.kill_for`) is asked on every poll too: once it returns a
        kill the call is cut off with ``call.kill`` set."""
        with upstream_call() as call:
            watched = bool(job_id)
            if watched:
                self._add(job_id, call, killed)
            try:
                yield call
            finally:
                if watched:
                    self._remove(job_id, call)

    def poll(self) -> int:
        """Read the flags of the watched jobs once and cancel the flagged jobs' calls, and the calls
        a kill switch now covers; returns how many calls were cancelled. A Redis error is logged
        and cancels none for their callers (the kill checks, in-process, still run)."""
        with self._lock:
            jobs = list(self._calls)
            kill_checks = list(self._kills.items())
        if not jobs:
            return 0
        try:
            flags = redis_client().mget([cancel_key(job_id) for job_id in jobs])
        except Exception:  # noqa: BLE001 - a Redis hiccup must not end calls; read again next time
            log.warning("could not read the cancel flags of %d job(s)", len(jobs))
            flags = [None] * len(jobs)
        with self._lock:
            calls = [
                c
                for job_id, flag in zip(jobs, flags, strict=True)
                if flag
                for c in self._calls.get(job_id, ())
            ]
        for call, killed in kill_checks:  # a kill switch flipped since the call started
            if call not in calls and (kill := killed()) is not None:
                call.kill = kill
                calls.append(call)
        for call in calls:
            call.cancel()
        return len(calls)

    def _add(self, job_id: str, call: UpstreamCall, killed: Callable[[], Any] | None = None) -> None:
        with self._lock:
            self._calls.setdefault(job_id, []).append(call)
            if killed is not None:
                self._kills[call] = killed
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="muse-cancel-watcher", daemon=True).start()
        self._pending.set()

    def _remove(self, job_id: str, call: UpstreamCall) -> None:
        with self._lock:
            self._kills.pop(call, None)
            calls = self._calls.get(job_id, [])
            if call in calls:
                calls.remove(call)
            if not calls:
                self._calls.pop(job_id, None)

    def _run(self) -> None:
        while True:
            self._pending.wait()
            time.sleep(self.every_s)
            with self._lock:
                if not self._calls:
                    self._pending.clear()
                    continue
            self.poll()


#: The process's :class:`CancelWatcher`.
cancel_watcher = CancelWatcher()


def terminal_event(job: CompletionJob) -> dict[str, Any]:
    """The last event for a finished job: ``done`` with its public result, or ``error``."""
    if job.status == JobStatus.SUCCEEDED:
        return {"type": "done", "id": str(job.id), "status": job.status, "result": job.result}
    return {"type": "error", "id": str(job.id), "status": job.status, "error": job.error or "failed"}


class RedisEventLog:
    """Appends one job's events to its Redis Stream (``XADD``), expiring the key after the TTL."""

    def __init__(self, job_id: str) -> None:
        self.key = stream_key(job_id)
        self.client = redis_client()
        self._expiry_set = False

    def publish(self, event: dict[str, Any]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(self.key, {"e": json.dumps(event, separators=(",", ":"))}, maxlen=100_000, approximate=True)
        if not self._expiry_set:
            pipe.expire(self.key, settings.COMPLETION_STREAM_TTL_S)
            self._expiry_set = True
        pipe.execute()


def publish_failure(*, job_id: str, message: str) -> None:
    """Tell a streamed job's listeners it failed (failure hook, reaper)."""
    try:
        RedisEventLog(job_id).publish({"type": "error", "id": job_id, "status": "failed", "error": message})
    except Exception:  # the job row already says failed; listeners also re-check it while idle
        log.exception("could not publish the failure of job %s", job_id)


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
