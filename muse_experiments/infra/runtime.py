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
"""

from __future__ import annotations

import gc
import logging

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
