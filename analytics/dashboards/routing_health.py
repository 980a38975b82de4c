"""The model catalogue and routing health page."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from muse_experiments.infra.natural_sort import natural_key
from routing.guards.circuit import breaker
from routing.guards.killswitch import kill_state
from routing.models import KillSwitch, ModelEndpoint

from .. import histograms
from ..models import CallRollup, RollupSpan
from ..tables import Column, Table
from .calls import rollup_by
from .common import endpoint_labels


def routing_health(*, now: datetime | None = None) -> dict[str, Any]:
    """Per endpoint over the last hour and day (rollup hours): calls, failure rate, p50/p95
    latency, p50/p95 time to first token (ms, succeeded streamed calls; None without one), cost
    (the page shows the hour's p95s only; the exports have its p50s too); with circuit and kill
    state; and calls per hour for the chart:
    ``{"labels": local "HH:MM", "hours": ISO starts (UTC), "series": {model label: [calls]}, "zone"}``
    over the 24 hours ending with the current one."""
    now = now or timezone.now()
    hour_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    day_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    base = CallRollup.objects.filter(span=RollupSpan.HOUR).exclude(endpoint="")
    windows = {
        "hour": rollup_by(base.filter(bucket__gte=hour_start), "endpoint", ("latency_hist", "ttft_hist")),
        "day": rollup_by(base.filter(bucket__gte=day_start), "endpoint", ("latency_hist", "ttft_hist")),
    }
    hourly: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for bucket, endpoint, calls in base.filter(bucket__gte=day_start, calls__gt=0).values_list(
        "bucket", "endpoint", "calls"
    ):
        hourly[endpoint][bucket.replace(minute=0)] += calls  # hours cut at a half-hour local midnight
    kills = kill_state()
    cb = breaker()
    grid = histograms.LATENCY_MS
    table_rows = []
    for e in ModelEndpoint.objects.select_related("provider").order_by("provider__key", "public_id"):
        entry: dict[str, Any] = {
            "endpoint": e.public_id,
            "endpoint_label": e.version_label or e.public_id,
            "provider": e.provider.key,
            "enabled": "yes" if e.enabled and e.provider.enabled else "no",
            "circuit": cb.state(e.public_id),
            "killed": "killed"
            if kills.endpoint_killed(
                public_id=e.public_id, provider_key=e.provider.key, is_external=e.provider.kind != "native"
            )
            else "live",
            "price_in": float(e.price_input_per_mtok),
            "price_out": float(e.price_output_per_mtok),
        }
        for name in ("hour", "day"):
            a = windows[name].get(e.public_id) or {"calls": 0, "errors": 0, "cost": 0.0}
            lat = a.get("latency_hist") or [0] * grid.size
            ttft = a.get("ttft_hist") or [0] * grid.size
            n = a["calls"]
            entry.update(
                {
                    f"calls_{name}": n,
                    f"error_rate_{name}": a["errors"] / n if n else None,
                    f"p50_{name}": grid.quantile(lat, 0.5),
                    f"p95_{name}": grid.quantile(lat, 0.95),
                    f"ttft_p50_{name}": grid.quantile(ttft, 0.5),
                    f"ttft_p95_{name}": grid.quantile(ttft, 0.95),
                    f"cost_{name}": a["cost"],
                }
            )
        entry["_class"] = "alert" if entry["circuit"] != "closed" or entry["killed"] == "killed" else ""
        table_rows.append(entry)
    zone = timezone.get_current_timezone()
    since_hour = hour_start.astimezone(zone).strftime("%H:%M %Z")
    since_day = day_start.astimezone(zone).strftime("%-d %b %H:%M %Z")
    cols = [
        Column("endpoint", "Model", "model"),
        Column("provider", "Provider"),
        Column("enabled", "Enabled"),
        Column("circuit", "Circuit", "status"),
        Column("killed", "Kill switch", "status"),
    ]
    # the short window shows the tail (p95) only; its medians are in the exports
    for name, group in (("hour", f"Since {since_hour}"), ("day", f"Last 24 hours (since {since_day})")):
        cols += [
            Column(f"calls_{name}", "Calls", "int", group=group),
            Column(f"error_rate_{name}", "Failed", "pct", group=group),
            *([Column(f"p50_{name}", "Latency p50", "ms", group=group)] if name == "day" else []),
            Column(f"p95_{name}", "Latency p95", "ms", group=group),
            *([Column(f"ttft_p50_{name}", "First token p50", "ms", group=group)] if name == "day" else []),
            Column(f"ttft_p95_{name}", "First token p95", "ms", group=group),
            Column(f"cost_{name}", "Cost", "money", group=group),
        ]
    cols += [
        Column("price_in", "Input $/M tokens", "money"),
        Column("price_out", "Output $/M tokens", "money"),
    ]
    # the 24 rollup hours of the day window: 23 whole ones and the current one (never a future hour)
    hours = [day_start + timedelta(hours=i) for i in range(24)]
    busiest = sorted(hourly, key=lambda k: -sum(hourly[k].values()))[:8]
    labels = endpoint_labels()
    chart = {
        "labels": [h.astimezone(zone).strftime("%H:%M") for h in hours],
        "hours": [h.isoformat() for h in hours],
        "series": {labels.get(k, k): [hourly[k].get(h, 0) for h in hours] for k in busiest},
        "zone": timezone.get_current_timezone_name(),
    }
    return {
        "table": Table(
            id="endpoints",
            title="Model catalogue and routing health",
            columns=cols,
            rows=sorted(table_rows, key=lambda r: (-r["calls_day"], natural_key(r["endpoint_label"]))),
            row_class="_class",
            export_extra=("p50_hour", "ttft_p50_hour"),
            note=f"Windows are whole rollup hours: 'since {since_hour}' is the current hour and the one "
            f"before it (60 to 120 minutes, read at {now.astimezone(zone).strftime('%H:%M %Z')}); "
            f"'since {since_day}' is the last 24 rollup hours. "
            "Latency and first-token percentiles from log-spaced histograms (about ±15 %); time to "
            "first token counts succeeded streamed calls only (— without one).",
        ),
        "chart": chart,
        "kills": list(KillSwitch.objects.filter(active=True).order_by("-updated_at")),
    }
