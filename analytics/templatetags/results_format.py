"""Formatting filters for the results dashboard (None-safe: missing values show as an em dash)."""

from django import template

register = template.Library()
DASH = "—"


def _missing(value) -> bool:
    """None, or the empty string the template engine gives for a missing lookup (``ci.0`` of None)."""
    return not isinstance(value, int | float) or isinstance(value, bool)


@register.filter
def pct(value):
    return DASH if _missing(value) else f"{value * 100:+.2f}%"


@register.filter
def share(value):
    return DASH if _missing(value) else f"{value * 100:.1f}%"


@register.filter
def num(value):
    return DASH if _missing(value) else f"{value:.4g}"


@register.filter
def pval(value):
    return DASH if _missing(value) else ("<0.0001" if value < 1e-4 else f"{value:.4f}")


@register.filter
def comparison_for(comparisons, variant_key):
    return next((c for c in comparisons if c.get("variant") == variant_key), None)


@register.filter
def sig_class(comparison, higher_is_better):
    p, lift, alpha = (
        comparison.get("p_value"),
        comparison.get("absolute_lift"),
        comparison.get("alpha") or 0.05,
    )
    if p is None or lift is None or p >= alpha:
        return ""
    return "sig-good" if (lift > 0) == bool(higher_is_better) else "sig-bad"


@register.filter
def ci_label(alpha):
    """``0.05`` → ``95%``."""
    return DASH if _missing(alpha) else f"{(1 - alpha) * 100:g}%"
