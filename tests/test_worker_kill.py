"""A worker SIGKILLed in the middle of an upstream call: nothing is called twice, nothing stays running.

Real Redis broker, real worker processes, simulated upstream with a long latency so the call is in
flight when the worker dies. Worker A holds job one (in flight) while job two waits in the queue;
A's whole process group is SIGKILLed; worker B starts. Expected (``routing.worker.tasks`` docstring):

* job two is completed exactly once by worker B;
* job one — whose attempt may have reached the provider — is failed ``worker_lost`` (by the
  redelivered task finding the lapsed lease, or by the reaper), never re-run: exactly one upstream
  call carries it, even after its task message is redelivered to B.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from muse_experiments.experiments.models import Exposure
from muse_experiments.infra.redis_client import redis_client
from routing.catalogue import avocado_id
from routing.jobs import WORKER_LOST
from routing.models import Attempt, CallRecord, CompletionJob, JobStatus
from routing.transcripts.models import TranscriptTurn
from routing.worker import drainer
from tests.conftest import (
    CREDENTIAL_ENV,
    database_url_for_subprocess,
    start_celery_worker,
    stop_process_group,
)
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

FAST_RECOVERY = {
    "COMPLETION_LEASE_S": "2",
    "COMPLETION_REAP_INTERVAL_S": "1",
    "CELERY_VISIBILITY_TIMEOUT_S": "3",
    "CELERY_UNACKED_RESTORE_INTERVAL_S": "1",
    "CELERY_UNACKED_RESTORE_THROTTLE": "1",
}


def start_worker(name: str, log_path: Path, **extra_env: str) -> subprocess.Popen:
    env = {
        **os.environ,
        **CREDENTIAL_ENV,
        **FAST_RECOVERY,
        **extra_env,
        "DATABASE_URL": database_url_for_subprocess(),
        "MUSE_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_DEBUG": "true",
        "REDIS_URL": settings.REDIS_URL,
    }
    return start_celery_worker(env, log_path, name=name, queues="completions,maintenance", concurrency=1)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def calls_carrying(upstreams, marker: str) -> int:
    return sum(
        1
        for c in upstreams.calls(model="avocado-v15")
        if any(marker in str(m.get("content")) for m in c["body"].get("messages", []))
    )


def delivery_recorded(job_id: str) -> bool:
    """Whether a task message for ``job_id`` is in the broker's unacknowledged hash."""
    return any(job_id.encode() in entry for entry in redis_client().hvals("unacked"))


@pytest.mark.parametrize("recorded", [True, False], ids=["after-its-record", "before-its-record"])
def test_a_worker_killed_mid_call_fails_that_job_once_and_another_worker_completes_the_queued_one(
    live_server, upstreams, redis_url, tmp_path, recorded
):
    """Killed after its delivery was recorded (a call running longer than
    ``CELERY_COMPLETION_RECORD_AFTER_S``), job one's message is redelivered to B, which must not
    call the provider again; killed before (muse_experiments.infra.broker.QoS), it is not redelivered and
    the reaper fails the job: either way one upstream call, ``worker_lost``."""
    seed_catalogue(upstreams.url)
    upstreams.set_scenario("avocado-v15", latency_ms=60_000)  # in flight until the kill
    headers = {"Authorization": f"Bearer {api_key()}"}
    worker_a = start_worker(
        "a", tmp_path / "a.log", CELERY_COMPLETION_RECORD_AFTER_S="0.3" if recorded else "600"
    )
    worker_b = None
    try:
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as client:
            ids = []
            for marker in ("job-one", "job-two"):
                r = client.post(
                    "/api/v1/completions",
                    json={
                        "session_id": marker,
                        "user_id": "u",
                        "messages": [{"role": "user", "content": marker}],
                        "async": True,
                    },
                )
                assert r.status_code == 202, r.text
                ids.append(r.json()["id"])
                if marker == "job-one":
                    wait_for(lambda: calls_carrying(upstreams, "job-one") == 1, 30, "job one in flight")
        one, two = ids
        assert CompletionJob.objects.get(pk=one).status == JobStatus.RUNNING
        assert CompletionJob.objects.get(pk=two).status == JobStatus.QUEUED
        if recorded:
            wait_for(lambda: delivery_recorded(one), 10, "job one's delivery recorded")
        else:
            assert not delivery_recorded(one)

        stop_process_group(worker_a, signal.SIGKILL)
        upstreams.set_scenario("avocado-v15", latency_ms=0)
        worker_b = start_worker("b", tmp_path / "b.log")

        def finished(job_id):
            return CompletionJob.objects.get(pk=job_id).status in (JobStatus.SUCCEEDED, JobStatus.FAILED)

        wait_for(lambda: finished(one) and finished(two), 60, "both jobs to finish")
        b_log = tmp_path / "b.log"
        if recorded:
            # job one's unacknowledged message comes back to B after the visibility timeout; B must
            # not call the provider for it again
            wait_for(
                lambda: f"run_completion[{one}] succeeded".encode() in b_log.read_bytes(), 60, "redelivery"
            )
        else:  # past the visibility timeout and a restore interval: nothing to redeliver
            time.sleep(5)
            assert f"run_completion[{one}]".encode() not in b_log.read_bytes()
    finally:
        stop_process_group(worker_a, signal.SIGKILL)
        if worker_b is not None:
            stop_process_group(worker_b)

    job_one, job_two = CompletionJob.objects.get(pk=one), CompletionJob.objects.get(pk=two)
    assert (job_one.status, job_one.error) == (JobStatus.FAILED, WORKER_LOST)
    assert job_one.deliveries in (1, 2)  # 2 when the redelivery (not the reaper) failed it
    assert job_two.status == JobStatus.SUCCEEDED
    assert job_two.result["text"].startswith("avocado-v15 reply to: job-two")
    assert calls_carrying(upstreams, "job-one") == 1
    assert calls_carrying(upstreams, "job-two") == 1
    assert not CompletionJob.objects.filter(status=JobStatus.RUNNING).exists()


