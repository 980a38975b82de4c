"""The fake upstream server, driven by the official SDKs and raw HTTP (httpx)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from routing.simulated import DEFAULT_API_KEYS, FakeUpstreams, Scenario
from tests.routing.conftest import API_VERSION, AZURE_DEPLOYMENT, AZURE_V1_DEPLOYMENT

OPENAI_KEY = DEFAULT_API_KEYS["openai"]
AZURE_KEY = DEFAULT_API_KEYS["azure"]
ANTHROPIC_KEY = DEFAULT_API_KEYS["anthropic"]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django config-cache fixture of tests/conftest.py so this
    file also runs with ``-p no:django``."""
    yield


def oa(fake, **kw) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{fake.url}/v1", api_key=kw.pop("api_key", OPENAI_KEY), max_retries=0, **kw
    )


def an(fake, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=fake.url, api_key=kw.pop("api_key", ANTHROPIC_KEY), max_retries=0, **kw
    )


def sse_payloads(text: str) -> list[tuple[str | None, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        event = None
        data = []
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((event, "\n".join(data)))
    return out


# ---- Chat Completions ------------------------------------------------------------------------


def test_chat_text_reply_usage_and_request_id(fake):
    fake.set_scenario(
        "gpt-4.1-mini", input_tokens=120, cached_tokens=100, output_tokens=9, reasoning_tokens=4
    )
    with oa(fake) as client:
        resp = client.chat.completions.with_raw_response.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "Hello there"}]
        )
        completion = resp.parse()
    assert completion.choices[0].message.content == "gpt-4.1-mini reply to: Hello there [quality=0.50]"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == 120
    assert completion.usage.prompt_tokens_details.cached_tokens == 100
    assert completion.usage.completion_tokens == 9
    assert completion.usage.completion_tokens_details.reasoning_tokens == 4
    assert resp.headers["x-request-id"] == fake.calls()[0]["request_id"]
    call = fake.calls(model="gpt-4.1-mini")[0]
    assert call["headers"]["authorization"] == "<redacted>"
    assert OPENAI_KEY not in json.dumps(fake.calls())


def test_chat_stream_parallel_tool_calls(fake):
    fake.set_scenario("gpt-4.1-mini", tool_calls="parallel")
    with oa(fake) as client:
        stream = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": "Paris"}],
            tools=[WEATHER_TOOL, TIME_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
        calls: dict[int, dict] = {}
        finish = usage = None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for tc in choice.delta.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"id": None, "name": None, "args": ""})
                    entry["id"] = tc.id or entry["id"]
                    entry["name"] = tc.function.name or entry["name"]
                    entry["args"] += tc.function.arguments or ""
    assert finish == "tool_calls"
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["args"]) == {"city": "Paris", "days": 1}
    assert json.loads(calls[1]["args"]) == {"tz": "Paris"}
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    events = fake.calls()[0]["stream_events"]
    assert events[-1] == "data: [DONE]\n\n"


def test_chat_no_tool_call_after_tool_result(fake):
    with oa(fake) as client:
        completion = client.chat.completions.create(
            model="gpt-4.1-mini",
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "Paris"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            ],
        )
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.tool_calls is None


def test_azure_chat_deployments_path(fake):
    with openai.AzureOpenAI(
        azure_endpoint=fake.url, api_key=AZURE_KEY, api_version=API_VERSION, max_retries=0
    ) as client:
        completion = client.chat.completions.create(
            model=AZURE_DEPLOYMENT, messages=[{"role": "user", "content": "x"}]
        )
    assert completion.model == AZURE_DEPLOYMENT
    call = fake.calls()[0]
    assert call["path"] == f"/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions"
    assert call["query"] == {"api-version": API_VERSION}
    assert call["headers"]["api-key"] == "<redacted>"


# ---- Responses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "include", "expect_blob"),
    [
        ("include", True, True),
        ("include", False, False),
        ("always", False, True),
        ("never", True, False),
    ],
)
def test_responses_encrypted_reasoning_modes(fake, mode, include, expect_blob):
    fake.set_scenario("o4-mini", reasoning=True, encrypted_reasoning=mode)
    kwargs = {"include": ["reasoning.encrypted_content"]} if include else {}
    with oa(fake) as client:
        resp = client.responses.create(model="o4-mini", input="hi", store=False, **kwargs)
    reasoning = resp.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].type == "summary_text"
    if expect_blob:
        assert reasoning.encrypted_content.startswith("gAAAAA")
    else:
        assert reasoning.encrypted_content is None
    assert resp.output_text == "o4-mini reply to: hi [quality=0.50]"


