"""People-ready numbers (analytics/formatting.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from analytics.formatting import (
    days,
    guardrail_breach,
    integer,
    milliseconds,
    money,
    money_per_thousand,
    number,
    p_value,
    percent,
    status_words,
    when,
)


def test_numbers_read_like_a_report_never_scientific():
    assert money(7.723e-06) == "$0.00000772" and money(1234.5) == "$1,234.50" and money(0) == "$0.00"
    assert integer(1234567) == "1,234,567" and number(0.012345) == "0.0123" and number(12345.6) == "12,346"
    assert percent(0.0523, signed=True) == "+5.23 %" and percent(-0.4972, signed=True) == "−49.7 %"
    assert milliseconds(842.3) == "842 ms" and milliseconds(12345) == "12.3 s"
    assert p_value(0.0321) == "0.032" and p_value(1e-9) == "< 0.001"
    assert days(0.25) == "6 h" and days(12.34) == "12.3 days" and days(None) == "—"
    assert money(float("nan")) == "—" and percent(None) == "—"
    assert percent(8.2e-11) == "< 0.01 %" and percent(1 - 1e-12) == "100 %" and number(3e-9) == "< 0.0001"


def test_costs_per_call_read_per_1000_calls():
    assert money_per_thousand(7.723e-06) == "$0.00772" and money_per_thousand(0.0045) == "$4.50"
    assert money_per_thousand(None) == "—"


def test_a_guardrail_breach_is_worded_and_numbered_as_the_metric_table():
    for p, shown in ((0.0, "p < 0.001"), (6.5e-116, "p < 0.001"), (0.0123, "p = 0.012")):
        text = guardrail_breach(metric="Cost per unit (USD)", variant="cheap", p=p, lift=66.789)
        assert text == (
            "Cost per unit (USD) significantly worse for cheap under the sequential test "
            f"(always-valid {shown}, relative lift +6,679 %)"
        )
    assert (
        guardrail_breach(metric="Latency", variant="b", p=None, lift=None)
        == "Latency significantly worse for b"
    )


def test_statuses_are_words_and_unknown_codes_still_read():
    assert status_words("constant_identical") == "Same constant value in both arms"
    assert status_words("brand_new_status") == "Brand new status"


def test_dates_carry_their_zone():
    t = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    assert when(t, ZoneInfo("UTC")) == "2026-12-01 08:30 UTC"
    assert when(t, ZoneInfo("Europe/Berlin")) == "2026-12-01 09:30 CET"