def test_a_worker_killed_after_answering_loses_no_record(
    live_server, upstreams, redis_url, postgres, tmp_path
):
    """The answer leaves the worker with its records buffered in Redis (one MULTI); worker A runs
    no drainer, answers, and is SIGKILLed before anything reached the database. Worker B's
    drainer writes every record of the call."""
    redis_client().delete(drainer.STREAM)
    seed_catalogue(upstreams.url)
    make_experiment()
    headers = {"Authorization": f"Bearer {api_key()}"}
    worker_a = start_worker("a", tmp_path / "a.log", RECORDS_DRAINER="false")
    worker_b = None
    try:
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as client:
            r = client.post(
                "/api/v1/completions",
                json={
                    "session_id": "s-kill",
                    "user_id": "u",
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["status"] == "succeeded"
        job_id = answer["id"]
        assert not CallRecord.objects.filter(job_id=job_id).exists()  # not drained: A has no drainer
        assert redis_client().xlen(drainer.STREAM) == 1
        stop_process_group(worker_a, signal.SIGKILL)

        worker_b = start_worker("b", tmp_path / "b.log")
        wait_for(
            lambda: CallRecord.objects.filter(job_id=job_id).exists(), 30, "worker B to drain the records"
        )
    finally:
        stop_process_group(worker_a, signal.SIGKILL)
        if worker_b is not None:
            stop_process_group(worker_b)

    job = CompletionJob.objects.get(pk=job_id)
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, answer["result"])
    call = CallRecord.objects.get(job_id=job_id)
    assert (call.experiment_key, call.variant_key) == ("exp", answer["result"]["variant"])
    assert call.served_endpoint == answer["result"]["served_model"]
    assert list(Attempt.objects.filter(call=call).values_list("outcome", flat=True)) == ["ok"]
    assert Exposure.objects.filter(unit_id="s-kill", variant_key=call.variant_key).count() == 1
    assert TranscriptTurn.objects.get(job_id=job_id).output_text == answer["result"]["text"]
    assert redis_client().xlen(drainer.STREAM) == 0


#: Leases and the requeue far beyond the test: only the heartbeat can make anything happen in time.
HEARTBEAT_ONLY = {
    "WORKER_HEARTBEAT_TTL_S": "1",
    "COMPLETION_LEASE_S": "600",
    "COMPLETION_REAP_INTERVAL_S": "600",
    "COMPLETION_REQUEUE_AFTER_S": "600",
    "CELERY_VISIBILITY_TIMEOUT_S": "3600",
    "CELERY_COMPLETION_RECORD_AFTER_S": "600",
}


def test_a_worker_killed_mid_call_is_seen_by_its_heartbeat_its_call_recorded_lost_and_its_taken_job_served(
    live_server, upstreams, redis_url, tmp_path, settings
):
    """Worker A is mid-call on job one (a job id handed out, claimed through its row) when it is
    SIGKILLed; a waiting caller's job, whose task message A had taken before claiming it (popped
    off the queue here), is known only by its record. Leases, redelivery and the requeue are all
    minutes away, so what follows is the heartbeat's doing: once worker B beats, job one is failed
    ``worker_lost`` with its attempt recorded ``lost``, cost unknown (never called again), and the
    taken job is published again and served to its still-waiting caller."""
    settings.COMPLETION_REQUEUE_AFTER_S = 600  # the waiting request must not be what saves it
    settings.COMPLETION_SYNC_WAIT_S = 120
    seed_catalogue(upstreams.url)
    upstreams.set_scenario("avocado-v15", latency_ms=60_000)  # in flight until the kill
    headers = {"Authorization": f"Bearer {api_key()}"}
    client_redis = redis_client()
    client_redis.delete("completions")
    worker_a = start_celery_worker(
        {**_worker_env(), **HEARTBEAT_ONLY}, tmp_path / "a.log", name="a", queues="completions", concurrency=1
    )
    worker_b = None
    waiting: dict = {}
    try:
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=120) as client:
            body = {"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "job-one"}]}
            r = client.post("/api/v1/completions", json={**body, "async": True})
            assert r.status_code == 202, r.text
            one = r.json()["id"]
            wait_for(lambda: calls_carrying(upstreams, "job-one") == 1, 30, "job one in flight")

            def call_and_wait() -> None:
                taken = {**body, "messages": [{"role": "user", "content": "job-taken"}]}
                waiting["response"] = client.post("/api/v1/completions", json=taken)

            caller = threading.Thread(target=call_and_wait)
            caller.start()
            wait_for(lambda: client_redis.llen("completions") == 1, 30, "the taken job's message")
            message = json.loads(client_redis.rpop("completions"))  # A took it, and dies with it
            taken_id = json.loads(base64.b64decode(message["body"]))[0][0]
            assert client.get(f"/api/v1/completions/{taken_id}").json()["status"] == "queued"

            stop_process_group(worker_a, signal.SIGKILL)
            upstreams.set_scenario("avocado-v15", latency_ms=0)
            worker_b = start_celery_worker(
                {**_worker_env(), **HEARTBEAT_ONLY}, tmp_path / "b.log", name="b", queues="completions",
                concurrency=2,
            )  # fmt: skip
            caller.join(timeout=120)
            answer = waiting["response"]
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "succeeded"
            assert answer.json()["result"]["text"].startswith("avocado-v15 reply to: job-taken")

            wait_for(lambda: CallRecord.objects.filter(job_id=one).exists(), 60, "job one's lost call")
            wait_for(lambda: CallRecord.objects.filter(job_id=taken_id).exists(), 60, "the taken job drained")
            found = client.get(f"/api/v1/completions/{taken_id}").json()
            assert found["status"] == "succeeded"
    finally:
        stop_process_group(worker_a, signal.SIGKILL)
        if worker_b is not None:
            stop_process_group(worker_b)

    job_one = CompletionJob.objects.get(pk=one)
    assert (job_one.status, job_one.error, job_one.deliveries) == (JobStatus.FAILED, WORKER_LOST, 1)
    lost = CallRecord.objects.get(job_id=one)
    assert (lost.status, lost.error_kind, lost.cost_unknown, lost.cost_usd) == (
        "failed",
        "worker_lost",
        True,
        0,
    )
    assert [(a.outcome, a.cost_unknown, a.cost_usd) for a in lost.attempts.all()] == [("lost", True, 0)]
    assert lost.attempts.get().endpoint == lost.assigned_endpoint == avocado_id(15)
    served = CompletionJob.objects.get(pk=taken_id)
    assert (served.status, served.deliveries) == (JobStatus.SUCCEEDED, 1)
    assert CallRecord.objects.get(job_id=taken_id).cost_unknown is False
    assert calls_carrying(upstreams, "job-one") == 1  # never called again
    assert calls_carrying(upstreams, "job-taken") == 1
    assert not CompletionJob.objects.filter(status=JobStatus.RUNNING).exists()


def _worker_env() -> dict[str, str]:
    return {
        **os.environ,
        **CREDENTIAL_ENV,
        "DATABASE_URL": database_url_for_subprocess(),
        "MUSE_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_DEBUG": "true",
        "REDIS_URL": settings.REDIS_URL,
    }
