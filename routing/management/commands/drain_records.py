"""``manage.py drain_records``: the ``drainer`` process of the Procfile.

Writes the call records that workers buffered in Redis (:mod:`routing.worker.drainer`) to the
database, continuously, in batches, until SIGTERM or SIGINT. Run one or more per deployment (each
takes its own entries); workers started with ``RECORDS_DRAINER=false`` leave the draining to it.
"""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand

from muse_experiments.infra.runtime import tune_gc
from routing.worker.drainer import drain_forever


class Command(BaseCommand):
    help = "Drain the buffered call records (Redis) into the database until stopped."

    def handle(self, *args, **options):
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stderr.write("draining buffered call records until stopped")
        tune_gc()
        drain_forever(stop)
