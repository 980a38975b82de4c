"""Shadow pairs written in batches (SHADOW_PAIR_FLUSH_S > 0, the Procfile's shadow worker): one
bulk INSERT per batch, by the flusher thread, when the batch is full, or on an explicit flush."""

from __future__ import annotations

import time

import pytest

from muse_experiments.celery import app
from muse_experiments.experiments.models import ShadowPair
from routing.shadow import pairs
from tests.factories import seed_catalogue
from tests.routing.pipeline.test_router import job, run
from tests.routing.shadow.test_run import CANDIDATE, start

pytestmark = pytest.mark.django_db(transaction=True)  # the flusher thread writes on its own connection


@pytest.fixture
def batched(upstreams, redis_store, settings):
    pairs._flusher.clear()  # a flusher of an earlier test ends without writing
    seed_catalogue(upstreams.url)
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    settings.SHADOW_PAIR_FLUSH_S = 0.3
    settings.SHADOW_PAIR_BATCH = 3
    yield settings
    pairs._flusher.clear()
    pairs.flush_pairs()
    app.conf.task_always_eager = before


def wait_pairs(n: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while ShadowPair.objects.count() < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return ShadowPair.objects.count()


def test_pairs_wait_for_their_batch_then_the_flusher_writes_them(batched):
    start(judge=None)
    run(job(session_id="s-1"))
    run(job(session_id="s-2"))
    assert ShadowPair.objects.count() == 0  # waiting in this process
    assert len(pairs._pending) == 2
    assert wait_pairs(2) == 2  # the flusher thread wrote them (within SHADOW_PAIR_FLUSH_S)
    assert pairs._pending == []
    assert set(ShadowPair.objects.values_list("candidate_model", flat=True)) == {CANDIDATE}


def test_a_full_batch_is_written_at_once_and_a_duplicate_is_skipped(batched):
    batched.SHADOW_PAIR_FLUSH_S = 60  # the flusher would wait a minute: only a full batch writes
    start(judge=None)
    jobs = [run(job(session_id=f"s-{i}")) for i in range(2)]
    assert ShadowPair.objects.count() == 0
    copy = ShadowPair.objects.model(**{
        f.attname: getattr(pairs._pending[0], f.attname) for f in ShadowPair._meta.concrete_fields if f.attname != "id"
    })  # fmt: skip
    pairs._pending.append(copy)  # the same job's pair again: the batch is full (3)
    run(job(session_id="s-3"))  # a fourth: a batch of 4 written by this thread at once
    assert sorted(ShadowPair.objects.values_list("session_id", flat=True)) == ["s-0", "s-1", "s-3"]
    assert {str(p) for p in ShadowPair.objects.values_list("job_id", flat=True)} >= {str(j.id) for j in jobs}
