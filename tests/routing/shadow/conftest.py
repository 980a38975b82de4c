"""Fixtures shared by the shadow tests' modules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from muse_experiments.celery import app
from tests.factories import seed_catalogue


@pytest.fixture
def catalogue(upstreams, redis_store):
    """The model catalogue at the simulated upstreams (the shadow counters of earlier tests are
    gone: tests/conftest.py)."""
    return seed_catalogue(upstreams.url)


@contextlib.contextmanager
def celery_eager(eager: bool) -> Iterator[None]:
    """Celery's ``task_always_eager`` set to ``eager`` inside the block, restored after it."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = eager
    try:
        yield
    finally:
        app.conf.task_always_eager = before