def test_azure_responses_dated_api_version_url(fake):
    fake.set_scenario(
        AZURE_DEPLOYMENT, input_tokens=50, cached_tokens=10, output_tokens=7, reasoning_tokens=3
    )
    with openai.AzureOpenAI(
        azure_endpoint=fake.url, api_key=AZURE_KEY, api_version=API_VERSION, max_retries=0
    ) as client:
        resp = client.responses.create(model=AZURE_DEPLOYMENT, input="hello")
    call = fake.calls()[0]
    assert call["method"] == "POST"
    assert call["path"] == "/openai/responses"
    assert call["query"] == {"api-version": API_VERSION}
    assert call["headers"]["api-key"] == "<redacted>" and "authorization" not in call["headers"]
    assert call["model"] == AZURE_DEPLOYMENT
    assert resp.usage.input_tokens == 50
    assert resp.usage.input_tokens_details.cached_tokens == 10
    assert resp.usage.output_tokens_details.reasoning_tokens == 3


def test_azure_responses_v1_base_url(fake):
    with openai.OpenAI(base_url=f"{fake.url}/openai/v1/", api_key=AZURE_KEY, max_retries=0) as client:
        resp = client.responses.create(model=AZURE_V1_DEPLOYMENT, input="hello")
    call = fake.calls()[0]
    assert (call["path"], call["query"], call["flavour"]) == ("/openai/v1/responses", {}, "azure_v1")
    assert resp.output_text.startswith(AZURE_V1_DEPLOYMENT)


def test_responses_stream_event_names_and_sequence_numbers(fake):
    fake.set_scenario("o4-mini", reasoning=True, tool_calls="parallel")
    with oa(fake) as client:
        stream = client.responses.create(
            model="o4-mini",
            input="Rome",
            tools=[{"type": "function", **WEATHER_TOOL["function"]}],
            include=["reasoning.encrypted_content"],
            store=False,
            stream=True,
        )
        events = list(stream)
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1].response
    kinds = [item.type for item in completed.output]
    assert kinds == ["reasoning", "function_call", "function_call"]
    done_reasoning = next(
        e.item for e in events if e.type == "response.output_item.done" and e.item.type == "reasoning"
    )
    assert done_reasoning.encrypted_content == completed.output[0].encrypted_content
    # SSE framing: every event has an `event:` line equal to its JSON type.
    for event, data in sse_payloads("".join(fake.calls()[0]["stream_events"])):
        assert event == json.loads(data)["type"]


