"""``stream=true`` on ``POST /api/v1/completions``: SSE relayed from a real worker through Redis,
plus async/sync answers and what never leaks."""

from __future__ import annotations

import json

import httpx
import pytest

from routing.catalogue import AVOCADO_VERSIONS, avocado_id
from routing.models import CompletionJob
from tests.conftest import wait_for_records_written
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEFAULT = avocado_id(AVOCADO_VERSIONS)
FORBIDDEN = ("encrypted_content", "gAAAAA", "signature", "redacted_thinking")
TOOLS = [
    {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "fetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}},
]


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for frame in text.split("\n\n"):
        lines = [line for line in frame.splitlines() if not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
        events.append((name, data))
    return events


@pytest.fixture
def api(live_server, upstreams, celery_worker_process):
    seed_catalogue(upstreams.url)
    make_experiment(
        key="stream-exp", arms=[("control", DEFAULT, 0.0), ("claude", "anthropic/claude-sonnet-5-5", 1.0)]
    )
    for model in ("claude-sonnet-5-5", "avocado-v15"):
        upstreams.set_scenario(model, reasoning=True, redacted_thinking=True, tool_calls="parallel")
    client = httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {api_key()}"}, timeout=60
    )
    yield client, upstreams
    client.close()


def body(**extra):
    return {
        "session_id": "s-1",
        "user_id": "u-1",
        "subagent": "coder",
        "messages": [{"role": "user", "content": "find docs"}],
        **extra,
    }


def test_streamed_parallel_tool_calls_arrive_as_separate_calls_and_end_with_the_routing_facts(api):
    client, upstreams = api
    with client.stream("POST", "/api/v1/completions", json=body(stream=True, tools=TOOLS)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    for needle in FORBIDDEN:
        assert needle not in text
    events = sse_events(text)
    names = [n for n, _ in events]
    assert names[0] == "job" and names[-1] == "done"
    assert names[1] == "served" and events[1][1]["model"] == "anthropic/claude-sonnet-5-5"
    assert set(names[2:-1]) <= {"text_delta", "tool_call_delta"}
    calls: dict[int, dict] = {}
    for name, e in events:
        if name == "tool_call_delta":
            c = calls.setdefault(e["index"], {"id": None, "name": None, "args": ""})
            c["id"], c["name"] = e["id"] or c["id"], e["name"] or c["name"]
            c["args"] += e["arguments_delta"]
    assert [(calls[i]["name"], json.loads(calls[i]["args"])) for i in sorted(calls)] == [
        ("search", {"q": "find docs"}),
        ("fetch", {"url": "find docs"}),
    ]
    done = events[-1][1]
    result = done["result"]
    assert result["served_model"] == "anthropic/claude-sonnet-5-5"
    assert (result["experiment"], result["variant"], result["reason"]) == ("stream-exp", "claude", "assigned")
    assert result["usage"]["output_tokens"] > 0 and float(result["cost_usd"]) > 0
    assert [c["id"] for c in result["tool_calls"]] == [calls[0]["id"], calls[1]["id"]]
    wait_for_records_written()
    job = CompletionJob.objects.get(pk=done["id"])
    assert job.status == "succeeded" and job.result == result
    assert upstreams.call_count(model="claude-sonnet-5-5") == 1


def test_a_stream_that_breaks_after_content_ends_with_an_error_event_and_a_failed_job(api):
    client, upstreams = api
    upstreams.set_scenario(
        "claude-sonnet-5-5", failure="stream_error", stream_error_after=2, tool_calls="never"
    )
    with client.stream("POST", "/api/v1/completions", json=body(stream=True)) as r:
        events = sse_events(r.read().decode())
    assert [n for n, _ in events][-1] == "error"
    assert sum(1 for n, _ in events if n == "text_delta") == 2
    wait_for_records_written()
    job = CompletionJob.objects.get()
    assert job.status == "failed" and "after content" in job.error
    assert upstreams.call_count(model="claude-sonnet-5-5") == 1  # never restarted elsewhere
    assert upstreams.call_count(model="avocado-v15") == 0


def test_async_answers_202_at_once_and_the_job_url_gives_the_result_without_reasoning(api):
    client, upstreams = api
    upstreams.set_scenario("claude-sonnet-5-5", latency_ms=300, tool_calls="never", reasoning=True)
    r = client.post("/api/v1/completions", json=body(**{"async": True}))
    assert r.status_code == 202
    job_url = r.headers["Location"]
    assert r.json()["status"] in ("queued", "running")
    sync = client.post("/api/v1/completions", json=body(session_id="s-2"))
    assert sync.status_code == 200 and sync.json()["status"] == "succeeded"
    detail = client.get(job_url)
    assert detail.status_code == 200 and detail.json()["status"] == "succeeded"
    for needle in FORBIDDEN:
        assert needle not in detail.text and needle not in sync.text
    result = sync.json()["result"]
    assert set(result) >= {
        "text", "tool_calls", "served_model", "experiment", "variant", "usage", "cost_usd", "reason",
    }  # fmt: skip


def test_a_late_subscriber_reads_the_whole_stream_from_redis(api, redis_url):
    from routing.web.relay import relay_events

    client, _ = api
    with client.stream("POST", "/api/v1/completions", json=body(stream=True, tools=TOOLS[:1])) as r:
        first = sse_events(r.read().decode())
    replay = list(relay_events(job_id=first[0][1]["id"]))
    assert [(e["type"], e) for e in replay] == [(n, e) for n, e in first[1:]]
