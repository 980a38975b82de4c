"""Outages on the way to a worker: a lost task message is published again, a refused publish
fails its job (never left queued), and a backing service that is down is a JSON 503."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.test import RequestFactory
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from muse_experiments.api.errors import DependencyOutageMiddleware
from routing.jobs import completion_job_create
from routing.models import CompletionJob, JobStatus
from routing.web import dispatch
from routing.worker import tasks
from tests.factories import seed_catalogue


def make_job(**kw) -> CompletionJob:
    job, _ = completion_job_create(
        api_key=None,
        session_id="s-lost",
        user_id="u",
        subagent="",
        attributes={},
        request={"messages": [{"role": "user", "content": "lost message"}]},
        **kw,
    )
    return job


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_task_message_was_lost_is_published_again_and_runs_once(upstreams, celery_worker_process):
    seed_catalogue(upstreams.url)
    job = make_job()  # created without publishing: as if the broker lost the message
    CompletionJob.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(seconds=300))
    assert tasks.requeue_lost_jobs(older_than_s=60) == 1
    assert tasks.requeue_lost_jobs(older_than_s=60) == 0  # once per period
    deadline = time.monotonic() + 60
    while CompletionJob.objects.get(pk=job.pk).status != JobStatus.SUCCEEDED:
        assert time.monotonic() < deadline, CompletionJob.objects.values("status", "error").get(pk=job.pk)
        time.sleep(0.2)
    assert CompletionJob.objects.get(pk=job.pk).deliveries == 1
    calls = [c for c in upstreams.calls() if "lost message" in c["raw_body"]]
    assert len(calls) == 1


@pytest.mark.django_db
def test_a_recent_or_claimed_job_is_not_published_again():
    fresh = make_job()
    old_running = make_job(idempotency_key="k2")
    CompletionJob.objects.filter(pk=old_running.pk).update(
        status=JobStatus.RUNNING, deliveries=1, created_at=timezone.now() - timedelta(seconds=300)
    )
    assert tasks.requeue_lost_jobs(older_than_s=60) == 0
    assert CompletionJob.objects.get(pk=fresh.pk).status == JobStatus.QUEUED


@pytest.mark.django_db
def test_a_publish_the_broker_refuses_fails_the_job_instead_of_leaving_it_queued(monkeypatch):
    job = make_job()

    def refuse(*args, **kwargs):
        raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(dispatch, "_send", refuse)
    with pytest.raises(BrokerError):
        dispatch.publish_completion(str(job.id))
    job.refresh_from_db()
    assert (job.status, job.error) == (JobStatus.FAILED, dispatch.BROKER_UNAVAILABLE)


@pytest.mark.parametrize(
    "exc", [OperationalError("terminating connection due to administrator command"), BrokerError("refused")]
)
def test_an_unreachable_backing_service_is_a_json_503_with_retry_after(exc):
    middleware = DependencyOutageMiddleware(lambda request: None)
    response = middleware.process_exception(RequestFactory().post("/v1/chat/completions"), exc)
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    body = json.loads(response.content)
    assert body["error"]["code"] == "service_unavailable"
    assert "administrator" not in body["error"]["message"]
    assert middleware.process_exception(RequestFactory().get("/"), ValueError("bug")) is None
