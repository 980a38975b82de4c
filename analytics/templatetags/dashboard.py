"""Template tags of the analyst pages: people-ready cells, forest-plot intervals, dates with zone."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.html import format_html

from analytics import formatting
from analytics.tables import Column, Table

register = template.Library()

_TEXT = {
    "int": formatting.integer,
    "num": formatting.number,
    "pct": formatting.percent,
    "lift": lambda v: formatting.percent(v, signed=True),
    "money": formatting.money,
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
def cell(row: dict, column: Column, table: Table, labels: dict | None = None):
    """One table cell as HTML: by the column's kind (a row may override it with ``<key>__kind``)."""
    value = row.get(column.key)
    kind = row.get(f"{column.key}__kind", column.kind)
    if kind == "status":
        return status_badge(value, row.get(f"{column.key}_why") or "")
    if kind == "model":
        if not value:
            return formatting.DASH
        label = row.get(f"{column.key}_label") or (labels or {}).get(value) or value
        return format_html('<span class="model" title="{}">{}</span>', value, label)
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
        return forest(value, table.axis)
    if kind in _TEXT:
        return _TEXT[kind](value)
    return formatting.DASH if value in (None, "") else value


def forest(point: dict | None, axis: tuple[float, float] | None, width: int = 220, height: int = 22):
    """An inline SVG: the interval as a bar, the estimate as a dot, 0 as a line, on ``axis``."""
    if not point or axis is None or point.get("low") is None or point.get("high") is None:
        return format_html(
            '<svg class="forest empty" width="{}" height="{}" role="img" aria-label="no interval"></svg>',
            width,
            height,
        )
    lo, hi = axis

    def x(v: float) -> float:
        return round(4 + (min(max(v, lo), hi) - lo) / (hi - lo) * (width - 8), 1)

    lift = point.get("lift")
    dot = format_html('<circle cx="{}" cy="11" r="4" class="est"/>', x(lift)) if lift is not None else ""
    label = f"{formatting.percent(lift, signed=True)} [{formatting.percent(point['low'], signed=True)}, {formatting.percent(point['high'], signed=True)}]"
    return format_html(
        '<svg class="forest tone-{}" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<title>{}</title><line x1="{}" x2="{}" y1="1" y2="21" class="zero"/>'
        '<rect x="{}" y="6" width="{}" height="10" rx="3" class="ci"/>{}</svg>',
        point.get("tone", "neutral"),
        width,
        height,
        width,
        height,
        label,
        label,
        x(0.0),
        x(0.0),
        x(point["low"]),
        max(x(point["high"]) - x(point["low"]), 1.5),
        dot,
    )


@register.simple_tag
def forest_axis(table: Table, width: int = 220):
    """Tick labels under the forest column: low, 0, high of the shared axis."""
    if table.axis is None:
        return ""
    lo, hi = table.axis
    zero = round(4 + (0.0 - lo) / (hi - lo) * (width - 8))
    return format_html(
        '<span class="axis" style="width:{}px"><span class="lo">{}</span><span class="zero" style="left:{}px">0</span>'
        '<span class="hi">{}</span></span>',
        width,
        formatting.percent(lo, signed=True),
        zero,
        formatting.percent(hi, signed=True),
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
