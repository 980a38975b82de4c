"""Dashboard tables: one definition renders as HTML and exports as CSV or JSON.

A view builds :class:`Table` objects from selectors; the template renders every cell through
:func:`analytics.templatetags.dashboard.cell` (people-ready text by column ``kind``) and
``?export=csv|json&table=<id>`` answers the same rows with raw values (fractions, USD, ms, codes,
ids, ISO 8601 times in UTC); in the CSV, text that a spreadsheet would read as a formula starts
with ``'`` (:mod:`muse_experiments.infra.csv_export`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, JsonResponse

from muse_experiments.infra.csv_export import csv_write

#: Column kinds (how a raw value is shown): text, int, num, pct (fraction), lift (signed
#: fraction), money (USD), ms, p, status (code → words), model (public id → version label),
#: days (a duration), when (datetime), link (text linking to ``row[<key>_href]``), forest (a
#: drawn interval on its own scale, ``{lift, low, high, tone, axis}``; not exported: its numbers
#: are exported on their own), money_k (USD per 1,000 of what the row counts), code (a code
#: shown as words, ``row[<key>_label]``, the code on hover; the export keeps the code).
KINDS = {
    "text",
    "int",
    "num",
    "pct",
    "lift",
    "money",
    "money_k",
    "ms",
    "p",
    "status",
    "model",
    "code",
    "days",
    "when",
    "link",
    "forest",
}
EXPORT_FORMATS = ("csv", "json")


@dataclass(frozen=True)
class Column:
    """One column: ``key`` in each row dict, a ``label`` for people, a ``kind`` (see :data:`KINDS`);
    ``group``: a header shared by the adjacent columns with the same group (e.g. a time window),
    drawn above their labels ("" for none)."""

    key: str
    label: str
    kind: str = "text"
    help: str = ""
    group: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column kind {self.kind!r}")


@dataclass
class Table:
    """Rows (dicts of raw values) under columns; ``id`` names it in export links.

    ``row_class`` optionally names a row key whose value becomes the row's CSS class.
    """

    id: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    row_class: str = ""
    #: Row keys exported besides the columns (ids behind labels, reasons...).
    export_extra: tuple[str, ...] = ()

    @property
    def header_groups(self) -> list[tuple[str, int]]:
        """``(group, columns spanned)`` runs of adjacent columns with the same group, left to
        right ("" over ungrouped columns); empty when no column has a group."""
        if not any(c.group for c in self.columns):
            return []
        runs: list[tuple[str, int]] = []
        for c in self.columns:
            if runs and runs[-1][0] == c.group:
                runs[-1] = (c.group, runs[-1][1] + 1)
            else:
                runs.append((c.group, 1))
        return runs

    @property
    def export_columns(self) -> list[Column]:
        return [c for c in self.columns if c.kind != "forest"]

    @property
    def export_keys(self) -> list[str]:
        """The exported keys in order: each column's (a model column followed by
        ``<key>_label``), then :attr:`export_extra`; the same whether or not there are rows."""
        keys: list[str] = []
        for c in self.export_columns:
            keys += [c.key, f"{c.key}_label"] if c.kind == "model" else [c.key]
        return keys + [k for k in self.export_extra if k not in keys]

    def export_rows(self) -> list[dict[str, Any]]:
        """Raw values keyed by column key; models also get ``<key>_label``."""
        out = []
        for row in self.rows:
            item: dict[str, Any] = {}
            for c in self.export_columns:
                value = row.get(c.key)
                if isinstance(value, datetime):
                    value = value.isoformat()
                item[c.key] = value
                if c.kind == "model":
                    item[f"{c.key}_label"] = row.get(f"{c.key}_label", "")
            for key in self.export_extra:
                item[key] = row.get(key)
            out.append(item)
        return out


def export_response(table: Table, fmt: str, filename: str) -> HttpResponse:
    """``table`` as a CSV (header row of column keys) or JSON (``{"table", "columns", "rows"}``)
    download. CSV text cells that a spreadsheet would evaluate as a formula are written with a
    leading ``'`` (:mod:`muse_experiments.infra.csv_export`); numbers stay numbers, and the JSON keeps
    the raw values. Raises ValueError on an unknown format."""
    rows = table.export_rows()
    if fmt == "json":
        payload = {
            "table": table.id,
            "title": table.title,
            "columns": [
                {"key": c.key, "label": f"{c.label} ({c.group})" if c.group else c.label, "kind": c.kind}
                for c in table.export_columns
            ],
            "rows": rows,
        }
        response: HttpResponse = JsonResponse(
            payload, encoder=DjangoJSONEncoder, json_dumps_params={"indent": 1}
        )
    elif fmt == "csv":
        buffer = io.StringIO()
        keys = table.export_keys  # one header, rows or none
        cells = (
            {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()} for row in rows
        )
        csv_write(buffer, fieldnames=keys, rows=cells)  # formula-like text is quoted (CSV injection)
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    else:
        raise ValueError(f"unknown export format {fmt!r}")
    response["Content-Disposition"] = f'attachment; filename="{filename}-{table.id}.{fmt}"'
    return response
