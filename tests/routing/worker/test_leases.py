"""Job leases: a redelivered task never re-runs an attempt; expired leases are reaped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from routing.jobs import (
    WORKER_LOST,
    completion_job_claim,
    completion_job_create,
    completion_jobs_reap_expired,
    completion_jobs_renew_leases,
)
from routing.models import CompletionJob, JobStatus

pytestmark = pytest.mark.django_db


def new_job() -> CompletionJob:
    job, _ = completion_job_create(
        api_key=None, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []}
    )
    return job


def test_claiming_records_the_attempt_and_a_redelivery_during_a_live_lease_does_nothing():
    job = new_job()
    claimed = completion_job_claim(job_id=job.id, worker="w1:1")
    assert claimed is not None and claimed.status == JobStatus.RUNNING
    assert (claimed.deliveries, claimed.worker) == (1, "w1:1")
    assert claimed.lease_expires_at > timezone.now()
    assert completion_job_claim(job_id=job.id, worker="w2:2") is None
    job.refresh_from_db()
    assert (job.status, job.deliveries, job.worker) == (JobStatus.RUNNING, 1, "w1:1")


def test_a_redelivery_after_the_lease_lapsed_fails_the_job_instead_of_calling_again():
    job = new_job()
    completion_job_claim(job_id=job.id, worker="w1:1")
    CompletionJob.objects.filter(pk=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert completion_job_claim(job_id=job.id, worker="w2:2") is None
    job.refresh_from_db()
    assert (job.status, job.error, job.deliveries) == (JobStatus.FAILED, WORKER_LOST, 2)
    assert completion_job_claim(job_id=job.id, worker="w3:3") is None  # finished: nothing more


def test_renewal_keeps_only_the_holders_leases_alive_and_the_reaper_fails_lapsed_ones():
    live, dead, queued = new_job(), new_job(), new_job()
    completion_job_claim(job_id=live.id, worker="alive:1")
    completion_job_claim(job_id=dead.id, worker="dead:2")
    past = timezone.now() - timedelta(seconds=5)
    CompletionJob.objects.filter(pk__in=[live.id, dead.id]).update(lease_expires_at=past)
    assert completion_jobs_renew_leases(job_ids=[live.id, dead.id], worker="alive:1") == 1
    assert completion_jobs_reap_expired() == 1
    statuses = dict(CompletionJob.objects.values_list("id", "status"))
    assert statuses == {live.id: JobStatus.RUNNING, dead.id: JobStatus.FAILED, queued.id: JobStatus.QUEUED}
    assert CompletionJob.objects.get(pk=dead.id).error == WORKER_LOST


def _synchronous_commit() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)  # real transactions: SET LOCAL ends with its own
def test_a_job_for_a_waiting_caller_commits_without_the_wal_flush_and_only_that_transaction(postgres):
    from django.db import transaction

    from muse_experiments.infra.commit import relax_commit_durability

    with transaction.atomic():
        relax_commit_durability()
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"  # SET LOCAL: the connection's next transactions are durable
    job, created = completion_job_create(
        api_key=None, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []},
        durable=False,
    )  # fmt: skip
    assert created and CompletionJob.objects.get(pk=job.id).status == JobStatus.QUEUED
    assert _synchronous_commit() == "on"


@pytest.mark.django_db(transaction=True)
def test_a_task_whose_job_row_is_gone_fails_its_waiting_caller_at_once(redis_url, settings):
    """A relaxed commit forgotten by a database crash: the worker hands the caller ``job_lost``
    through Redis instead of leaving it to time out, and a waiter re-reading the row answers the same."""
    import uuid

    from routing.models import JOB_LOST
    from routing.pipeline.streaming import stream_job_events
    from routing.state.handoff import final_state
    from routing.web.dispatch import wait_for_job

    ghost = str(uuid.uuid4())
    assert list(stream_job_events(job_id=ghost)) == [
        {"type": "error", "id": ghost, "status": JobStatus.FAILED, "error": JOB_LOST}
    ]
    assert final_state(ghost)["status"] == JobStatus.FAILED and final_state(ghost)["error"] == JOB_LOST

    job = new_job()
    CompletionJob.objects.filter(pk=job.id).delete()
    waited = wait_for_job(job, timeout_s=1.5)
    assert (waited.status, waited.error) == (JobStatus.FAILED, JOB_LOST)


@pytest.mark.django_db(transaction=True)
def test_two_requests_racing_on_one_idempotency_key_make_one_job(postgres):
    """The second insert waits for the first transaction, fails on the unique key, and returns the
    first request's job (created False) instead of an error."""
    import threading
    import time as _time

    from django.db import connection, transaction

    from muse_experiments.api.auth import api_key_create

    key, _ = api_key_create(name="race", scopes=["completions"])
    looked = threading.Barrier(2)
    made: dict[str, tuple] = {}

    def create(name: str, hold_s: float) -> None:
        try:
            with transaction.atomic():
                if name == "second":
                    looked.wait()
                made[name] = completion_job_create(
                    api_key=key, session_id="s", user_id="u", subagent="", attributes={},
                    request={"messages": []}, idempotency_key="race-key",
                )  # fmt: skip
                if name == "first":
                    looked.wait()
                    _time.sleep(hold_s)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=create, args=("first", 0.5)),
        threading.Thread(target=create, args=("second", 0)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    (first, first_created), (second, second_created) = made["first"], made["second"]
    assert (first_created, second_created) == (True, False) and first.id == second.id
    assert CompletionJob.objects.filter(idempotency_key="race-key").count() == 1
