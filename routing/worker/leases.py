"""Worker liveness and job leases, kept alive by the worker that holds them.

In each worker process (:class:`LeaseKeeper`), one daemon thread sets the process's heartbeat
(:func:`routing.state.claims.beat`, a Redis key with a TTL of ``WORKER_HEARTBEAT_TTL_S``) every fifth
of that TTL and does nothing else; another renews the leases of every job the process holds
(``COMPLETION_LEASE_S``, taken by ``routing.jobs.completion_job_claim``) every third of the
lease, and reaps. If the worker dies
(SIGKILL, OOM, machine lost), its heartbeat expires within ``WORKER_HEARTBEAT_TTL_S``; the next
worker to beat (having beaten steadily itself for a TTL, so that a Redis outage is not taken
for deaths) learns it and reaps at once (``reap``: :func:`routing.worker.tasks.reap_lost`): the
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

from routing.jobs import completion_jobs_renew_leases, worker_identity
from routing.state import claims

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Beats this process's heartbeat (one daemon thread doing nothing else, so that slow work
    never makes a live worker look dead) and renews the leases of the jobs it holds and reaps
    (another daemon thread); both started lazily."""

    def __init__(self) -> None:
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._reap_now = threading.Event()
        self._thread: threading.Thread | None = None
        self._beater: threading.Thread | None = None
        self._reap: Callable[[bool], int] | None = None
        self._dead: list[str] = []  # found by the heartbeat, reaped by the other thread
        self._dead_lock = threading.Lock()
        self._steady_since: float | None = None

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
        """Start the threads now; with ``reap`` the second also calls ``reap(death)`` as soon as a
        worker's heartbeat expired (``death`` True) and every ``COMPLETION_REAP_INTERVAL_S`` (so a
        worker alone keeps "running" jobs from piling up, with or without ``celery beat``)."""
        with self._lock:
            self._reap = reap or self._reap
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._beater is None or not self._beater.is_alive():
            self._steady_since = None  # a fork: this process has not beaten yet
            self._beat()  # before this process claims anything: its claims must not look orphaned
            self._beater = threading.Thread(target=self._beat_forever, name="muse-heartbeat", daemon=True)
            self._beater.start()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="muse-lease-keeper", daemon=True)
            self._thread.start()

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def steady(self) -> bool:
        """Whether this process has beaten without a failure for a whole ``WORKER_HEARTBEAT_TTL_S``:
        only then may it take another worker's missing heartbeat for a death rather than for a
        Redis outage that worker could not beat through."""
        since = self._steady_since
        return since is not None and time.monotonic() - since >= settings.WORKER_HEARTBEAT_TTL_S

    def _beat(self) -> None:
        """Set this process's heartbeat; workers found dead (:func:`routing.state.claims.beat`) are
        handed to the reaping thread."""
        try:
            dead = claims.beat(self.worker, find_dead=self._reap is not None and self.steady())
        except Exception as exc:  # noqa: BLE001 - Redis down: the leases decide meanwhile
            self._steady_since = None
            log.warning("worker heartbeat failed (%s)", type(exc).__name__)
            return
        if self._steady_since is None:
            self._steady_since = time.monotonic()
        if dead:
            with self._dead_lock:
                self._dead += dead
            self._reap_now.set()

    def _beat_forever(self) -> None:
        tick = max(0.2, settings.WORKER_HEARTBEAT_TTL_S / 5)
        while not self._wake.wait(tick):
            self._beat()

    def _run(self) -> None:
        renew_every = max(0.2, settings.COMPLETION_LEASE_S / 3)
        reap_every = settings.COMPLETION_REAP_INTERVAL_S
        next_renew = time.monotonic() + renew_every
        next_reap = time.monotonic() + reap_every
        while not self._wake.is_set():
            self._reap_now.wait(max(0.0, min(next_renew, next_reap) - time.monotonic()))
            self._reap_now.clear()
            with self._dead_lock:
                dead, self._dead = self._dead, []
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
                log.exception("renewing job leases or reaping failed")
                with self._dead_lock:
                    self._dead += dead
                close_old_connections()
                self._wake.wait(1.0)


keeper = LeaseKeeper()
