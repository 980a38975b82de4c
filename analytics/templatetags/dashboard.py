"""Template tags of the analyst pages: people-ready cells, forest-plot intervals, dates with zone."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from analytics import formatting
from analytics.tables import Column, Table

register = template.Library()

_TEXT = {
    "int": formatting.integer,
    "num": formatting.number,
    "pct": formatting.percent,
    "lift": lambda v: formatting.percent(v, signed=True),
    "money": formatting.money,
    "money_k": formatting.money_per_thousand,
    "ms": formatting.milliseconds,
    "p": formatting.p_value,
    "days": formatting.days,
}


@register.filter
def when(value):
    """A datetime in the reporting zone with the zone named: ``2026-12-01 09:30 CET``."""
    return formatting.when(value, timezone.get_current_timezone())


@register.filter
def words(code):
    """A status code in words (see :data:`analytics.formatting.STATUS_WORDS`)."""
    return formatting.status_words(code)


@register.filter
def status_badge(code, why: str = ""):
    """A status in words with its code (and why, when given) in a tooltip."""
    if not code:
        return formatting.DASH
    tip = f"code: {code}" + (f" — {why}" if why else "")
    return format_html(
        '<span class="status s-{}" title="{}">{}</span>', code, tip, formatting.status_words(code)
    )


@register.simple_tag
def model_name(public_id: str, labels: dict | None = None, label: str = ""):
    """A model by its version label (``label``, else ``labels[public_id]``, else the id), the
    public id on hover; a dash for none."""
    if not public_id:
        return formatting.DASH
    shown = label or (labels or {}).get(public_id) or public_id
    return format_html('<span class="model" title="{}">{}</span>', public_id, shown)


@register.simple_tag
def cell(row: dict, column: Column, table: Table, labels: dict | None = None):
    """One table cell as HTML: by the column's kind (a row may override it with ``<key>__kind``)."""
    value = row.get(column.key)
    kind = row.get(f"{column.key}__kind", column.kind)
    if kind == "status":
        return status_badge(value, row.get(f"{column.key}_why") or "")
    if kind == "model":
        return model_name(value, labels, row.get(f"{column.key}_label") or "")
    if kind == "code":
        return format_html('<span title="{}">{}</span>', value, row.get(f"{column.key}_label") or value)
    if kind == "when":
        return when(value)
    if kind == "link":
        note = row.get(f"{column.key}_note")
        if note:
            return format_html(
                '<a href="{}">{}</a><br><span class="muted small">{}</span>',
                row.get(f"{column.key}_href", ""),
                value,
                note,
            )
        return format_html('<a href="{}">{}</a>', row.get(f"{column.key}_href", ""), value)
    if kind == "forest":
        return forest(value)
    if kind in _TEXT:
        return _TEXT[kind](value)
    return formatting.DASH if value in (None, "") else value


#: Forest-plot cell geometry (px): drawing width, left/right margin, and where the tick labels go.
FOREST_W, FOREST_M, FOREST_H = 220, 6, 32
#: Closest a "0" tick may come to an end tick (px) before it is left out (the line stays).
TICK_GAP = 46


def forest(point: dict | None, width: int = FOREST_W):
    """One metric × treatment interval on its metric's scale (``point["axis"]``, see
    :func:`analytics.dashboards.metrics.forest_axis`): an inline SVG with the interval as a bar,
    the estimate as a dot, 0 as a dashed line, the scale's ends (and 0) as ticks, and a triangle
    at an end the interval runs past; under it the interval as text (``[−5.1 %, +11.5 %]``)."""
    axis = (point or {}).get("axis")
    if not point or axis is None or point.get("low") is None or point.get("high") is None:
        return format_html(
            '<svg class="forest empty" width="{}" height="{}" role="img" aria-label="no interval"></svg>',
            width,
            FOREST_H,
        )
    lo, hi = axis
    left, right = FOREST_M, width - FOREST_M

    def x(v: float) -> float:
        return round(left + (min(max(v, lo), hi) - lo) / (hi - lo) * (right - left), 1)

    def signed(v) -> str:
        return formatting.percent(v, signed=True)

    low, high, lift = point["low"], point["high"], point.get("lift")
    text = f"[{signed(low)}, {signed(high)}]"
    label = f"{signed(lift)} {text}"
    x0 = x(0.0)
    marks = []
    if lift is not None and lo <= lift <= hi:
        marks.append(format_html('<circle cx="{}" cy="9" r="4" class="est"/>', x(lift)))
    if low < lo:
        marks.append(format_html('<path d="M{} 9 l7 -6 v12 z" class="clip clip-low"/>', left - 5))
    if high > hi:
        marks.append(format_html('<path d="M{} 9 l-7 -6 v12 z" class="clip clip-high"/>', right + 5))
    ticks = [
        format_html('<text x="{}" y="29" text-anchor="start">{}</text>', 0, signed(lo)),
        format_html('<text x="{}" y="29" text-anchor="end">{}</text>', width, signed(hi)),
    ]
    if x0 - left >= TICK_GAP and right - x0 >= TICK_GAP:
        ticks.append(format_html('<text x="{}" y="29" text-anchor="middle">0</text>', x0))
    return format_html(
        '<svg class="forest tone-{}" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<title>{}</title><line x1="{}" x2="{}" y1="0" y2="18" class="zero"/>'
        '<line x1="{}" x2="{}" y1="18" y2="18" class="scale"/>'
        '<rect x="{}" y="4" width="{}" height="10" rx="3" class="ci"/>{}<g class="ticks">{}</g></svg>'
        '<span class="ci-text">{}</span>',
        point.get("tone", "neutral"),
        width,
        FOREST_H,
        width,
        FOREST_H,
        label,
        label,
        x0,
        x0,
        left,
        right,
        x(low),
        max(x(high) - x(low), 1.5),
        mark_safe("".join(marks)),
        mark_safe("".join(ticks)),
        text,
    )


@register.simple_tag(takes_context=True)
def query_with(context, **changes):
    """The current query string with ``changes`` applied (a value of None removes the key)."""
    query = context["request"].GET.copy()
    for k, v in changes.items():
        if v is None:
            query.pop(k, None)
        else:
            query[k] = v
    return query.urlencode()


@register.filter
def get_item(mapping, key):
    """``mapping[key]`` in a template (empty when missing)."""
    return (mapping or {}).get(key, "")


@register.filter
def pct(value):
    """A fraction as a percentage, 3 significant digits (``0.0323`` → ``3.23 %``)."""
    return formatting.percent(value)


@register.filter
def count(value):
    """A whole number with thousands separators."""
    return formatting.integer(value)
