"""Liveness and readiness probes: /readyz names each dependency and answers 503 when one is down."""

from __future__ import annotations

import pytest
from django.test import Client

from muse_experiments.celery import app as celery_app
from muse_experiments.infra import health

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_touching_dependencies():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ready_when_database_migrations_broker_and_cache_answer():
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "broker": "ok", "cache": "ok"},
    }


def test_readyz_is_503_naming_the_broker_when_the_broker_is_unreachable(redis_url, monkeypatch, settings):
    settings.READYZ_TIMEOUT_S = 0.5
    # nothing listens on port 9 (discard): the connection is refused
    monkeypatch.setattr(celery_app.conf, "broker_url", "redis://127.0.0.1:9/0")
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert body["checks"]["broker"].startswith("error: ")
    assert body["checks"]["database"] == "ok"
    assert "127.0.0.1" not in response.content.decode()  # no addresses or credentials leak


def test_readyz_is_503_while_a_migration_is_unapplied(monkeypatch):
    class Pending:
        def __init__(self, connection):
            self.loader = type("L", (), {"graph": type("G", (), {"leaf_nodes": lambda self: []})()})()

        def migration_plan(self, targets):
            return [("routing", "9999_pending")]

    monkeypatch.setattr(health, "_migrations_applied", False)
    monkeypatch.setattr(health, "MigrationExecutor", Pending)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == "error: RuntimeError"
