"""Write-behind of call records through Redis, the draining half: records reach the database.

The worker that served a call does ONE Redis transaction (``MULTI``,
:func:`routing.pipeline.recording.buffer_call`), so the caller's wait ends before the database
write:

1. ``XADD muse:records`` — the call's records (:func:`routing.pipeline.records.call_payload`);
2. ``SET muse:job:<id>:final`` + ``RPUSH muse:job:<id>:done`` — the job's final state, which wakes
   the web request waiting for it (:mod:`routing.state.handoff`);
3. the job's claim marked ``done`` (:mod:`routing.state.claims`): a redelivered task does nothing.

Both or neither: once a caller can see the answer, the records are in Redis. A drainer
(:func:`drain`; the Procfile's ``drainer`` process, :func:`drain_forever`, else a thread in each
worker started with ``RECORDS_DRAINER``) reads the stream through the consumer group
``drain`` (``XREADGROUP``), writes each batch in one transaction (:func:`routing.pipeline.records.records_write`)
and only then acknowledges and deletes the entries, and runs the listeners of recorded calls
(:mod:`routing.pipeline.recorded`: the shadow tests' offer). A drainer that dies mid-batch leaves its
entries pending; any drainer claims entries pending longer than :data:`STALE_MS`
(``XAUTOCLAIM``) and writes them again — the write is idempotent, so a replay changes nothing.
So a worker SIGKILLed after answering loses no record: the entries wait in Redis for the next
drainer.

Bound: a drainer blocks on the stream (``XREAD BLOCK``) and writes what it finds (up to
``RECORDS_DRAIN_BATCH``); after a batch that was not full it lingers ``RECORDS_DRAIN_LINGER_MS``
(default 200 ms, as Kafka producers' ``linger.ms``) so that the calls answered meanwhile make
the next batch.
A batch costs a fixed number of statements whatever its size, so at 1 client this writes several
calls per transaction instead of one and takes the drain's CPU off the calls' GIL time
(``bench/bench_stages.py --profile``; bench/README.md). Records reach
the database within linger + one batch write of the answer (a few hundred ms), and within 5 s
under load (``bench/bench_stages.py`` prints the lag of the last calls). If every worker is down, records wait in Redis (Redis persistence decides
their durability, as it does for queued tasks) and are written when a worker starts.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections

from muse_experiments.infra.redis_client import redis_client
from routing.pipeline.recorded import calls_recorded
from routing.pipeline.recording import STREAM
from routing.pipeline.records import records_write
from routing.state.claims import queue_forget_row

log = logging.getLogger(__name__)

GROUP = "drain"
#: Entries that could not be written even on their own (kept for inspection and replay).
DEAD_LETTERS = "muse:records:dead"
#: Errors that say the database is unreachable, not that an entry is bad: the batch stays pending.
DATABASE_DOWN = (OperationalError, InterfaceError)
#: Entries pending this long (ms) belong to a dead drainer and are claimed by another.
STALE_MS = 30_000


def _consumer() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _ensure_group(client) -> None:
    import redis

    try:
        client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def drain(*, batch: int | None = None, block_ms: int | None = None) -> int:
    """Write one batch of buffered call records to the database. Returns how many entries it took.

    Takes this drainer's own unacknowledged entries first (a batch that failed because the
    database was unreachable), then entries a dead drainer left pending for :data:`STALE_MS`, else
    new ones (waiting up to ``block_ms`` for the first to arrive; ``None`` = do not wait). Entries
    are acknowledged and deleted only after their batch committed; an entry that cannot be
    written even alone goes to :data:`DEAD_LETTERS`. Raises the database's error when it is
    unreachable (the entries stay pending). Safe to run in many processes at once.
    """
    batch = batch or settings.RECORDS_DRAIN_BATCH
    client = redis_client()
    _ensure_group(client)
    consumer = _consumer()
    # this drainer's own unacknowledged entries first (its last batch failed, e.g. database down)
    own = client.xreadgroup(GROUP, consumer, {STREAM: "0"}, count=batch)
    entries = [e for e in (own[0][1] if own else []) if e and e[1]]
    if not entries:
        # the reply is [next id, entries] on Redis 6.2 and [next id, entries, deleted ids] on 7
        claimed = client.xautoclaim(
            STREAM, GROUP, consumer, min_idle_time=STALE_MS, start_id="0", count=batch
        )
        entries = [e for e in claimed[1] if e and e[1]]
    if not entries:
        response = client.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=batch, block=block_ms)
        entries = response[0][1] if response else []
    if not entries:
        return 0
    payloads = [json.loads(fields[b"p"]) for _, fields in entries]
    written = payloads
    try:
        records_write(payloads)
    except DATABASE_DOWN:  # keep them pending: this drainer takes them again first
        raise
    except Exception:  # one bad payload must not block the others: write one by one
        log.exception("writing %d buffered call records failed; writing them one by one", len(payloads))
        written = _write_one_by_one(client, entries)
    ids = [entry_id for entry_id, _ in entries]
    pipe = client.pipeline(transaction=False)
    pipe.xack(STREAM, GROUP, *ids)
    pipe.xdel(STREAM, *ids)
    for payload in payloads:
        if payload.get("row"):  # written now: the claim need not keep it (routing.state.claims)
            queue_forget_row(pipe, payload["job"]["id"])
    pipe.execute()
    lag_s = time.time() - min(float(fields[b"t"]) for _, fields in entries)
    _stats.note(len(entries), lag_s)
    calls_recorded(written)  # e.g. the shadow tests' offer: off every caller's path
    return len(entries)


def _write_one_by_one(client, entries) -> list[dict]:
    """Write each entry on its own; one that still fails goes to :data:`DEAD_LETTERS` (logged),
    so it stays inspectable and replayable without blocking the buffer. Returns the payloads
    written."""
    written = []
    for entry_id, fields in entries:
        try:
            payload = json.loads(fields[b"p"])
            records_write([payload])
            written.append(payload)
        except DATABASE_DOWN:
            raise
        except Exception:
            log.exception("call record entry %s moved to %s", entry_id, DEAD_LETTERS)
            client.xadd(DEAD_LETTERS, {**fields, b"error_at": repr(time.time())})
    return written


def pending() -> int:
    """Entries buffered and not yet written (new or in a drainer's hands)."""
    return int(redis_client().xlen(STREAM))


class _Stats:
    """Running figures of this process's drains (for benchmarks and logs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries = 0
        self.batches = 0
        self.max_lag_s = 0.0

    def note(self, n: int, lag_s: float) -> None:
        with self.lock:
            self.entries += n
            self.batches += 1
            self.max_lag_s = max(self.max_lag_s, lag_s)


_stats = _Stats()


class Drainer:
    """A daemon thread that drains the buffer continuously, in a worker started with
    ``RECORDS_DRAINER`` (the Procfile's workers leave it to the ``drainer`` process)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="muse-records-drainer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        drain_forever()


def drain_forever(stop: threading.Event | None = None) -> None:
    """Drain the buffer continuously until ``stop`` is set: what a worker's drainer thread and the
    ``drainer`` process (``manage.py drain_records``, the Procfile's default) run. A database or
    Redis error is logged and retried after 1 s (the entries stay pending); never raises.

    Its own process is the production default because a batch write holds a worker's GIL for
    milliseconds, which raised the 1-client p99 (``bench/bench_proxy.py`` with ``RECORDS_DRAINER``
    true/false; bench/README.md).
    """
    stop = stop or threading.Event()
    linger_s = settings.RECORDS_DRAIN_LINGER_MS / 1000
    while not stop.is_set():
        try:
            if 0 < drain(block_ms=1000) < settings.RECORDS_DRAIN_BATCH and linger_s:
                # wait for the calls answered meanwhile: they join the next batch
                stop.wait(linger_s)
        except Exception:  # the drainer must outlive a database or Redis hiccup; entries stay pending
            log.exception("draining call records failed; retrying")
            close_old_connections()
            stop.wait(1.0)


drainer = Drainer()
