"""A cluster-wide configuration version, so every process notices a change within ~1 s.

Writers call :func:`bump` inside the transaction that changes configuration (experiments, the model
catalogue, kill switches). Readers call :func:`current` at most every
``CONFIG_REFRESH_INTERVAL_S`` and rebuild their in-process snapshot when it moved. The version is a
Redis key (one GET per interval), and a row in the database that readers fall back to when Redis
is unreachable: row 1 of ``settings.CONFIG_VERSION_MODEL`` (``"app_label.ModelName"``, a model with
an integer field ``version``; the project names the experiments app's ``PlatformConfig``), named
in settings the way ``AUTH_USER_MODEL`` is, so this module imports no app.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.apps import apps
from django.conf import settings
from django.db import transaction
from django.db.models import F

from .redis_client import redis_client

log = logging.getLogger(__name__)
REDIS_KEY = "muse:config-version"
T = TypeVar("T")

_snapshots: list[VersionedSnapshot] = []


def _version_model():
    """The model whose row 1 holds the version in the database (``settings.CONFIG_VERSION_MODEL``)."""
    return apps.get_model(settings.CONFIG_VERSION_MODEL)


def bump() -> None:
    """Record that configuration changed. Call inside the writing transaction."""
    model = _version_model()
    model.objects.get_or_create(pk=1)
    model.objects.filter(pk=1).update(version=F("version") + 1)
    transaction.on_commit(_redis_incr)


def _redis_incr() -> None:
    try:
        redis_client().incr(REDIS_KEY)
    except Exception:  # noqa: BLE001 - readers fall back to the database version
        log.warning("could not publish config version to Redis; readers fall back to the database")


def current() -> str:
    """An opaque token that changes whenever configuration changes."""
    try:
        value = redis_client().get(REDIS_KEY)
        return f"r{int(value or 0)}"
    except Exception:  # noqa: BLE001 - Redis down: the database still knows
        log.warning("Redis unavailable for config version; reading the database")
    db_version = _version_model().objects.filter(pk=1).values_list("version", flat=True).first()
    return f"d{db_version or 0}"


class VersionedSnapshot(Generic[T]):
    """An in-process cache of a configuration snapshot, rebuilt when :func:`current` moves.

    ``get()`` costs no I/O between checks; a check is one Redis GET (or one indexed DB read).
    Thread-safe; a rebuild failure keeps serving the last good snapshot and re-raises only when
    there is none.
    """

    def __init__(self, build: Callable[[], T], interval_s: float | None = None) -> None:
        self._build = build
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._value: T | None = None
        self._version: str | None = None
        self._checked_at = 0.0
        _snapshots.append(self)

    def get(self) -> T:
        now = time.monotonic()
        interval = settings.CONFIG_REFRESH_INTERVAL_S if self._interval_s is None else self._interval_s
        if self._value is not None and now - self._checked_at < interval:
            return self._value
        with self._lock:
            if self._value is not None and time.monotonic() - self._checked_at < interval:
                return self._value
            version = current()
            if self._value is None or version != self._version:
                self._value = self._build()
                self._version = version
            self._checked_at = time.monotonic()
            return self._value

    def invalidate(self) -> None:
        with self._lock:
            self._value = None
            self._checked_at = 0.0


def invalidate_all() -> None:
    """Drop every in-process snapshot (tests, and after a restore of the database)."""
    for snapshot in _snapshots:
        snapshot.invalidate()