def test_responses_text_stream_deltas_concatenate(fake):
    with oa(fake) as client:
        events = list(client.responses.create(model="o4-mini", input="one two three", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "o4-mini reply to: one two three [quality=0.50]"
    assert events[-1].response.output_text == text


# ---- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_blocks_usage_and_request_id(fake):
    fake.set_scenario(
        "claude-sonnet-4-6",
        reasoning=True,
        redacted_thinking=True,
        thinking_text="",
        input_tokens=1000,
        cached_tokens=300,
        cache_write_tokens=200,
        output_tokens=40,
    )
    with an(fake) as client:
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-4-6",
            max_tokens=256,
            messages=[{"role": "user", "content": "Oslo"}],
            tools=[{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}],
        )
        msg = raw.parse()
    assert [b.type for b in msg.content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert msg.content[0].thinking == "" and msg.content[0].signature
    assert msg.content[1].data
    assert msg.content[3].input == {"city": "Oslo", "days": 1}
    assert msg.stop_reason == "tool_use"
    assert (
        msg.usage.input_tokens,
        msg.usage.cache_read_input_tokens,
        msg.usage.cache_creation_input_tokens,
    ) == (
        500,
        300,
        200,
    )
    assert raw.headers["request-id"].startswith("req_")
    call = fake.calls()[0]
    assert call["headers"]["anthropic-version"]
    assert call["headers"]["authorization"] == "<redacted>"


def test_anthropic_x_api_key_header_accepted(fake):
    resp = httpx.post(
        f"{fake.url}/v1/messages",
        headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"},
        json={
            "model": "claude-sonnet-4-6",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert resp.status_code == 200
    assert resp.json()["content"][0]["text"].startswith("claude-sonnet-4-6 reply to: hi")
    assert fake.calls()[0]["headers"]["x-api-key"] == "<redacted>"


def test_anthropic_stream_event_sequence(fake):
    fake.set_scenario("claude-sonnet-4-6", reasoning=True, redacted_thinking=True)
    with an(fake) as client:
        events = list(
            client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=256,
                messages=[{"role": "user", "content": "Oslo"}],
                tools=[{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}],
                stream=True,
            )
        )
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    delta_types = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert delta_types == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "redacted_thinking", "text", "tool_use"]
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "Oslo", "days": 1}


def test_anthropic_in_stream_error_event(fake):
    fake.set_scenario("claude-sonnet-4-6", failure="stream_error", stream_error_after=1)
    with an(fake) as client, pytest.raises(anthropic.APIStatusError) as info:
        for _ in client.messages.create(
            model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    assert info.value.type == "overloaded_error"


# ---- auth / routes / models ----------------------------------------------------------------------


def test_wrong_keys_get_401_in_each_provider_shape(fake):
    with oa(fake, api_key="sk-wrong-key-1234") as client, pytest.raises(openai.AuthenticationError) as e1:
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    assert e1.value.code == "invalid_api_key"
    assert "sk-wrong-key-1234" not in json.dumps(e1.value.body)
    with (
        openai.AzureOpenAI(
            azure_endpoint=fake.url, api_key="nope", api_version=API_VERSION, max_retries=0
        ) as client,
        pytest.raises(openai.AuthenticationError) as e2,
    ):
        client.responses.create(model=AZURE_DEPLOYMENT, input="x")
    assert e2.value.body["code"] == "401"
    with an(fake, api_key="sk-ant-wrong") as client, pytest.raises(anthropic.AuthenticationError) as e3:
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert e3.value.type == "authentication_error"
    assert [c["status"] for c in fake.calls()] == [401, 401, 401]
    assert not any(c["auth_ok"] for c in fake.calls())


def test_unknown_route_and_model_404(fake):
    r = httpx.post(f"{fake.url}/v1/nope", headers={"authorization": f"Bearer {OPENAI_KEY}"}, json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(
        f"{fake.url}/v1/nope",
        headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"},
        json={},
    )
    assert (
        r.status_code == 404
        and r.json()["type"] == "error"
        and r.json()["error"]["type"] == "not_found_error"
    )
    with oa(fake) as client, pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found"
    with an(fake) as client, pytest.raises(anthropic.NotFoundError):
        client.messages.create(
            model="claude-nope-1", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )


def test_anthropic_version_header_required(fake):
    r = httpx.post(
        f"{fake.url}/v1/messages",
        headers={"x-api-key": ANTHROPIC_KEY},
        json={"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": []},
    )
    assert r.status_code == 400


# ---- failures ------------------------------------------------------------------------------------


def test_rate_limit_retry_after_then_success(fake):
    fake.set_scenario("gpt-4.1-mini", failure="rate_limit", fail_first_n=2, retry_after_s=3)
    with oa(fake) as client:
        for _ in range(2):
            with pytest.raises(openai.RateLimitError) as info:
                client.chat.completions.create(
                    model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}]
                )
            assert info.value.response.headers["retry-after"] == "3"
        ok = client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    assert ok.choices[0].message.content
    assert [c["attempt"] for c in fake.calls()] == [1, 2, 3]
    assert [c["status"] for c in fake.calls()] == [429, 429, 200]


@pytest.mark.parametrize(
    ("failure", "status"), [("server_error", 500), ("unavailable", 503), ("overloaded", 529)]
)
def test_anthropic_5xx_shapes(fake, failure, status):
    fake.set_scenario("claude-sonnet-4-6", failure=failure)
    with an(fake) as client, pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.status_code == status
    if failure == "overloaded":
        assert isinstance(info.value, anthropic.OverloadedError)
        assert info.value.type == "overloaded_error"


def test_connection_reset_and_malformed_and_timeout(fake):
    fake.set_scenario("gpt-4.1-mini", failure="reset")
    with oa(fake) as client, pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    fake.set_scenario("gpt-4.1-mini", failure="malformed")
    with oa(fake) as client, pytest.raises(ValueError):
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    fake.set_scenario("gpt-4.1-mini", failure="timeout", hang_ms=3000)
    start = time.monotonic()
    with oa(fake, timeout=0.3) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    assert time.monotonic() - start < 2
    assert fake.call_count("gpt-4.1-mini") == 3


def test_latency_is_applied(fake):
    fake.set_scenario("gpt-4.1-mini", latency_ms=150)
    start = time.monotonic()
    with oa(fake) as client:
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])
    assert time.monotonic() - start >= 0.15


