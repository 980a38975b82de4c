"""Pre-aggregation for the dashboards: raw call records and exposures → :class:`CallRollup` rows
(hours, and days of the reporting time zone), and each result snapshot → :class:`LiftPoint` rows.

Written by the analytics task (:func:`analytics.tasks.compute_results` and the schedule), read by
:mod:`analytics.dashboards`; no page ever scans raw call records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, Count, F, IntegerField, Max, Min, Q, Sum, Value, When
from django.db.models.functions import Coalesce, NullIf, TruncDate, TruncHour
from django.utils import timezone

from muse_experiments.experiments.models import Exposure
from routing.models import FALLBACK_REASONS, KILL_REASONS, CallRecord, JobStatus

from . import histograms
from .histograms import LogBins
from .models import CallRollup, LiftPoint, ResultSnapshot, RollupMark, RollupSpan

log = logging.getLogger(__name__)

KEY = ("bucket", "endpoint", "experiment_id", "phase", "variant_key")
#: Longest time a writer's transaction may hold a call record or exposure id before it commits;
#: a refresh rescans the ids from a mark taken this long before the previous refresh.
LATE_ROW_GRACE = timedelta(minutes=10)


def _bin_case(field: str, grid: LogBins) -> Case:
    """SQL ``CASE`` giving the bin of ``field`` on ``grid`` (portable: no log() in SQLite)."""
    whens = [When(**{f"{field}__lt": edge}, then=Value(i)) for i, edge in enumerate(grid.edges)]
    return Case(*whens, default=Value(grid.size - 1), output_field=IntegerField())


def day_start(day: date, zone: tzinfo) -> datetime:
    """The instant (UTC) at which ``day`` begins in ``zone``: its local midnight, DST included
    (a midnight a DST change skips is read with the offset before the change, so the instant still
    falls on ``day``)."""
    return datetime.combine(day, time.min, zone).astimezone(UTC)


def local_day(instant: datetime, zone: tzinfo) -> date:
    """The calendar day of ``instant`` in ``zone``."""
    return instant.astimezone(zone).date()


def _resume_point() -> datetime | None:
    """The newest stored hour (recomputed, as it may have been partial), or None for everything."""
    return CallRollup.objects.filter(span=RollupSpan.HOUR).aggregate(last=Max("bucket"))["last"]


def _late_rows_start() -> tuple[datetime | None, RollupMark | None]:
    """``(earliest hour of a row written since the scanned mark, that mark)``.

    The mark scanned from is the newest one taken at least :data:`LATE_ROW_GRACE` before the
    newest mark (the previous refresh's), else the oldest there is: a row whose id a refresh's mark
    covers but whose transaction had not committed yet (ids are allocated before commit, and out
    of order between processes) is still above the mark the next refresh scans from, as long as
    it commits within the grace. ``(None, None)`` before the first refresh with a mark (it rolls
    up from the newest stored hour, as before marks existed)."""
    newest = RollupMark.objects.order_by("-taken_at", "-pk").first()
    if newest is None:
        return None, None
    mark = (
        RollupMark.objects.filter(taken_at__lte=newest.taken_at - LATE_ROW_GRACE)
        .order_by("-taken_at", "-pk")
        .first()
        or RollupMark.objects.order_by("taken_at", "pk").first()
    )
    late_call = CallRecord.objects.filter(pk__gt=mark.call_record_id).aggregate(t=Min("created_at"))["t"]
    late_exposure = Exposure.objects.filter(pk__gt=mark.exposure_id).aggregate(t=Min("first_exposed_at"))["t"]
    times = [t for t in (late_call, late_exposure) if t is not None]
    return (min(times) if times else None), mark


def _new_mark(now: datetime) -> RollupMark:
    """A mark of the highest ids visible now (unsaved; saved with the refresh's rows)."""
    return RollupMark(
        taken_at=now,
        call_record_id=CallRecord.objects.aggregate(m=Max("pk"))["m"] or 0,
        exposure_id=Exposure.objects.aggregate(m=Max("pk"))["m"] or 0,
    )


def _first_record() -> datetime | None:
    first = CallRecord.objects.aggregate(t=Min("created_at"))["t"]
    first_exposure = Exposure.objects.aggregate(t=Min("first_exposed_at"))["t"]
    candidates = [t for t in (first, first_exposure) if t is not None]
    return min(candidates) if candidates else None


def call_rollup_refresh(*, since: datetime | None = None, rebuild: bool = False) -> int:
    """Recompute the rollup from ``since`` (default: the newest stored hour), or from the hour of
    the earliest row written late (see below) if that is earlier, to now.

    Per hour × endpoint × experiment phase × variant: calls, errors (failed calls), fallbacks
    (``routing.models.FALLBACK_REASONS``), killed (any of ``KILL_REASONS``), cost unknown
    (calls with an attempt that died with its worker, ``CallRecord.cost_unknown``), cost (USD),
    tokens (input + output: a call's output tokens already include its reasoning tokens, as both
    providers count them, see :class:`routing.providers.types.Usage`), histograms of latency (ms,
    succeeded calls), time to first token (ms, succeeded streamed calls), cost and tokens per call (:mod:`analytics.histograms`), and units first
    exposed; and per **day of the reporting zone** (``MUSE_REPORTING_TIME_ZONE``, i.e. Django's
    default time zone; DST included) the sums of that day's hour rows.

    Hour rows are UTC hours, cut at the reporting zone's midnight when the zone's offset is not a
    whole number of hours (e.g. Asia/Kolkata): each hour row then lies inside one local day, so a
    day row is exactly the sum of its hour rows. Every row records the zone its days were cut in;
    when that is not the current zone (the setting changed, or rows written before days followed
    it), or with ``rebuild``, everything is recomputed from the first call record or exposure, so
    a page never mixes days of two zones. The hours from ``since`` on are replaced in one
    transaction; a concurrent refresh that loses the race gives up (it returns 0) and the next run
    catches up. Returns the number of rollup rows written.

    **Late rows.** A call record drained, or an exposure recorded, after its hour was rolled up
    (``created_at`` / ``first_exposed_at`` are when the call started, not when the row was
    written) is found by id: every refresh stores a :class:`RollupMark` of the highest ids it
    could see when it started, in the transaction of its rows, and the next refreshes recompute
    from the hour of the earliest row above the mark they scan from (:func:`_late_rows_start`),
    so the late row's hour counts it. Idempotent (a second run recomputes the same hours from the
    same rows) and safe under many processes and restarts: the marks are in the database, a
    refresh that loses the race writes no mark, and marks older than the one scanned from are
    pruned. Not seen: an exposure whose stored time an out-of-order call moved *earlier* (an
    update, not a new id) until its hours are recomputed by a rebuild.
    """
    zone = timezone.get_default_timezone()
    zone_name = timezone.get_default_timezone_name()
    mark = _new_mark(timezone.now())  # before any read: rows above it are scanned next time
    rebuild = rebuild or CallRollup.objects.exclude(zone=zone_name).exists()
    late, scanned = (None, None) if rebuild else _late_rows_start()
    start = _first_record() if rebuild else (since or _resume_point() or _first_record())
    if late is not None and (start is None or late < start):
        start = late
    if start is None:
        with transaction.atomic():
            if rebuild:
                CallRollup.objects.all().delete()
            mark.save()
        return 0
    start = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)

    calls = CallRecord.objects.filter(created_at__gte=start).annotate(
        hour=TruncHour("created_at", tzinfo=UTC),
        day=TruncDate("created_at", tzinfo=zone),
        endpoint=Coalesce(NullIf("served_endpoint", Value("")), "assigned_endpoint"),
        exp=Coalesce("experiment_id", Value(0)),
        ph=Coalesce("phase", Value(0)),
        tok=F("input_tokens") + F("output_tokens"),
    )
    group = ("hour", "day", "endpoint", "exp", "ph", "variant_key")
    rows: dict[tuple, dict[str, Any]] = {}

    def row(key: Sequence[Any]) -> dict[str, Any]:
        hour, day, *rest = key
        k = (max(hour, day_start(day, zone)), *rest)  # the part of the UTC hour inside the local day
        if k not in rows:
            rows[k] = {
                "latency_hist": [0] * histograms.LATENCY_MS.size,
                "ttft_hist": [0] * histograms.LATENCY_MS.size,
                "cost_hist": [0] * histograms.COST_USD.size,
                "tokens_hist": [0] * histograms.TOKENS.size,
            }
        return rows[k]

    def one_if(q: Q) -> Sum:
        return Sum(Case(When(q, then=Value(1)), default=Value(0), output_field=IntegerField()))

    totals = calls.values(*group).annotate(
        n=Count("id"),
        err=one_if(Q(status=JobStatus.FAILED)),
        fb=one_if(Q(reason__in=FALLBACK_REASONS)),
        kill=one_if(Q(reason__in=KILL_REASONS)),
        unknown=one_if(Q(cost_unknown=True)),
        cost=Sum("cost_usd"),
        tokens=Sum("tok"),
    )
    for t in totals:
        row(t[g] for g in group).update(
            calls=t["n"],
            errors=t["err"],
            fallbacks=t["fb"],
            killed=t["kill"],
            cost_unknown=t["unknown"],
            cost_usd=float(t["cost"] or 0),
            tokens=int(t["tokens"] or 0),
        )
    for field, hist, grid, base in (
        ("latency_ms", "latency_hist", histograms.LATENCY_MS, calls.filter(latency_ms__isnull=False)),
        ("ttft_ms", "ttft_hist", histograms.LATENCY_MS, calls.filter(ttft_ms__isnull=False)),
        ("cost_usd", "cost_hist", histograms.COST_USD, calls),
        ("tok", "tokens_hist", histograms.TOKENS, calls),
    ):
        for t in base.annotate(bin=_bin_case(field, grid)).values(*group, "bin").annotate(n=Count("id")):
            row(t[g] for g in group)[hist][t["bin"]] += t["n"]

    exposures = (
        Exposure.objects.filter(first_exposed_at__gte=start)
        .annotate(
            hour=TruncHour("first_exposed_at", tzinfo=UTC), day=TruncDate("first_exposed_at", tzinfo=zone)
        )
        .values("hour", "day", "experiment_id", "phase", "variant_key")
        .annotate(n=Count("id"))
    )
    for t in exposures:
        row((t["hour"], t["day"], "", t["experiment_id"], t["phase"], t["variant_key"]))["exposures"] = t["n"]

    objects = [CallRollup(**dict(zip(KEY, k, strict=True)), zone=zone_name, **v) for k, v in rows.items()]
    first_day = day_start(local_day(start, zone), zone)
    try:
        with transaction.atomic():
            if rebuild:
                CallRollup.objects.all().delete()
            else:
                CallRollup.objects.filter(span=RollupSpan.HOUR, bucket__gte=start).delete()
            CallRollup.objects.bulk_create(objects, batch_size=2000)
            days = _day_rows(since=first_day, zone=zone, zone_name=zone_name)
            CallRollup.objects.filter(span=RollupSpan.DAY, bucket__gte=first_day).delete()
            CallRollup.objects.bulk_create(days, batch_size=2000)
            mark.save()
            if scanned is not None:
                RollupMark.objects.filter(taken_at__lt=scanned.taken_at).delete()
    except IntegrityError:
        log.info("call rollup: a concurrent refresh won the race for hours from %s", start)
        return 0
    return len(objects) + len(days)


SUMMED = ("calls", "errors", "fallbacks", "killed", "cost_unknown", "exposures", "cost_usd", "tokens")
HISTOGRAM_FIELDS = ("latency_hist", "ttft_hist", "cost_hist", "tokens_hist")


def _day_rows(*, since: datetime, zone: tzinfo, zone_name: str) -> list[CallRollup]:
    """Day rows (``bucket`` = the day's start in ``zone``) summed from the hour rows from ``since``
    (a local midnight) on."""
    days: dict[tuple, dict[str, Any]] = {}
    hours = CallRollup.objects.filter(span=RollupSpan.HOUR, bucket__gte=since).values(
        *KEY, *SUMMED, *HISTOGRAM_FIELDS
    )
    for h in hours:
        key = (day_start(local_day(h["bucket"], zone), zone), *(h[k] for k in KEY[1:]))
        day = days.get(key)
        if day is None:
            days[key] = {**{k: h[k] for k in SUMMED}, **{k: list(h[k]) for k in HISTOGRAM_FIELDS}}
            continue
        for k in SUMMED:
            day[k] += h[k]
        for k in HISTOGRAM_FIELDS:
            day[k] = histograms.merge([day[k], h[k]], max(len(day[k]), len(h[k])))
    return [
        CallRollup(span=RollupSpan.DAY, zone=zone_name, **dict(zip(KEY, k, strict=True)), **v)
        for k, v in days.items()
    ]


def lift_points_record(*, snapshot: ResultSnapshot) -> int:
    """Store the cumulative-lift points of one snapshot (both analyses; for a metric with a
    covariate, the CUPED-on series -- adjusted, or the unadjusted fallback when CUPED was not
    applied -- and the unadjusted one).

    Returns how many rows were written.
    """
    results = snapshot.results
    points: list[LiftPoint] = []
    analyses = {"itt": results, **(results.get("analyses") or {})}
    for analysis, body in analyses.items():
        for metric in body.get("metrics", []):
            for c in metric.get("comparisons", []):
                units = (c.get("control_n") or 0) + (c.get("treatment_n") or 0)
                common = {
                    "snapshot": snapshot,
                    "experiment_id": snapshot.experiment_id,
                    "phase": snapshot.phase,
                    "computed_at": snapshot.computed_at,
                    "analysis": analysis,
                    "metric": metric["name"],
                    "variant_key": c["variant"],
                    "units": units,
                }
                seq = (c.get("sequential") or {}).get("relative_ci") or (None, None)
                ci = c.get("relative_ci") or (None, None)
                # a metric with a covariate (its comparisons keep the unadjusted result apart): the
                # primary numbers are the series read with CUPED on, adjusted or (the covariate
                # failed the balance check) the unadjusted fallback
                unadjusted = c.get("unadjusted")
                covariate = unadjusted is not None
                points.append(
                    LiftPoint(
                        **common,
                        cuped=covariate,
                        relative_lift=c.get("relative_lift"),
                        ci_low=ci[0],
                        ci_high=ci[1],
                        sequential_low=seq[0],
                        sequential_high=seq[1],
                    )
                )
                if covariate:
                    uci = unadjusted.get("relative_ci") or (None, None)
                    points.append(
                        LiftPoint(
                            **common,
                            cuped=False,
                            relative_lift=unadjusted.get("relative_lift"),
                            ci_low=uci[0],
                            ci_high=uci[1],
                        )
                    )
    LiftPoint.objects.bulk_create(points)
    return len(points)
