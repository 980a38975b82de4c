"""Cutting off an upstream call whose caller went away, in the worker.

The web side sets a job's cancel flag (:func:`routing.web.relay.job_cancel_request`; the key is
:func:`routing.state.events.cancel_key`). A streamed call checks it between chunks
(:class:`CancelWatch`); a non-streamed call is registered with the process's
:data:`cancel_watcher`, whose thread reads the flags of every call in flight and cuts the flagged
ones off.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from muse_experiments.infra.redis_client import redis_client
from routing.models import CompletionJob
from routing.providers.transport import UpstreamCall, upstream_call
from routing.state.events import cancel_key

log = logging.getLogger(__name__)


class CancelWatch:
    """``watch()`` -> True once the job's caller asked to stop (:func:`routing.web.relay.job_cancel_request`).

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
    registered, one daemon thread reads the cancel flags (:func:`routing.state.events.cancel_key`) of all of them in one
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
        (no I/O; :func:`routing.pipeline.attempts.kill_for`) is asked on every poll too: once it returns a
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
