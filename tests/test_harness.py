"""The test harness's own duty: a PostgreSQL test database can be dropped at the session's end
although a daemon thread or a stopping subprocess still holds a session on it."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import end_other_sessions


def _session_in_a_thread(hold_s: float | None) -> tuple[threading.Thread, dict]:
    """A thread that opens its own connection to the test database, reports its backend pid, then
    holds it (``hold_s`` None: until told to query again) or closes it after ``hold_s``."""
    from django.db import connection

    state: dict = {"pid": None, "opened": threading.Event(), "again": threading.Event()}

    def run():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            state["pid"] = cursor.fetchone()[0]
        state["opened"].set()
        if hold_s is not None:
            threading.Event().wait(hold_s)
            connection.close()
            return
        state["again"].wait(10)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            state["after"] = "still connected"
        except Exception as error:  # noqa: BLE001 - what the ended session raises is the finding
            state["after"] = type(error).__name__
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert state["opened"].wait(10)
    return thread, state


@pytest.mark.django_db(transaction=True)
def test_a_session_held_past_the_wait_is_ended(postgres):
    thread, state = _session_in_a_thread(hold_s=None)
    ended = end_other_sessions(wait_s=0.3)
    state["again"].set()
    thread.join(10)
    assert state["pid"] in ended
    assert state["after"] == "OperationalError"


@pytest.mark.django_db(transaction=True)
def test_a_session_that_ends_within_the_wait_is_waited_for(postgres):
    thread, state = _session_in_a_thread(hold_s=0.3)
    ended = end_other_sessions(wait_s=5)
    thread.join(10)
    assert state["pid"] not in ended
