"""One ``UPDATE`` for many rows, each with its own values: the bulk writes' shared statement.

Django's ``bulk_update`` builds a ``CASE WHEN pk = … THEN …`` expression per row and field; for
the record writes' batches that cost more CPU than everything else they do, and one ``UPDATE``
per row costs a statement each. :func:`update_from_values` joins the table to the rows instead:

* PostgreSQL: ``UPDATE t AS x SET … FROM (VALUES (%s::type, …), …) AS v(name, …) WHERE …``;
* SQLite 3.33+ (``UPDATE … FROM``; Debian 12 ships 3.40): ``WITH v(name, …) AS (VALUES …)
  UPDATE t AS x SET … FROM v WHERE …``.

Other databases (and older SQLite) are not supported: :func:`supported` says so, and callers
fall back to one ``UPDATE`` per row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db import connection


def supported() -> bool:
    """Whether :func:`update_from_values` can run on the default database."""
    return connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 33)
    )


def update_from_values(
    table: str,
    *,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
    assign: str,
    where: str,
    where_params: Sequence[Any] = (),
) -> int:
    """``UPDATE table AS x SET <assign> FROM <rows as v> WHERE <where>``; returns the rows updated.

    ``columns``: ``(name, postgresql type)`` of each value of a row (the type casts the
    parameter on PostgreSQL; SQLite takes values as given). ``rows``: values already adapted to
    the database (e.g. ``Field.get_db_prep_value``). ``assign`` / ``where``: SQL over ``x`` (the
    table) and ``v`` (the rows), e.g. ``status = v.status`` and ``x.id = v.id``; ``where_params``
    fill the ``%s`` of ``where``. Raises what the database raised; :func:`supported` must hold.
    """
    if not rows:
        return 0
    names = ", ".join(name for name, _ in columns)
    quoted = connection.ops.quote_name(table)
    params = [value for row in rows for value in row]
    if connection.vendor == "postgresql":
        row = "(" + ", ".join(f"%s::{kind}" for _, kind in columns) + ")"
        sql = (
            f"UPDATE {quoted} AS x SET {assign} FROM (VALUES {', '.join([row] * len(rows))}) "
            f"AS v({names}) WHERE {where}"
        )
    else:
        row = "(" + ", ".join(["%s"] * len(columns)) + ")"
        sql = (
            f"WITH v({names}) AS (VALUES {', '.join([row] * len(rows))}) "
            f"UPDATE {quoted} AS x SET {assign} FROM v WHERE {where}"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *where_params])
        return cursor.rowcount
