"""Process tuning applied once a long-running process (web, worker, drainer) has started.

Python's cyclic garbage collector runs a young-generation pass every 700 container allocations
(``gc.get_threshold()`` default ``(700, 10, 10)``), and a full pass walks every object alive,
including the hundreds of thousands that Django, the provider SDKs and pydantic leave behind at
import. A routed completion allocates tens of thousands of objects, so each call paid several
collections, and now and then a full one. :func:`tune_gc` moves what start-up left alive into the
permanent generation (``gc.freeze``, as Instagram does for its Django fleet: "Dismissing Python
Garbage Collection at Instagram", 2017) and collects young objects less often
(``GC_THRESHOLD``). What it buys: less web CPU per call and a lower p50
(``bench/bench_stages.py --concurrency 1``; figures in bench/README.md).

:func:`run_at_idle_priority` puts a process whose work may wait (the shadow tests' worker:
``WORKER_IDLE_PRIORITY``) under Linux's ``SCHED_IDLE`` policy, so it runs only on CPU the other
processes leave idle (``sched(7)``).
"""

from __future__ import annotations

import gc
import logging
import os

from django.conf import settings

log = logging.getLogger(__name__)


def tune_gc() -> None:
    """Collect once, freeze what is alive, then apply ``settings.GC_THRESHOLD``.

    ``GC_THRESHOLD``: ``(gen0, gen1, gen2)`` allocation thresholds (``gc.set_threshold``); empty
    leaves the interpreter's defaults and freezes nothing. Call after start-up, in the process
    that serves (after gunicorn's fork, from Celery's ``worker_ready``). Never raises.
    """
    thresholds = tuple(settings.GC_THRESHOLD)
    if not thresholds:
        return
    try:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*thresholds)
    except (TypeError, ValueError) as exc:
        log.warning("GC_THRESHOLD %r not applied: %s", thresholds, exc)


#: The nice value :func:`run_at_idle_priority` gives every thread (the lowest).
IDLE_NICE = 19


def run_at_idle_priority() -> bool:
    """Move every thread of this process to the ``SCHED_IDLE`` scheduling policy at nice 19;
    threads started later inherit both. Returns whether every thread was moved.

    Linux's ``SCHED_IDLE`` (``sched(7)``) gives a thread CPU only when no normal (``SCHED_OTHER``)
    thread wants it -- far below nice 19, which still takes about 1.5 % against a nice-0 thread
    (CFS weights 15 against 1024). Policy and nice are per thread on Linux, so each thread listed
    in ``/proc/self/task`` is set; call it early (Celery's ``worker_init``, before the pool's
    threads start). No privilege is needed to lower one's own priority. Where the platform has no
    ``SCHED_IDLE`` (not Linux) it only logs a warning and returns False. Never raises.
    """
    if not hasattr(os, "SCHED_IDLE") or not hasattr(os, "sched_setscheduler"):
        log.warning("SCHED_IDLE is not available on this platform: the process keeps its priority")
        return False
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]  # the calling thread only
    moved = True
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, IDLE_NICE)
        except OSError as exc:  # the thread ended meanwhile, or a policy forbids it
            moved = False
            log.warning("thread %d not moved to SCHED_IDLE: %s", tid, exc)
    return moved
