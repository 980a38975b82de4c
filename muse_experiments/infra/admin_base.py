"""Admin building blocks shared by every app's admin (knows no app)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils.html import format_html


class ReadOnlyAdmin(admin.ModelAdmin):
    """A list/detail view of records written only by services: no add, no change, and no
    "History" link (there is none to show).

    ``can_delete_rows`` keeps deletion where an operator may need it (e.g. purging call logs) and
    turns it off for records that must stay (audit entries, phases).
    """

    can_delete_rows = True

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self.can_delete_rows and super().has_delete_permission(request, obj)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Nobody edits these rows, so there is no change history to link to.
        return super().change_view(
            request, object_id, form_url, {"show_history": False, **(extra_context or {})}
        )


def json_details(value: Any) -> str:
    """``value`` (JSON-able) as collapsed, pretty-printed JSON for a read-only admin field: a
    ``<details>`` whose summary names the top-level keys (or the item count) and whose body is
    the JSON indented by two spaces in a ``<pre class="json">``. Safe HTML (the JSON is escaped)."""
    if isinstance(value, dict):
        keys = list(value)
        shown = ", ".join(str(k) for k in keys[:8]) + (f", … ({len(keys)} keys)" if len(keys) > 8 else "")
        summary = f"{{{shown}}}" if keys else "{} (empty)"
    elif isinstance(value, list):
        summary = f"[{len(value)} item{'s' if len(value) != 1 else ''}]"
    else:
        summary = "value"
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    lines = text.count("\n") + 1
    return format_html(
        '<details class="json"><summary>{} <span class="quiet">({} lines)</span></summary>'
        '<pre class="json" style="max-height:40em;overflow:auto;white-space:pre-wrap">{}</pre></details>',
        summary,
        lines,
        text,
    )
