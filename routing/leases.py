"""Job leases kept alive by the worker that holds them.

A worker that claims a job (``routing.services.completion_job_claim``) holds a lease of
``settings.COMPLETION_LEASE_S`` seconds. While the job runs, one daemon thread per process renews
the leases of every job the process holds, every third of the lease. If the worker dies
(SIGKILL, OOM, machine lost), renewals stop, the lease lapses within ``COMPLETION_LEASE_S``, and
the job is failed ``worker_lost`` by the next redelivery of its task or by the periodic reaper
(``maintenance.reap_expired_completion_jobs``). A live worker's job is never reaped, however long
its upstream call takes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import close_old_connections

from .services import completion_jobs_reap_expired, completion_jobs_renew_leases, worker_identity

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews the leases of the jobs this process holds (one daemon thread, started lazily)."""

    def __init__(self) -> None:
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._reap = False

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

    def start(self, *, reap: bool = False) -> None:
        """Start the thread now; with ``reap`` it also fails expired jobs every
        ``COMPLETION_REAP_INTERVAL_S`` (so a worker alone keeps "running" jobs from piling up,
        with or without ``celery beat``)."""
        with self._lock:
            self._reap = self._reap or reap
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="muse-lease-keeper", daemon=True)
            self._thread.start()

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def _run(self) -> None:
        interval = max(0.2, settings.COMPLETION_LEASE_S / 3)
        reap_every = settings.COMPLETION_REAP_INTERVAL_S
        next_reap = time.monotonic() + reap_every
        while not self._wake.wait(interval):
            try:
                if ids := self.held():
                    completion_jobs_renew_leases(job_ids=ids, worker=self.worker)
                if self._reap and time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + reap_every
                    if n := completion_jobs_reap_expired():
                        log.warning("failed %d completion job(s) whose worker was lost", n)
            except Exception:  # the keeper must outlive a database hiccup; the next tick retries
                log.exception("renewing job leases failed")
                close_old_connections()


keeper = LeaseKeeper()
