"""Natural ("human") order for names with version numbers: ``avocado-v2`` before ``avocado-v10``.

:func:`natural_key` is the pure sort key; :func:`natural_order` turns a ``{stored value: shown
name}`` mapping into a database ordering expression, so an admin list or a select sorted by a
column (a model's public id) follows the names people read (its version label) on any database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from django.db.models import Case, IntegerField, Value, When

_CHUNKS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that compares runs of digits as numbers and the rest case-insensitively:
    ``sorted(["v10", "v2", "v1"], key=natural_key) == ["v1", "v2", "v10"]``."""
    return tuple(
        (0, int(chunk)) if chunk.isdigit() else (1, chunk.casefold())
        for chunk in _CHUNKS.split(text or "")
        if chunk
    )


def natural_order(field: str, names: Mapping[str, str]) -> Case:
    """An integer expression ranking rows by the natural order of ``names[row.<field>]``
    (``names``: stored value → shown name, e.g. public id → version label); rows whose value is
    not in ``names`` rank last. Use it in ``annotate()`` and order by the annotation. The
    expression has one ``WHEN`` per entry, so it suits catalogue-sized mappings (hundreds)."""
    ranked = sorted(names, key=lambda value: (natural_key(names[value]), value))
    return Case(
        *(When(**{field: value}, then=Value(rank)) for rank, value in enumerate(ranked)),
        default=Value(len(ranked)),
        output_field=IntegerField(),
    )