def test_reasoning_verification_rejects_unknown_blob(fake):
    with oa(fake) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="o4-mini",
            store=False,
            input=[
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAAforged"},
                {"role": "user", "content": "x"},
            ],
        )
    assert info.value.code == "invalid_encrypted_content"


# ---- control API, keep-alive, concurrency, CLI ---------------------------------------------------


def test_control_endpoints_over_http(fake):
    with httpx.Client(base_url=fake.url) as http:
        r = http.post("/_fake/scenarios", json={"model": "gpt-4.1-mini", "reply": "fixed", "quality": 0.9})
        assert r.status_code == 200
        assert r.json()["scenarios"]["gpt-4.1-mini"]["quality"] == 0.9
        r = http.post("/_fake/scenarios", json={"scenarios": {"o4-mini": {"failure": "unavailable"}}})
        assert r.json()["scenarios"]["o4-mini"]["failure"] == "unavailable"
        assert http.post("/_fake/scenarios", json={"model": "x", "bogus": 1}).status_code == 400
        with oa(fake) as client:
            c = client.chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}]
            )
        assert c.choices[0].message.content == "fixed"
        calls = http.get("/_fake/calls", params={"model": "gpt-4.1-mini"}).json()["calls"]
        assert len(calls) == 1 and calls[0]["body"]["messages"][0]["content"] == "x"
        assert http.get("/_fake/calls", params={"path": "/v1/responses"}).json()["calls"] == []
        assert http.get("/_fake/scenarios").json()["default"]["quality"] == 0.5
        assert http.post("/_fake/reset", json={}).status_code == 200
        assert http.get("/_fake/calls").json()["calls"] == []
        assert http.get("/_fake/health").json() == {"ok": True}


def test_keep_alive_connection_reuse_does_not_hang(fake):
    fake.set_scenario("gpt-4.1-mini", tool_calls="never")
    with oa(fake, timeout=5) as client:
        for i in range(15):
            if i % 3 == 0:
                list(
                    client.chat.completions.create(
                        model="gpt-4.1-mini", messages=[{"role": "user", "content": "s"}], stream=True
                    )
                )
            else:
                client.chat.completions.create(
                    model="gpt-4.1-mini", messages=[{"role": "user", "content": "n"}]
                )
    assert fake.call_count("gpt-4.1-mini") == 15


def test_concurrent_requests_are_all_recorded(fake):
    fake.set_scenario("gpt-4.1-mini", latency_ms=20)
    errors: list[BaseException] = []
    with oa(fake) as client:

        def worker():
            try:
                for _ in range(5):
                    client.chat.completions.create(
                        model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}]
                    )
            except openai.OpenAIError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    calls = fake.calls(model="gpt-4.1-mini")
    assert len(calls) == 40
    assert sorted(c["attempt"] for c in calls) == list(range(1, 41))


def test_scenario_validation():
    with pytest.raises(ValueError):
        Scenario(failure="explode")
    with pytest.raises(ValueError):
        FakeUpstreams(scenarios={"m": {"nope": 1}})


