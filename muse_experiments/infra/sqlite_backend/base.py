"""Django's SQLite engine with one queue for writers: the embedded default's database engine.

SQLite lets one connection write at a time. A writer that finds the write lock taken waits in
SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms between looks
(``sqliteDefaultBusyCallback`` in ``sqlite3.c``) however soon the lock is freed. Under the
embedded default's load (two web processes inserting jobs, a worker claiming them and writing
their records) most of a call's time went to those sleeps (``bench/bench_stages.py --embedded``;
figures in bench/README.md).

Here writers queue instead. Before a connection begins a transaction (every
``transaction.atomic`` block: ``BEGIN IMMEDIATE``, which takes SQLite's write lock at once) or
runs anything but a ``SELECT`` in autocommit mode, it takes

1. this process's lock for the database file (a waiting thread wakes the moment it is released),
2. then an exclusive ``flock`` on ``<database>.writer`` shared with the other processes (looked at
   every 0.2 ms, backing off to 2 ms, while another process holds it),

and lets go of both when the transaction (or the statement) ends: commit, rollback or close. So
SQLite's own lock is free whenever it is asked for, and its busy handler only runs for programs
that do not queue (the ``sqlite3`` shell, a backup). The ``timeout`` option still bounds a wait:
past it the write fails with ``OperationalError: database is locked``, as SQLite's would. Reads
never queue (WAL readers do not block). In-memory databases (one connection's own) are left alone.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time

from django.db.backends.sqlite3 import base

#: Cross-process waits: first and longest pause between two looks at the ``flock`` (s).
FLOCK_POLL_FIRST_S = 0.0002
FLOCK_POLL_MAX_S = 0.002


class WriterQueue:
    """The writers of one database file in this process: a thread lock, then a ``flock`` shared
    with other processes on ``<database>.writer``. One per file and process (:func:`writer_queue`)."""

    def __init__(self, database: str) -> None:
        self.path = f"{database}.writer"
        self._threads = threading.Lock()
        self._fd: int | None = None

    def acquire(self, timeout_s: float) -> None:
        """Wait until this thread may write (at most ``timeout_s``); raises
        ``sqlite3.OperationalError('database is locked')`` past it (Django reports it as
        ``django.db.OperationalError``)."""
        deadline = time.monotonic() + timeout_s
        if not self._threads.acquire(timeout=max(timeout_s, 0.0)):
            raise sqlite3.OperationalError("database is locked")
        try:
            self._flock(deadline)
        except BaseException:
            self._threads.release()
            raise

    def release(self) -> None:
        """Let the next writer in (this process's waiting threads and other processes)."""
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _flock(self, deadline: float) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        pause = FLOCK_POLL_FIRST_S
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise sqlite3.OperationalError("database is locked") from None
                time.sleep(pause)
                pause = min(pause * 2, FLOCK_POLL_MAX_S)


_queues: dict[str, WriterQueue] = {}
_queues_lock = threading.Lock()


def writer_queue(database: str) -> WriterQueue:
    """This process's :class:`WriterQueue` for the database file ``database``."""
    with _queues_lock:
        queue = _queues.get(database)
        if queue is None:
            queue = _queues[database] = WriterQueue(database)
        return queue


def _forget_after_fork() -> None:
    # a forked child must not share its parent's flock (one open file description) nor inherit a
    # thread lock some parent thread held at the fork
    global _queues_lock
    _queues.clear()
    _queues_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class QueuedWriteCursor(base.SQLiteCursorWrapper):
    """Django's SQLite cursor; a statement that may write, run in autocommit mode, queues first."""

    db: DatabaseWrapper

    def execute(self, query, params=None):
        return self._queued(super().execute, query, params)

    def executemany(self, query, param_list):
        return self._queued(super().executemany, query, param_list)

    def _queued(self, run, query, params):
        queue = self.db.queue_for(query)
        if queue is None:
            return run(query, params)
        queue.acquire(self.db.write_timeout_s)
        try:
            return run(query, params)
        finally:
            queue.release()


class DatabaseWrapper(base.DatabaseWrapper):
    """See the module docstring. ``OPTIONS['timeout']`` (s, default 5 as in :mod:`sqlite3`)
    bounds a writer's wait in the queue as it bounds SQLite's own."""

    _queue: WriterQueue | None = None
    _writing = False
    #: Seconds a writer may wait in the queue: ``OPTIONS['timeout']``, read once per connection.
    write_timeout_s = 5.0

    def get_new_connection(self, conn_params):
        conn = super().get_new_connection(conn_params)
        self.write_timeout_s = float(conn_params.get("timeout", 5))
        self._queue = None if self.is_in_memory_db() else writer_queue(str(self.settings_dict["NAME"]))
        return conn

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=QueuedWriteCursor)
        cursor.db = self
        return cursor

    def queue_for(self, query: str) -> WriterQueue | None:
        """The queue a statement must wait in: None when it cannot write, when this connection
        already holds the queue (in a transaction), or for an in-memory database."""
        if self._queue is None or self._writing or not self.autocommit:
            return None
        return None if query.lstrip()[:6].upper() == "SELECT" else self._queue

    def _start_transaction_under_autocommit(self):
        if self._queue is None:
            return super()._start_transaction_under_autocommit()
        with self.wrap_database_errors:  # django.db.OperationalError, as from a statement
            self._queue.acquire(self.write_timeout_s)
        self._writing = True
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._let_go()
            raise

    def _let_go(self) -> None:
        if self._writing:
            self._writing = False
            self._queue.release()

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._let_go()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._let_go()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._let_go()
