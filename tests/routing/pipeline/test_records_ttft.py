"""Time to first token on call records (``CallRecord.ttft_ms``): measured in the proxy where a
stream's first content delta arrives, null for calls that were not streamed, carried by the
write-behind payload and written by the drainer (payloads buffered before the field existed still
drain). The simulated upstreams sleep ``latency_ms`` before their response headers and
``chunk_delay_ms`` before each delta, so the first token cannot come sooner than the former."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from muse_experiments.infra.redis_client import redis_client
from routing.models import CallRecord
from routing.pipeline.streaming import publish_job_events
from routing.worker import drainer as writebehind
from tests.conftest import wait_for_records_written
from tests.factories import api_key, seed_catalogue
from tests.routing.pipeline.test_router import job
from tests.routing.worker.test_drainer import buffered_entries, drain_all

CLAUDE = "anthropic/claude-sonnet-5-5"
HEADERS_AFTER_MS = 150  # the simulated upstream's wait before its response headers
CHUNK_DELAY_MS = 15  # and before each content delta


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_streamed_sdk_call_records_its_first_token_and_a_non_streamed_call_none(
    live_server, upstreams, celery_worker_process
):
    seed_catalogue(upstreams.url)
    for model in ("avocado-v15", "claude-sonnet-5-5"):
        upstreams.set_scenario(
            model, latency_ms=HEADERS_AFTER_MS, chunk_delay_ms=CHUNK_DELAY_MS, tool_calls="never"
        )
    key = api_key(["completions"])
    chat = openai.OpenAI(
        base_url=f"{live_server.url}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Muse-Session-Id": "ttft-stream"},
    )
    deltas = [
        chunk.choices[0].delta.content
        for chunk in chat.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        if chunk.choices and chunk.choices[0].delta.content
    ]
    assert len(deltas) >= 2
    with anthropic.Anthropic(base_url=live_server.url, api_key=key, max_retries=0).messages.stream(
        model=CLAUDE,
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "ttft-anthropic"},
    ) as stream:
        assert "".join(stream.text_stream)
    whole = openai.OpenAI(
        base_url=f"{live_server.url}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Muse-Session-Id": "ttft-whole"},
    ).chat.completions.create(model="muse-default", messages=[{"role": "user", "content": "hi"}])
    assert whole.choices[0].message.content
    wait_for_records_written()

    chat_stream = CallRecord.objects.get(session_id="ttft-stream")
    messages_stream = CallRecord.objects.get(user_id="ttft-anthropic")
    for streamed in (chat_stream, messages_stream):
        assert streamed.status == "succeeded"
        assert HEADERS_AFTER_MS <= streamed.ttft_ms <= streamed.latency_ms
    # several deltas, each after CHUNK_DELAY_MS: the answer ended well after its first token
    assert chat_stream.latency_ms - chat_stream.ttft_ms >= CHUNK_DELAY_MS
    plain = CallRecord.objects.get(session_id="ttft-whole")
    assert plain.status == "succeeded" and plain.latency_ms >= HEADERS_AFTER_MS
    assert plain.ttft_ms is None


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_the_drainer_writes_the_buffered_ttft_and_drains_payloads_buffered_without_it(
    redis_url, settings, upstreams
):
    settings.RECORDS_WRITE_BEHIND = True
    client = redis_client()
    client.delete(writebehind.STREAM, writebehind.DEAD_LETTERS)
    seed_catalogue(upstreams.url)
    upstreams.set_scenario("avocado-v15", latency_ms=40, chunk_delay_ms=5, tool_calls="never")
    streamed, old = job(session_id="streamed"), job(session_id="old-payload")
    assert publish_job_events(job_id=str(streamed.id)) == "succeeded"
    assert publish_job_events(job_id=str(old.id)) == "succeeded"

    calls = {p["call"]["session_id"]: p["call"] for p in buffered_entries()}
    assert 40 <= calls["streamed"]["ttft_ms"] < calls["streamed"]["latency_ms"]
    # a payload a worker buffered before call records had ttft_ms: replace the entry by one without it
    entry_id, fields = next(
        (i, f) for i, f in client.xrange(writebehind.STREAM) if str(old.id).encode() in f[b"p"]
    )
    payload = json.loads(fields[b"p"])
    del payload["call"]["ttft_ms"]
    client.xdel(writebehind.STREAM, entry_id)
    client.xadd(writebehind.STREAM, {**fields, b"p": json.dumps(payload)})

    assert drain_all() == 2
    assert client.xlen(writebehind.DEAD_LETTERS) == 0
    assert CallRecord.objects.get(session_id="streamed").ttft_ms == pytest.approx(
        calls["streamed"]["ttft_ms"]
    )
    assert CallRecord.objects.get(session_id="old-payload").ttft_ms is None
    client.delete(writebehind.STREAM, writebehind.DEAD_LETTERS)
