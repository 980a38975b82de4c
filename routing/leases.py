"""Worker liveness and job leases, kept alive by the worker that holds them.

One daemon thread per worker process (:class:`LeaseKeeper`) sets the process's heartbeat
(:func:`routing.claims.beat`, a Redis key with a TTL of ``WORKER_HEARTBEAT_TTL_S``) every fifth
of that TTL, and renews the leases of every job the process holds (``COMPLETION_LEASE_S``,
taken by ``routing.services.completion_job_claim``) every third of the lease. If the worker dies
(SIGKILL, OOM, machine lost), its heartbeat expires within ``WORKER_HEARTBEAT_TTL_S``; the next
worker to beat learns it and reaps at once (``reap``, :func:`routing.tasks.reap_lost_work`): the
dead worker's running jobs are failed ``worker_lost`` with their attempts recorded lost, and the
jobs published meanwhile are published again. The lease is the bound when heartbeats are
unreadable, and the periodic reaper (``maintenance.reap_expired_completion_jobs``, and each
keeper every ``COMPLETION_REAP_INTERVAL_S``) the safety net. A live worker's job is never
reaped, however long its upstream call takes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import close_old_connections

from . import claims
from .services import completion_jobs_renew_leases, worker_identity

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews the leases of the jobs this process holds (one daemon thread, started lazily)."""

    def __init__(self) -> None:
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._reap: Callable[[bool], int] | None = None
        self._dead: list[str] = []  # found by a beat outside the thread, reaped on its next tick

    @property
    def worker(self) -> str:
        """This process's identity (recomputed after a fork)."""
        return worker_identity()

    @contextmanager
    def hold(self, job_id: str) -> Iterator[str]:
        """Keep ``job_id``'s lease alive for the duration of the block. Yields the worker identity."""
        with self._lock:
            self._held[job_id] += 1
            self._ensure_thread()
        try:
            yield self.worker
        finally:
            with self._lock:
                self._held[job_id] -= 1
                if self._held[job_id] <= 0:
                    del self._held[job_id]

    def start(self, *, reap: Callable[[bool], int] | None = None) -> None:
        """Start the thread now; with ``reap`` it also calls ``reap(death)`` as soon as a worker's
        heartbeat expired (``death`` True) and every ``COMPLETION_REAP_INTERVAL_S`` (so a worker
        alone keeps "running" jobs from piling up, with or without ``celery beat``)."""
        with self._lock:
            self._reap = reap or self._reap
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            # before this process claims anything: its claims must not look orphaned
            self._dead += self._beat()
            self._thread = threading.Thread(target=self._run, name="muse-lease-keeper", daemon=True)
            self._thread.start()

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def _beat(self) -> list[str]:
        """Set this process's heartbeat; the workers found dead (:func:`routing.claims.beat`)."""
        try:
            return claims.beat(self.worker, find_dead=self._reap is not None)
        except Exception as exc:  # noqa: BLE001 - Redis down: the leases decide meanwhile
            log.warning("worker heartbeat failed (%s)", type(exc).__name__)
            return []

    def _run(self) -> None:
        tick = max(0.2, settings.WORKER_HEARTBEAT_TTL_S / 5)
        renew_every = max(tick, settings.COMPLETION_LEASE_S / 3)
        reap_every = settings.COMPLETION_REAP_INTERVAL_S
        next_renew = time.monotonic() + renew_every
        next_reap = time.monotonic() + reap_every
        while not self._wake.wait(tick):
            dead, self._dead = self._dead + self._beat(), []
            try:
                if time.monotonic() >= next_renew:
                    next_renew = time.monotonic() + renew_every
                    if ids := self.held():
                        completion_jobs_renew_leases(job_ids=ids, worker=self.worker)
                if self._reap is not None and (dead or time.monotonic() >= next_reap):
                    next_reap = time.monotonic() + reap_every
                    if dead:
                        log.warning("worker(s) %s stopped beating; reaping their jobs", ", ".join(dead))
                    if n := self._reap(bool(dead)):
                        log.warning("failed %d completion job(s) whose worker was lost", n)
            except Exception:  # the keeper must outlive a database hiccup; the next tick retries
                log.exception("renewing job leases failed")
                close_old_connections()


keeper = LeaseKeeper()
