"""The drop-in endpoints, driven by the official ``openai`` and ``anthropic`` SDKs as clients.

Live server + a real Celery worker + simulated upstreams over HTTP. With ``REDIS_URL`` streamed
deltas travel worker → Redis stream → web; without it the web process runs the stream itself.
Every upstream is told to return encrypted reasoning, and no byte of it may reach a client.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from routing.catalogue import AVOCADO_VERSIONS, avocado_id
from routing.models import CallRecord, CompletionJob
from tests.conftest import wait_for_records_written
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEFAULT = avocado_id(AVOCADO_VERSIONS)
CLAUDE = "anthropic/claude-sonnet-5-5"
AZURE = "azure/muse-special"
FORBIDDEN = ("encrypted_content", "gAAAAA", "signature", "redacted_thinking", "thinking")
WEATHER = {
    "name": "weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {
    "name": "clock",
    "description": "Time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def platform(live_server, upstreams, celery_worker_process):
    """Catalogue on the simulated upstreams, every upstream emitting (encrypted) reasoning."""
    seed_catalogue(upstreams.url)
    for model in ("avocado-v15", "muse-special", "claude-sonnet-5-5"):
        upstreams.set_scenario(
            model, reasoning=True, encrypted_reasoning="always", redacted_thinking=True, tool_calls="parallel"
        )
    key = api_key(["completions"])
    return live_server.url, key, upstreams


def assert_no_reasoning(raw: str) -> None:
    for needle in FORBIDDEN:
        assert needle not in raw, f"{needle!r} leaked: {raw[:500]}"


def openai_client(url: str, key: str, **headers) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers=headers or None)


def test_openai_chat_completions_with_parallel_tool_calls_then_a_tool_result(platform):
    url, key, upstreams = platform
    client = openai_client(url, key, **{"X-Muse-Session-Id": "sess-1", "X-Muse-User-Id": "user-1"})
    tools = [{"type": "function", "function": WEATHER}, {"type": "function", "function": CLOCK}]
    messages = [{"role": "user", "content": "Paris"}]

    raw = client.chat.completions.with_raw_response.create(
        model="muse-default", messages=messages, tools=tools
    )
    assert_no_reasoning(raw.http_response.text)
    first = raw.parse()
    assert raw.headers["x-muse-served-model"] == DEFAULT
    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("weather", {"city": "Paris"}),
        ("clock", {"city": "Paris"}),
    ]
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0

    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": c.id, "content": "18C"} for c in calls),
    ]
    second = client.chat.completions.create(model="muse-default", messages=messages, tools=tools)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content.startswith("avocado-v15 reply to: Paris")

    wait_for_records_written()
    jobs = CompletionJob.objects.order_by("created_at")
    assert [(j.session_id, j.user_id, j.status) for j in jobs] == [("sess-1", "user-1", "succeeded")] * 2
    # the tool results reached the upstream as tool messages answering the two calls
    sent = upstreams.calls(model="avocado-v15")[-1]["body"]["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [c.id for c in calls]


def test_openai_chat_streaming_relays_text_and_separate_parallel_tool_calls(platform):
    url, key, upstreams = platform
    client = openai_client(url, key)
    tools = [{"type": "function", "function": WEATHER}, {"type": "function", "function": CLOCK}]
    chunks = list(
        client.chat.completions.create(
            model="muse-default",
            messages=[{"role": "user", "content": "Oslo"}],
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
            user="u-stream",
        )
    )
    by_index: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or ():
                entry = by_index.setdefault(tc.index, {"id": None, "name": None, "args": ""})
                entry["id"] = tc.id or entry["id"]
                entry["name"] = (tc.function.name if tc.function else None) or entry["name"]
                entry["args"] += (tc.function.arguments if tc.function else "") or ""
    assert sorted(by_index) == [0, 1]
    assert [(by_index[i]["name"], json.loads(by_index[i]["args"])) for i in (0, 1)] == [
        ("weather", {"city": "Oslo"}),
        ("clock", {"city": "Oslo"}),
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    wait_for_records_written()
    job = CompletionJob.objects.get()
    assert job.stream and job.user_id == "u-stream" and job.status == "succeeded"
    assert [c["name"] for c in job.result["tool_calls"]] == ["weather", "clock"]

    upstreams.set_scenario("avocado-v15", tool_calls="never", reply="one two three four")
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "x"}], stream=True
        )
        if c.choices
    )
    assert text == "one two three four"


def test_openai_responses_pinned_to_azure_streams_and_returns_function_calls_without_reasoning(platform):
    url, key, upstreams = platform
    client = openai_client(url, key)
    tools = [{"type": "function", **WEATHER}]

    raw = client.responses.with_raw_response.create(
        model=AZURE, input="Rome", tools=tools, include=["reasoning.encrypted_content"]
    )
    assert_no_reasoning(raw.http_response.text)
    response = raw.parse()
    assert response.model == AZURE
    calls = [o for o in response.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("weather", {"city": "Rome"})] * 2
    assert response.usage.output_tokens_details.reasoning_tokens == 12
    assert response.status == "completed" and response.completed_at >= response.created_at
    wait_for_records_written()
    assert CallRecord.objects.get().reason == "forced"

    follow = [
        {"role": "user", "content": "Rome"},
        *(
            {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in calls
        ),
        *({"type": "function_call_output", "call_id": c.call_id, "output": "21C"} for c in calls),
    ]
    with httpx.stream(
        "POST",
        f"{url}/v1/responses",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": AZURE, "input": follow, "tools": tools, "stream": True},
        timeout=60,
    ) as r:
        body = r.read().decode()
    assert_no_reasoning(body)
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["completed_at"] >= events[-1]["response"]["created_at"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas.startswith("muse-special reply to: Rome")

    with client.responses.stream(model=AZURE, input="Rome", tools=tools) as stream:
        final = stream.get_final_response()
    streamed_calls = [o for o in final.output if o.type == "function_call"]
    assert [json.loads(c.arguments) for c in streamed_calls] == [{"city": "Rome"}] * 2
    assert len({c.call_id for c in streamed_calls}) == 2


def test_anthropic_messages_non_streaming_and_streaming_with_tool_use(platform):
    url, key, upstreams = platform
    make_experiment(key="claude-vs-default", arms=[("control", DEFAULT, 0.0), ("claude", CLAUDE, 1.0)])
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    tools = [
        {
            "name": WEATHER["name"],
            "description": WEATHER["description"],
            "input_schema": WEATHER["parameters"],
        }
    ]

    raw = client.messages.with_raw_response.create(
        model="muse-default",
        max_tokens=256,
        messages=[{"role": "user", "content": "Lima"}],
        tools=tools,
        metadata={"user_id": "ant-user"},
    )
    assert_no_reasoning(raw.http_response.text)
    message = raw.parse()
    assert raw.headers["x-muse-variant"] == "claude"
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("weather", {"city": "Lima"})] * 2
    wait_for_records_written()  # the job's row comes with its records
    assert CompletionJob.objects.get().user_id == "ant-user"

    history = [
        {"role": "user", "content": "Lima"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "25C"} for u in uses],
        },
    ]
    with client.messages.stream(
        model="muse-default", max_tokens=256, messages=history, tools=tools
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("claude-sonnet-5-5 reply to: Lima")
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    sent = upstreams.calls(model="claude-sonnet-5-5")[-1]["body"]["messages"]
    assert [b["tool_use_id"] for b in sent[-1]["content"] if b.get("type") == "tool_result"] == [
        u.id for u in uses
    ]

    with client.messages.stream(
        model="muse-default", max_tokens=256, messages=[{"role": "user", "content": "Quito"}], tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [
        ("weather", {"city": "Quito"})
    ] * 2


def test_sdk_errors_arrive_in_the_sdks_own_shapes(platform):
    url, key, _ = platform
    client = openai_client(url, key)
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="gpt-imaginary", messages=[{"role": "user", "content": "x"}])
    assert not_found.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="muse-default", messages=[{"role": "wizard", "content": "x"}])
    assert bad.value.body["param"] == "messages[0].role"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "x"}], extra_body={"temprature": 1}
        )
    with pytest.raises(openai.AuthenticationError):
        openai_client(url, "muse_deadbeef_forged").responses.create(model="muse-default", input="x")
    ant = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as missing:
        ant.messages.create(model="muse-default", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert missing.value.body["error"]["type"] == "invalid_request_error"
    assert missing.value.body["error"]["message"] == "max_tokens: must be a positive integer."
    absent = httpx.post(  # the SDK itself insists on max_tokens
        f"{url}/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        json={"model": "muse-default", "messages": [{"role": "user", "content": "x"}]},
    )
    assert absent.status_code == 400
    assert absent.json()["error"]["message"] == "max_tokens: Field required (a positive integer)."
    no_scope = anthropic.Anthropic(base_url=url, api_key=api_key(["events"]), max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError):
        no_scope.messages.create(
            model="muse-default", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert not CompletionJob.objects.exists()


def test_a_pinned_external_model_under_a_kill_answers_503_model_unavailable_naming_the_kill(platform):
    from routing.ops_services import kill_switch_set

    url, key, upstreams = platform
    switch = kill_switch_set(scope="all_external", active=True, reason="incident", actor="oncall")
    message = (
        f"The model {AZURE} is unavailable: kill switch all_external is on since "
        f"{switch.active_since.isoformat()} (external_killed)."
    )
    with pytest.raises(openai.InternalServerError) as chat:
        openai_client(url, key).chat.completions.create(
            model=AZURE, messages=[{"role": "user", "content": "x"}]
        )
    assert chat.value.status_code == 503
    assert chat.value.body["code"] == "model_unavailable" and chat.value.body["message"] == message
    ant = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as messages:
        ant.messages.create(model=CLAUDE, max_tokens=16, messages=[{"role": "user", "content": "x"}])
    assert messages.value.status_code == 503
    assert messages.value.body["error"]["type"] == "model_unavailable"
    # streamed: the same 503 before the stream starts (no job, so no record), not a 200 that errors
    with pytest.raises(openai.InternalServerError) as streamed:
        openai_client(url, key).chat.completions.create(
            model=AZURE, messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert streamed.value.status_code == 503 and streamed.value.body["message"] == message
    with pytest.raises(anthropic.InternalServerError) as streamed_messages:
        ant.messages.create(
            model=CLAUDE, max_tokens=16, messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert streamed_messages.value.status_code == 503
    assert streamed_messages.value.body["error"]["type"] == "model_unavailable"
    wait_for_records_written()
    records = list(
        CallRecord.objects.order_by("created_at").values_list("reason", "error_kind", "served_endpoint")
    )
    assert records == [("external_killed", "model_unavailable", "")] * 2
    assert upstreams.call_count(model="muse-special") == upstreams.call_count(model="claude-sonnet-5-5") == 0


def test_a_pinned_model_whose_circuit_is_open_answers_503_model_unavailable(platform, redis_url):
    """Refused without a call (open circuit): the model is unavailable for now, a 503 like a kill,
    not a 502 "no endpoint could serve this call"."""
    from django.conf import settings

    from routing.guards.circuit import breaker

    url, key, upstreams = platform
    for _ in range(settings.ROUTING_CIRCUIT_FAILURES):
        breaker().record_failure(AZURE)
    try:
        with pytest.raises(openai.InternalServerError) as chat:
            openai_client(url, key).chat.completions.create(
                model=AZURE, messages=[{"role": "user", "content": "x"}]
            )
    finally:
        breaker().reset()  # the open circuit lives in Redis: later tests must find it closed
    assert chat.value.status_code == 503 and chat.value.body["code"] == "model_unavailable"
    assert chat.value.body["message"] == f"The model {AZURE} is unavailable (circuit_open)."
    assert upstreams.call_count(model="muse-special") == 0


def test_only_a_call_that_names_no_session_or_user_is_anonymous(platform):
    url, key, _ = platform
    messages = [{"role": "user", "content": "Oslo"}]
    openai_client(url, key).chat.completions.create(model="muse-default", messages=messages)
    openai_client(url, key, **{"X-Muse-User-Id": "user-7"}).chat.completions.create(
        model="muse-default", messages=messages
    )
    wait_for_records_written()
    anonymous, named = CompletionJob.objects.order_by("created_at")
    assert anonymous.session_id.startswith("anon-") and anonymous.user_id == anonymous.session_id
    assert (anonymous.request.get("anonymous"), named.request.get("anonymous")) == (True, None)
    assert (named.session_id, named.user_id) == ("user-7", "user-7")
