"""Where a shadow call's :class:`~muse_experiments.experiments.models.ShadowPair` is written.

With ``SHADOW_PAIR_FLUSH_S`` = 0 (the default) each pair is one INSERT as the call ends. Above 0
(the Procfile's shadow worker) pairs wait in this process and are written together by one
``bulk_create`` every ``SHADOW_PAIR_FLUSH_S`` seconds (a daemon thread, started on the first
pair), as soon as ``SHADOW_PAIR_BATCH`` wait, and when the worker shuts down
(:func:`flush_pairs`, Celery's ``worker_shutdown``): PostgreSQL, which runs the statements at
normal priority whatever the worker's own, does one INSERT per batch instead of one per pair
(``bench/bench_shadow.py`` prints its transactions per primary call). A pair is visible to the
results that much later, and pairs still waiting are lost with a worker killed outright, as its
running shadow calls are (the task is ``acks_late=False``). A pair whose job already has one is
skipped (``ignore_conflicts``: the unique constraint, after :mod:`.run`'s claim in Redis).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from muse_experiments.experiments.models import ShadowPair

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pending: list[ShadowPair] = []
_flusher: list[threading.Thread] = []


def pair_save(pair: ShadowPair) -> bool:
    """Write ``pair`` now, or queue it for the next batch (``SHADOW_PAIR_FLUSH_S`` > 0). False
    when written now and its job already had a pair (a duplicate); True otherwise."""
    if settings.SHADOW_PAIR_FLUSH_S <= 0:
        try:
            if connection.in_atomic_block:  # an eager run inside a caller's transaction: a savepoint
                with transaction.atomic():
                    pair.save()
            else:  # one INSERT in autocommit: no BEGIN/COMMIT round trips, nothing else to undo
                pair.save()
        except IntegrityError:
            return False
        return True
    with _lock:
        _pending.append(pair)
        full = len(_pending) >= settings.SHADOW_PAIR_BATCH
        if not _flusher or not _flusher[0].is_alive():
            _flusher[:] = [threading.Thread(target=_flush_forever, name="shadow-pairs", daemon=True)]
            _flusher[0].start()
    if full:
        flush_pairs()
    return True


def flush_pairs() -> int:
    """Write every waiting pair in one ``bulk_create``; returns how many were waiting. Never
    raises (a failed batch is logged and lost, like a shadow call lost with its worker)."""
    with _lock:
        batch = _pending[:]
        _pending.clear()
    if not batch:
        return 0
    try:
        ShadowPair.objects.bulk_create(batch, ignore_conflicts=True)
    except Exception:  # noqa: BLE001 - shadow results only; never the worker's end
        log.exception("could not write %d shadow pairs", len(batch))
    finally:
        if threading.current_thread().name == "shadow-pairs":
            connection.close()  # the flusher's connection goes back (to the pool) between batches
    return len(batch)


def _flush_forever() -> None:
    """The flusher thread's loop; it ends once it is no longer the registered flusher."""
    me = threading.current_thread()
    while True:
        time.sleep(max(settings.SHADOW_PAIR_FLUSH_S, 0.05))
        if not _flusher or _flusher[0] is not me:
            return
        flush_pairs()
