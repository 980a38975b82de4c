"""The worker's cancel watcher (:data:`routing.pipeline.cancel.cancel_watcher`) on real Redis: a job's cancel
flag cuts off its non-streamed upstream call, over real HTTP to the fake upstreams."""

from __future__ import annotations

import threading
import uuid

import pytest

from routing.pipeline.cancel import CancelWatcher
from routing.providers import CompletionRequest, Message, client_for
from routing.providers.errors import ConnectionFailed
from routing.state.events import cancel_key, redis_client
from routing.web.relay import job_cancel_request
from tests.conftest import UPSTREAM_KEYS
from tests.routing.conftest import make_endpoint

pytestmark = [pytest.mark.redis, pytest.mark.django_db]

MODEL = "avocado-v15"


@pytest.fixture
def job_ids(redis_url):
    ids = [str(uuid.uuid4()) for _ in range(2)]
    yield ids
    redis_client().delete(*(cancel_key(i) for i in ids))


def slow_call(watcher: CancelWatcher, upstreams, job_id: str):
    """Start a non-streamed call under ``watcher`` for ``job_id`` against a 30 s upstream."""
    ep = make_endpoint(
        upstreams, "native", upstream_model=MODEL, credential=UPSTREAM_KEYS["native"], timeout_s=60.0
    )
    box: dict = {}

    def run():
        with watcher.watching(job_id) as call:
            box["call"] = call
            try:
                box["result"] = client_for(ep).complete(
                    ep, CompletionRequest(messages=(Message("user", "hi"),))
                )
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def test_the_cancel_flag_of_a_job_cuts_off_its_call_and_no_other(upstreams, job_ids):
    upstreams.set_scenario(MODEL, latency_ms=30_000)
    watcher = CancelWatcher(every_s=0.05)
    gone, staying = job_ids
    thread, box = slow_call(watcher, upstreams, gone)
    other, other_box = slow_call(watcher, upstreams, staying)
    threading.Event().wait(0.3)
    assert watcher.poll() == 0  # no flag yet: nothing cut off

    job_cancel_request(job_id=gone)
    thread.join(10)

    assert isinstance(box.get("error"), ConnectionFailed) and box["call"].cancelled
    assert other.is_alive() and not other_box["call"].cancelled
    other_box["call"].cancel()  # end the other call (the test's own clean-up)
    other.join(10)
    assert watcher.poll() == 0  # finished calls are no longer watched
