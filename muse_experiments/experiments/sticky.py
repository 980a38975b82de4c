"""Redis read-through cache of sticky assignments, so routing normally makes no database query.

The durable record is :class:`~muse_experiments.experiments.models.Exposure` (one row per experiment, phase
and unit). This module keeps a copy per unit id in Redis:

* key ``muse:sticky:<namespace>:<unit id>`` -- a Redis hash with one field
  ``"<experiment id>:<phase>"`` -> variant key per exposure, plus the field ``"~"`` that marks
  the hash as *complete* (loaded from the database). A hash without ``"~"`` holds only fields
  written on exposure and is treated as a miss.
* reads (:func:`lookup`) HGETALL every unit id in one pipeline; a miss loads that unit's
  exposures from the database (:func:`load_from_db`) and writes them back with ``"~"``.
* writes (:func:`remember`) run after the exposure's transaction commits and HSET one field
  (idempotent; the value is the *stored* variant, so a lost race writes the winner).
* every write refreshes the key's TTL (:data:`TTL_S`, 7 days); an evicted or expired key is just
  a miss.
* ``<namespace>`` is ``PlatformConfig.sticky_namespace``: rotating it (e.g. after restoring the
  database) orphans every cached entry at once.

When Redis fails (connection refused, timeout), callers get ``None`` and
read the database; after a failure Redis is skipped for :data:`BACKOFF_S` seconds so a dead Redis
costs one timeout, not one per call.

Ordering argument for the "complete" marker: an exposure is committed to the database *before*
its field is written to Redis, and a loader HSETs (merges) rather than replaces, so whichever of
"loader writes" and "exposure writes its field" comes last, the hash ends up holding the field.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Mapping

from django.db import connection

from muse_experiments.infra.redis_client import redis_client

from .models import Exposure

log = logging.getLogger(__name__)

KEY_PREFIX = "muse:sticky"
COMPLETE = "~"
TTL_S = 7 * 24 * 3600
BACKOFF_S = 5.0

StickyMap = dict[tuple[int, int], str]

_down_until = 0.0
_down_lock = threading.Lock()


def _client():
    if time.monotonic() < _down_until:
        return None
    return redis_client()


def _mark_down(exc: Exception) -> None:
    global _down_until
    with _down_lock:
        _down_until = time.monotonic() + BACKOFF_S
    log.warning(
        "sticky cache: Redis unavailable (%s); reading exposures from the database", type(exc).__name__
    )


def reset_backoff() -> None:
    """Forget an earlier Redis failure (tests; after an operator fixed Redis)."""
    global _down_until
    _down_until = 0.0


def unit_key(namespace: str, unit_id: str) -> str:
    """The Redis key of one unit's sticky hash."""
    return f"{KEY_PREFIX}:{namespace}:{unit_id}"


def _field(experiment_id: int, phase: int) -> str:
    return f"{experiment_id}:{phase}"


def _parse(raw: Mapping[bytes, bytes]) -> StickyMap:
    out: StickyMap = {}
    for f, v in raw.items():
        name = f.decode()
        if name == COMPLETE:
            continue
        exp, _, phase = name.partition(":")
        out[(int(exp), int(phase))] = v.decode()
    return out


def load_from_db(unit_ids: Iterable[str]) -> dict[str, StickyMap]:
    """Every non-forced exposure of these units, ``{unit id: {(experiment id, phase): variant}}``
    (1 indexed query). QA-forced exposures never make a unit sticky.

    Raw SQL: it runs on the first call of every unit, before the upstream call, where the ORM's
    query building cost more than the query itself (bench/README.md, "Measured outside bench/")."""
    out: dict[str, StickyMap] = {u: {} for u in unit_ids}
    units = list(out)
    with connection.cursor() as cursor:
        cursor.execute(_load_sql() + ", ".join(["%s"] * len(units)) + ")", ["forced", *units])
        for unit, exp, phase, variant in cursor.fetchall():
            out[unit][(exp, phase)] = variant
    return out


@functools.cache
def _load_sql() -> str:
    """The start of :func:`load_from_db`'s query, up to its ``IN (`` (names quoted for the backend)."""
    q = connection.ops.quote_name
    f = {
        name: q(Exposure._meta.get_field(name).column)
        for name in ("unit_id", "experiment", "phase", "variant_key", "reason")
    }
    return (
        f"SELECT {f['unit_id']}, {f['experiment']}, {f['phase']}, {f['variant_key']} "
        f"FROM {q(Exposure._meta.db_table)} WHERE {f['reason']} <> %s AND {f['unit_id']} IN ("
    )


def lookup(namespace: str, unit_ids: Iterable[str]) -> dict[str, StickyMap] | None:
    """Sticky maps of these units from Redis, loading misses from the database.

    Returns ``{unit id: {(experiment id, phase): variant key}}``, or ``None`` when Redis is
    unavailable (the caller then queries the database itself). Costs one Redis
    round trip when every unit is cached; one more round trip and one indexed query otherwise.
    """
    client = _client()
    units = [u for u in dict.fromkeys(unit_ids) if u]
    if client is None or not namespace:
        return None
    if not units:
        return {}
    try:
        pipe = client.pipeline(transaction=False)
        for u in units:
            pipe.hgetall(unit_key(namespace, u))
        raw = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - any Redis failure means "use the database"
        _mark_down(exc)
        return None
    out: dict[str, StickyMap] = {}
    missing = []
    for u, h in zip(units, raw, strict=True):
        if h and COMPLETE.encode() in h:
            out[u] = _parse(h)
        else:
            missing.append(u)
    if missing:
        loaded = load_from_db(missing)
        out.update(loaded)
        _store(client, namespace, loaded)
    return out


def _store(client, namespace: str, maps: Mapping[str, StickyMap]) -> None:
    try:
        pipe = client.pipeline(transaction=True)
        for u, m in maps.items():
            key = unit_key(namespace, u)
            pipe.hset(key, mapping={COMPLETE: "1", **{_field(e, p): v for (e, p), v in m.items()}})
            pipe.expire(key, TTL_S)
        pipe.execute()
    except Exception as exc:  # noqa: BLE001
        _mark_down(exc)


def remember(namespace: str, *, unit_id: str, experiment_id: int, phase: int, variant_key: str) -> None:
    """Write one exposure to the cache (call after the exposure's transaction committed)."""
    client = _client()
    if client is None or not namespace or not unit_id:
        return
    try:
        key = unit_key(namespace, unit_id)
        pipe = client.pipeline(transaction=True)
        pipe.hset(key, _field(experiment_id, phase), variant_key)
        pipe.expire(key, TTL_S)
        pipe.execute()
    except Exception as exc:  # noqa: BLE001
        _mark_down(exc)