def test_stop_wakes_hanging_handlers():
    fake = FakeUpstreams(scenarios={"gpt-4.1-mini": {"failure": "timeout", "hang_ms": 60_000}})
    url = fake.start()

    def hang():
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=OPENAI_KEY, max_retries=0, timeout=10)
        with client, contextlib.suppress(openai.APIConnectionError):
            client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "x"}])

    t = threading.Thread(target=hang)
    t.start()
    deadline = time.monotonic() + 2
    while fake.call_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    fake.stop()
    t.join(timeout=5)
    assert not t.is_alive()
    assert time.monotonic() - start < 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_main_serves(tmp_path: Path):
    port = _free_port()
    scenarios = tmp_path / "s.json"
    scenarios.write_text(json.dumps({"demo-model": {"reply": "from cli", "quality": 0.8}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "routing.simulated", "--port", str(port), "--scenarios", str(scenarios)],
        cwd=Path(__file__).resolve().parents[3],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_fake/health", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers={"authorization": f"Bearer {OPENAI_KEY}"},
            json={"model": "demo-model", "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.json()["choices"][0]["message"]["content"] == "from cli"
    finally:
        proc.terminate()
        proc.wait(timeout=5)


# ---- where passed-back reasoning may stand (the real APIs' rules) ------------------------------

CLAUDE_TOOLS = [
    {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
]


def _claude_turns(client, fake):
    """Turn 1 (tool_use, with thinking) and turn 2 (text, with thinking): both message bodies."""
    fake.set_scenario("claude-sonnet-4-6", reasoning=True, tool_calls="auto")
    history = [{"role": "user", "content": "Oslo"}]
    first = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        messages=history,
        tools=CLAUDE_TOOLS,
        thinking={"type": "adaptive"},
    )
    one = [b.model_dump(exclude_none=True) for b in first.content]
    use = next(b for b in one if b["type"] == "tool_use")
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "9C"}]}
    history += [{"role": "assistant", "content": one}, result]
    second = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        messages=history,
        tools=CLAUDE_TOOLS,
        thinking={"type": "adaptive"},
    )
    return history, one, [b.model_dump(exclude_none=True) for b in second.content]


def test_anthropic_refuses_moved_reordered_or_dropped_thinking_in_the_latest_assistant_message(fake):
    with an(fake) as client:
        history, one, two = _claude_turns(client, fake)
        assert [c["outcome"] for c in fake.calls()] == ["ok", "ok"]  # placed right: accepted
        moved = [*history[:1], {"role": "assistant", "content": [two[0], *one[1:]]}, history[2]]
        reordered = [*history[:1], {"role": "assistant", "content": [*one[1:], one[0]]}, history[2]]
        dropped = [*history[:1], {"role": "assistant", "content": one[1:]}, history[2]]
        for messages, needle in (
            (moved, "cannot be modified"),
            (reordered, "cannot be modified"),
            (dropped, "must start with a thinking block"),
        ):
            with pytest.raises(anthropic.BadRequestError) as exc:
                client.messages.create(
                    model="claude-sonnet-4-6",
                    max_tokens=256,
                    messages=messages,
                    tools=CLAUDE_TOOLS,
                    thinking={"type": "adaptive"},
                )
            assert needle in exc.value.body["error"]["message"]
        # without thinking the same dropped history is accepted, as Anthropic documents
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=256, messages=dropped, tools=CLAUDE_TOOLS
        )


def test_responses_refuses_a_reasoning_item_away_from_the_item_it_came_with(fake):
    fake.set_scenario("o4-mini", reasoning=True, tool_calls="auto", encrypted_reasoning="always")
    tools = [{"type": "function", **WEATHER_TOOL["function"]}]
    with oa(fake) as client:
        first = client.responses.create(model="o4-mini", input="Oslo", tools=tools, store=False)
        rs, fc = (o.model_dump(exclude_none=True) for o in first.output)
        output = {"type": "function_call_output", "call_id": fc["call_id"], "output": "9C"}
        ok = [{"role": "user", "content": "Oslo"}, rs, fc, output]
        client.responses.create(model="o4-mini", input=ok, tools=tools, store=False)
        after_user = [rs, {"role": "user", "content": "Oslo"}, fc, output]
        without_reasoning = [{"role": "user", "content": "Oslo"}, fc, output]
        for items, needle in (
            (after_user, "of type 'reasoning' was provided without its required following item"),
            (
                without_reasoning,
                f"of type 'function_call' was provided without its required 'reasoning' item: '{rs['id']}'",
            ),
        ):
            with pytest.raises(openai.BadRequestError) as exc:
                client.responses.create(model="o4-mini", input=items, tools=tools, store=False)
            assert needle in exc.value.body["message"]


def test_the_simulated_upstream_answers_a_malformed_tool_schema_instead_of_crashing():
    from routing.simulated.plan import tool_arguments

    assert tool_arguments({"type": "object", "properties": "x"}, "hi") == {}
    assert tool_arguments({"properties": {"a": "string"}, "required": "a"}, "hi") == {"a": "hi"}
    assert tool_arguments({"properties": {"n": {"type": "integer"}}}, "hi") == {"n": 1}
    assert tool_arguments(None, "hi") == {}
