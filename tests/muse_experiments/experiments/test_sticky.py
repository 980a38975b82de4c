"""The Redis sticky cache on a real Redis: read-through, write-on-exposure, fallback when down."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from muse_experiments.experiments import selectors, sticky
from muse_experiments.experiments.models import Exposure, PlatformConfig
from muse_experiments.experiments.services.exposures import exposure_record, sticky_cache_reset
from muse_experiments.infra.config_version import invalidate_all
from tests.factories import make_experiment

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def record(experiment, unit_id, variant_key, phase=1, reason="assigned"):
    exposure_record(
        experiment_id=experiment.id, phase=phase, unit_id=unit_id, variant_key=variant_key, reason=reason
    )


@pytest.fixture
def experiment(catalogue, redis_url):
    exp = make_experiment(key="cache")
    invalidate_all()
    return exp


def cached_hash(unit_id: str) -> dict[str, str]:
    """The unit's raw Redis hash (fields as strings)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    namespace = PlatformConfig.objects.get(pk=1).sticky_namespace
    return {k.decode(): v.decode() for k, v in client.hgetall(sticky.unit_key(namespace, unit_id)).items()}


def test_a_cached_unit_is_answered_without_any_database_query(experiment, django_assert_num_queries):
    record(experiment, "s-1", "treatment")
    selectors.assignment_state()  # the configuration snapshot is cached like in a routing process
    with django_assert_num_queries(1):  # first look: a miss loads the unit from the database
        first = selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-1", user_id="u-1")
    with django_assert_num_queries(0):
        again = selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-1", user_id="u-1")
    assert first == again == {(experiment.id, 1): "treatment"}
    assert cached_hash("s-1") == {"~": "1", f"{experiment.id}:1": "treatment"}
    assert cached_hash("u-1") == {"~": "1"}  # "no exposure yet" is cached too


def test_an_exposure_is_written_to_the_cache_when_its_transaction_commits(
    experiment, django_capture_on_commit_callbacks, django_assert_num_queries
):
    selectors.sticky_variants(
        experiment_ids=[experiment.id], session_id="s-2", user_id=""
    )  # cache "nothing yet"
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        record(experiment, "s-2", "control")
        assert cached_hash("s-2") == {"~": "1"}  # not before the commit
    assert len(callbacks) == 1
    with django_assert_num_queries(0):
        assert selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-2", user_id="") == {
            (experiment.id, 1): "control"
        }


def test_the_first_recorded_variant_wins_in_the_cache_too(experiment, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        record(experiment, "s-3", "control")
    with django_capture_on_commit_callbacks(execute=True):
        record(experiment, "s-3", "treatment")  # a racing second decision: the stored one stays
    assert cached_hash("s-3") == {f"{experiment.id}:1": "control"}
    assert selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-3", user_id="") == {
        (experiment.id, 1): "control"
    }


def test_an_exposure_written_before_the_unit_was_loaded_does_not_hide_older_ones(
    experiment, django_capture_on_commit_callbacks
):
    other = make_experiment(key="other-layerless", start=True)
    invalidate_all()
    Exposure.objects.create(experiment=other, phase=1, unit_id="s-4", variant_key="treatment")
    with django_capture_on_commit_callbacks(execute=True):
        record(experiment, "s-4", "control")  # cache now holds only this field, not marked complete
    stored = selectors.sticky_variants(experiment_ids=[experiment.id, other.id], session_id="s-4", user_id="")
    assert stored == {(experiment.id, 1): "control", (other.id, 1): "treatment"}


def test_redis_down_falls_back_to_the_database(experiment, monkeypatch, django_assert_num_queries):
    record(experiment, "s-5", "treatment")
    selectors.assignment_state()
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2, socket_timeout=0.2)
    monkeypatch.setattr(sticky, "redis_client", lambda: dead)
    with django_assert_num_queries(1):
        assert selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-5", user_id="") == {
            (experiment.id, 1): "treatment"
        }
    assert sticky.lookup("x", ["s-5"]) is None  # backing off: Redis is not even tried


def test_rotating_the_namespace_drops_every_cached_entry(experiment):
    record(experiment, "s-6", "treatment")
    selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-6", user_id="")
    Exposure.objects.all().delete()  # e.g. a database restored from a backup
    sticky_cache_reset(actor="ops")
    invalidate_all()
    assert selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-6", user_id="") == {}
