"""Commit durability for writes a caller would see fail if they were lost.

:func:`relax_commit_durability` takes one WAL flush (fsync) off a request's path; what it buys
is measured by ``bench/bench_api_overhead.py`` (see ``bench/README.md``).
"""

from __future__ import annotations

from django.db import connection


def relax_commit_durability() -> None:
    """Let the current transaction's COMMIT return before its WAL reaches the disk (PostgreSQL
    ``SET LOCAL synchronous_commit TO OFF``; a no-op elsewhere or outside a transaction).

    The commit is visible to other sessions at once, as usual; the WAL writer flushes it within
    ``3 × wal_writer_delay`` (600 ms by default), so only a server crash in that window (not a
    restart) can lose it, never corrupt anything (PostgreSQL docs, "Asynchronous Commit"). Use it
    only for writes whose loss the caller would see as a failed request.
    """
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
