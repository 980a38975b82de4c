"""Liveness and readiness probes for load balancers and orchestrators.

* ``GET /healthz`` — liveness: the process answers (no dependency is touched), always 200.
* ``GET /readyz`` — readiness: 200 only when the database answers ``SELECT 1``, every migration
  is applied, the Celery broker accepts a connection and the cache round-trips a value;
  otherwise 503. The body names each check (``ok`` or the error's class name, never a URL or a
  credential): ``{"status": "ready"|"not_ready", "checks": {"database": "ok", ...}}``. Each
  check is bounded by ``READYZ_TIMEOUT_S``.

Neither needs authentication; neither reveals configuration.
"""

from __future__ import annotations

import uuid

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

_migrations_applied = False  # once true it stays true for the life of the process


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}``."""
    return JsonResponse({"status": "ok"})


def check_database() -> None:
    """Raises when the default database does not answer ``SELECT 1``."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_migrations() -> None:
    """Raises ``RuntimeError`` while a migration is unapplied (cached once all are applied)."""
    global _migrations_applied
    if _migrations_applied:
        return
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        raise RuntimeError("unapplied migrations")
    _migrations_applied = True


def check_broker() -> None:
    """Raises when the Celery broker (the process's Celery app's) refuses a connection within
    ``READYZ_TIMEOUT_S``."""
    with current_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=settings.READYZ_TIMEOUT_S)


def check_cache() -> None:
    """Raises when the cache does not round-trip a value."""
    key, value = "muse:readyz", uuid.uuid4().hex
    cache.set(key, value, timeout=10)
    if cache.get(key) != value:
        raise RuntimeError("cache did not return the value it stored")


CHECKS = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
    "cache": check_cache,
}


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when every check passes, else 503; the body names each check's outcome."""
    results = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - a probe reports, it never raises
            results[name] = f"error: {type(exc).__name__}"
    ready = all(v == "ok" for v in results.values())
    return JsonResponse(
        {"status": "ready" if ready else "not_ready", "checks": results}, status=200 if ready else 503
    )
