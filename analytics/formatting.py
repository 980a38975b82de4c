"""People-ready numbers and words for the dashboards (no Django import).

Every function takes a raw value (None allowed) and returns display text; a missing value is an em
dash. Exports (CSV/JSON) carry the raw values, never these strings.
"""

from __future__ import annotations

import math
from datetime import datetime, tzinfo

DASH = "—"

#: Status and verdict codes in words (the code itself goes in a tooltip). Unknown codes are shown
#: as their words (``some_code`` → "Some code"), so a new engine status never breaks a page.
STATUS_WORDS = {
    "ok": "OK",
    "better": "Better",
    "worse": "Worse",
    "inconclusive": "Not significant yet",
    "guardrail_no_harm": "Improved (guardrail: no harm)",
    "guardrail_ok": "No significant harm yet (guardrail)",
    "fixed": "Fixed horizon",
    "sequential": "Sequential (always valid)",
    "bayesian": "Bayesian",
    "insufficient_data": "Not enough data",
    "zero_variance": "Both arms constant, values differ",
    "constant_better": "Better (both arms constant: certain)",
    "constant_worse": "Worse (both arms constant: certain)",
    "constant_identical": "Same constant value in both arms",
    "ratio_denominator_zero": "Denominator is zero",
    "control_mean_zero": "Control mean is zero",
    "control_mean_near_zero": "Control mean too close to zero",
    "not_computed": "Not computed",
    "undefined_metric": "Metric not defined",
    "invalid_input": "Inconsistent input data",
    "degenerate": "Degenerate input",
    "mismatch": "Sample ratio mismatch",
    "srm": "Sample ratio mismatch",
    "units_in_zero_weight_arm": "Units in a 0 % arm",
    "no_units": "No units yet",
    "draft": "Draft",
    "running": "Running",
    "paused": "Paused",
    "stopped": "Stopped",
    "archived": "Archived",
    "closed": "Closed (healthy)",
    "open": "Open (calls refused)",
    "half_open": "Half-open (probing)",
    "live": "Live",
    "killed": "Killed",
    "detected": "Detected",
    "kill_switch_unavailable": "Detected; no kill switch service",
    "failed": "Failed",
    "itt": "Intent-to-treat",
    "served": "Served as assigned",
    # how an interval was built (analytics.stats.IntervalMethod, BayesianResult.model)
    "wald": "Wald",
    "delta": "Delta method",
    "newcombe": "Newcombe (Wilson)",
    "mover_r": "MOVER-R (Wilson)",
    "confidence_sequence": "Always-valid sequence",
    "confidence_sequence_agresti_caffo": "Always-valid sequence (Agresti–Caffo)",
    "gaussian": "Normal posterior",
    "beta_binomial": "Beta posteriors",
    # CUPED (analytics.stats.CupedStatus)
    "applied": "Applied",
    "covariate_imbalanced": "Covariate imbalanced between arms",
    "covariate_missing": "Covariate missing in one arm",
}


def status_words(code: str | None) -> str:
    """``constant_identical`` → "Same constant value in both arms"; None → em dash."""
    if not code:
        return DASH
    return STATUS_WORDS.get(code) or code.replace("_", " ").capitalize()


def _ok(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _sig(value: float, digits: int = 3) -> str:
    """``digits`` significant digits, thousands separators, never scientific notation."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    rounded = round(value, decimals)  # 99.97 → 100.0: count the digits of the rounded value
    if rounded != 0:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def integer(value) -> str:
    """1234567 → "1,234,567"."""
    return f"{round(value):,}" if _ok(value) else DASH


def number(value) -> str:
    """Three significant digits with separators: 1234.5 → "1,235", 0.012345 → "0.0123"."""
    if not _ok(value):
        return DASH
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if 0 < abs(value) < 1e-4:
        return "< 0.0001" if value > 0 else "> −0.0001"
    return _sig(value)


def percent(value, signed: bool = False) -> str:
    """A fraction as a percentage: 0.0523 → "5.23 %" (``signed``: "+5.23 %")."""
    if not _ok(value):
        return DASH
    if 0 < abs(value) < 1e-4:  # below 0.01 %: the digits would be noise
        return ("+" if signed else "") + "< 0.01 %" if value > 0 else "> −0.01 %"
    text = _sig(abs(value) * 100) + " %"
    if signed:
        return ("+" if value > 0 else "−" if value < 0 else "±") + text
    return ("−" if value < 0 else "") + text


def money(value) -> str:
    """US dollars: 1234.5 → "$1,234.50"; 0.000007723 → "$0.00000772" (3 significant digits)."""
    if not _ok(value):
        return DASH
    sign = "−" if value < 0 else ""
    v = abs(value)
    if v >= 0.01 or v == 0:
        return f"{sign}${v:,.2f}"
    if v < 1e-7:
        return f"{sign}< $0.0000001"
    return f"{sign}${_sig(v)}"


def money_per_thousand(value) -> str:
    """US dollars per one thing as dollars per 1,000 of them: 0.00000772 → "$0.00772";
    0.004 → "$4.00" (the column or row says "per 1,000 …")."""
    return money(value * 1000) if _ok(value) else DASH


def milliseconds(value) -> str:
    """842.3 → "842 ms"; 12345 → "12.3 s"."""
    if not _ok(value):
        return DASH
    return f"{_sig(value / 1000)} s" if value >= 1000 else f"{_sig(value)} ms"


def days(value) -> str:
    """A duration in days: 12.34 → "12.3 days"; 0.25 → "6 h"; below an hour → "< 1 h"."""
    if not _ok(value):
        return DASH
    if value < 1 / 24:
        return "< 1 h"
    if value < 1:
        return f"{round(value * 24)} h"
    return f"{_sig(value)} days" if value < 1000 else f"{value:,.0f} days"


def p_value(value) -> str:
    """0.0321 → "0.032"; below 0.001 → "< 0.001"."""
    if not _ok(value):
        return DASH
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def when(value: datetime | None, zone: tzinfo) -> str:
    """An aware datetime in the reporting zone, with the zone: "2026-12-01 09:30 CET"."""
    if value is None:
        return DASH
    local = value.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def guardrail_breach(
    *, metric: str, variant: str, p: float | None, lift: float | None, certain: bool = False
) -> str:
    """What a guardrail breach is, worded and numbered as the metric table words and numbers it:
    ``Latency (ms) significantly worse for cheap under the sequential test (always-valid
    p < 0.001, relative lift +6,719 %)``. ``metric``: the metric's label; ``certain``: both arms
    constant with different values (no test: the difference is certain)."""
    if certain:
        return f"{metric} worse for {variant} with certainty (both arms constant, standard error 0)"
    if p is None:
        return f"{metric} significantly worse for {variant}"
    p_text = p_value(p)
    numbers = f"always-valid p {p_text if p_text.startswith('<') else '= ' + p_text}"
    if lift is not None:
        numbers += f", relative lift {percent(lift, signed=True)}"
    return f"{metric} significantly worse for {variant} under the sequential test ({numbers})"
