"""The embedded default's SQLite engine: writers queue (threads, then processes), reads do not,
a wait is bounded by ``OPTIONS['timeout']``, and Celery's worker keeps a connection between tasks
when ``CONN_MAX_AGE`` says so."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest
from django.db import OperationalError
from django.db.utils import ConnectionHandler

from muse_experiments.infra.sqlite_backend.base import writer_queue


def _handler(path, timeout_s=5.0) -> ConnectionHandler:
    return ConnectionHandler(
        {
            "default": {
                "ENGINE": "muse_experiments.infra.sqlite_backend",
                "NAME": str(path),
                "OPTIONS": {
                    "init_command": "PRAGMA journal_mode=WAL;",
                    "transaction_mode": "IMMEDIATE",
                    "timeout": timeout_s,
                },
            }
        }
    )


@pytest.fixture(autouse=True)
def _unblocked(django_db_blocker):
    """These connections are the tests' own files, not the test database."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "queue.sqlite3"
    handler = _handler(path)
    with handler["default"].cursor() as cursor:
        cursor.execute("CREATE TABLE t (n INTEGER)")
    handler.close_all()
    return path


def _begin(conn) -> None:
    """What ``transaction.atomic`` does on entry, on a connection outside ``django.db.connections``."""
    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)


def _end(conn, *, commit: bool = True) -> None:
    conn.commit() if commit else conn.rollback()
    conn.set_autocommit(True)


def _other_process_holds(path):
    """A ``flock`` on the writer lock through another open file description: what another
    process holding the queue looks like to this one."""
    fd = os.open(f"{path}.writer", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_writer_waits_for_the_open_transaction_and_then_writes(db_path):
    handler = _handler(db_path)
    first = handler["default"]
    _begin(first)
    with first.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (1)")
    events: list[str] = []

    def second_writer():
        conn = handler["default"]  # this thread's own connection
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (2)")  # autocommit: queues
        events.append("second wrote")
        conn.close()

    thread = threading.Thread(target=second_writer)
    thread.start()
    time.sleep(0.3)
    assert events == []  # still queued behind the open transaction
    events.append("first commits")
    _end(first)
    thread.join(5)
    assert events == ["first commits", "second wrote"]
    with first.cursor() as cursor:
        cursor.execute("SELECT n FROM t ORDER BY n")
        assert [r[0] for r in cursor.fetchall()] == [1, 2]
    handler.close_all()


def test_a_wait_past_the_timeout_fails_as_database_is_locked(db_path):
    handler = _handler(db_path, timeout_s=0.3)
    conn = handler["default"]
    fd = _other_process_holds(db_path)
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError, match="database is locked"), conn.cursor() as cursor:
            cursor.execute("UPDATE t SET n = n + 1")
        assert 0.3 <= time.monotonic() - started < 2.0
        with pytest.raises(OperationalError, match="database is locked"):
            _begin(conn)
        assert conn.get_autocommit()  # nothing was left begun
        with conn.cursor() as cursor:  # reads never queue
            cursor.execute("SELECT count(*) FROM t")
            assert cursor.fetchone() == (0,)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    with conn.cursor() as cursor:  # the other process let go: the write goes through
        cursor.execute("INSERT INTO t VALUES (7)")
    handler.close_all()


@pytest.mark.parametrize("how", ["commit", "rollback", "close"])
def test_the_queue_is_released_when_the_transaction_ends(db_path, how):
    handler = _handler(db_path)
    conn = handler["default"]
    _begin(conn)
    with conn.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (1)")
    fd = os.open(f"{db_path}.writer", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):  # held for the whole transaction
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if how == "close":
            conn.close()
        else:
            _end(conn, commit=how == "commit")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    assert writer_queue(str(db_path))._threads.acquire(blocking=False)  # and in this process
    writer_queue(str(db_path))._threads.release()
    handler.close_all()


def test_only_statements_that_may_write_in_autocommit_queue(db_path):
    handler = _handler(db_path)
    conn = handler["default"]
    conn.ensure_connection()
    assert conn.queue_for("  select 1") is None
    assert conn.queue_for("INSERT INTO t VALUES (1)") is writer_queue(str(db_path))
    assert conn.queue_for("UPDATE t SET n = 1 RETURNING n") is writer_queue(str(db_path))
    _begin(conn)
    assert conn.queue_for("INSERT INTO t VALUES (1)") is None  # the transaction holds it already
    _end(conn, commit=False)
    handler.close_all()
    memory = ConnectionHandler(
        {"default": {"ENGINE": "muse_experiments.infra.sqlite_backend", "NAME": ":memory:"}}
    )
    memory["default"].ensure_connection()
    assert memory["default"].queue_for("INSERT INTO t VALUES (1)") is None
    memory.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("max_age", "kept"), [(600, True), (0, False)])
def test_the_worker_keeps_a_connection_between_tasks_as_conn_max_age_says(max_age, kept):
    """Celery's Django fixup closed every connection around every task; now Django's own rule
    (``close_old_connections``) decides, run from our task signal handlers."""
    from celery.fixups.django import DjangoWorkerFixup
    from django.db import connections

    import muse_experiments.celery as celery_app

    fixup = DjangoWorkerFixup(celery_app.app)

    class Task:
        class request:  # noqa: N801 - Celery's attribute name
            is_eager = False

    outcome = {}

    def one_thread():
        conn = connections["default"]  # a fresh connection of this thread
        conn.settings_dict = {**conn.settings_dict, "CONN_MAX_AGE": max_age}
        conn.ensure_connection()
        raw = conn.connection
        for _ in range(3):  # three tasks
            fixup.on_task_prerun(sender=Task)
            celery_app._task_started(task_id="t", task=Task)
            fixup.on_task_postrun(sender=Task)
            celery_app._task_finished()
        outcome["kept"] = conn.connection is raw
        conn.close()

    thread = threading.Thread(target=one_thread)
    thread.start()
    thread.join(10)
    assert outcome["kept"] is kept
