"""Fixtures for the experiments app: the seeded catalogue and a clean sticky-cache state."""

from __future__ import annotations

import pytest

from routing.catalogue import avocado_id
from tests.factories import seed_catalogue

V14, V15, V2 = avocado_id(14), avocado_id(15), avocado_id(2)


@pytest.fixture
def catalogue(db):
    """The seeded model catalogue, endpoints by public id."""
    return seed_catalogue()


@pytest.fixture(autouse=True)
def _sticky_backoff_reset():
    """A Redis failure simulated by one test must not switch the cache off for the next."""
    from muse_experiments.experiments import sticky

    sticky.reset_backoff()
    yield
    sticky.reset_backoff()
