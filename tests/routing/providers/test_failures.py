"""Failure scenarios -> error classes, exactly one upstream call each, and no leaked secrets."""

from __future__ import annotations

import json
import logging
import traceback

import pytest

from routing.providers import (
    AuthFailed,
    BadResponse,
    ClientRequestError,
    CompletionRequest,
    ConnectionFailed,
    Message,
    RateLimited,
    StreamFailed,
    UpstreamTimeout,
    UpstreamUnavailable,
    client_for,
)
from tests.routing.conftest import ALL_ENDPOINTS, CANARY_KEY, MODELS


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


REQ = CompletionRequest(messages=(Message("user", "hello there friend"),))

FAILURES = [
    ("rate_limit", RateLimited, 429, True),
    ("server_error", UpstreamUnavailable, 500, True),
    ("unavailable", UpstreamUnavailable, 503, True),
    ("overloaded", UpstreamUnavailable, 529, True),
    ("bad_request", ClientRequestError, 400, False),
    ("auth", AuthFailed, 401, False),
    ("timeout", UpstreamTimeout, None, True),
    ("reset", ConnectionFailed, None, True),
    ("malformed", BadResponse, None, True),
]


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
@pytest.mark.parametrize(("failure", "cls", "status", "retryable"), FAILURES, ids=[f[0] for f in FAILURES])
def test_complete_failure_mapping(fake, endpoint_factory, name, failure, cls, status, retryable):
    fake.set_scenario(MODELS[name], failure=failure, retry_after_s=7, hang_ms=3000)
    ep = endpoint_factory(name, timeout_s=0.25)
    with pytest.raises(cls) as info:
        client_for(ep).complete(ep, REQ)
    err = info.value
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.status_code == status
    assert err.endpoint_id == ep.public_id and err.provider_kind == ep.provider_kind
    if failure == "rate_limit":
        assert err.retry_after_s == 7.0
    if failure == "overloaded" and name == "anthropic":
        assert err.error_type == "overloaded_error"
    if status is not None:
        assert err.upstream_request_id == fake.calls()[0]["request_id"]
    assert err.__suppress_context__ and err.__cause__ is None  # SDK exception not chained
    assert fake.call_count(MODELS[name]) == 1  # no retries in the client layer


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_fail_first_n_then_success(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], failure="unavailable", fail_first_n=2)
    ep = endpoint_factory(name)
    client = client_for(ep)
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            client.complete(ep, REQ)
    assert client.complete(ep, REQ).text
    assert fake.call_count(MODELS[name]) == 3


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_unknown_model_is_client_error(fake, endpoint_factory, name):
    ep = endpoint_factory(name, upstream_model="no-such.model_1")
    with pytest.raises(ClientRequestError) as info:
        client_for(ep).complete(ep, REQ)
    assert info.value.status_code == 404 and not info.value.retryable
    assert fake.call_count("no-such.model_1") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_auth_failure_never_leaks_the_key(fake, endpoint_factory, name, stream, caplog):
    caplog.set_level(logging.DEBUG)
    ep = endpoint_factory(name, credential=CANARY_KEY)
    client = client_for(ep)
    with pytest.raises(AuthFailed) as info:
        if stream:
            list(client.stream(ep, REQ))
        else:
            client.complete(ep, REQ)
    err = info.value
    rendered = [
        str(err),
        repr(err),
        json.dumps(err.to_public_dict()),
        "".join(traceback.format_exception(err)),
        caplog.text,
        repr(ep),
    ]
    for text in rendered:
        assert CANARY_KEY not in text
        assert "canary" not in text  # not even a partial/masked form
    assert err.status_code == 401 and not err.retryable
    assert fake.call_count(MODELS[name]) == 1


# ---- streaming failures ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_in_stream_error_after_content_yields_error_event(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], failure="stream_error", stream_error_after=2)
    ep = endpoint_factory(name)
    events = list(client_for(ep).stream(ep, REQ))
    assert [e.kind for e in events] == ["text_delta", "text_delta", "error"]
    err = events[-1].error
    assert isinstance(err, StreamFailed)
    assert err.after_content is True and err.retryable is False
    assert err.cause_class == "UpstreamUnavailable"
    assert events[-1].to_public_dict()["error"]["after_content"] is True
    assert fake.call_count(MODELS[name]) == 1


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_in_stream_error_before_content_is_raised_and_retryable(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], failure="stream_error", stream_error_after=0)
    ep = endpoint_factory(name)
    with pytest.raises(StreamFailed) as info:
        list(client_for(ep).stream(ep, REQ))
    assert info.value.after_content is False and info.value.retryable is True
    assert fake.call_count(MODELS[name]) == 1


def test_responses_response_failed_event(fake, endpoint_factory):
    fake.set_scenario(MODELS["openai_responses"], failure="stream_error", stream_error_kind="response.failed")
    ep = endpoint_factory("openai_responses")
    events = list(client_for(ep).stream(ep, REQ))
    assert events[-1].kind == "error" and events[-1].error.error_type == "server_error"


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_stream_connection_reset_mid_stream(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], failure="stream_reset", stream_error_after=1)
    ep = endpoint_factory(name)
    events = list(client_for(ep).stream(ep, REQ))
    assert events[-1].kind == "error"
    err = events[-1].error
    assert isinstance(err, StreamFailed) and err.after_content and err.cause_class == "ConnectionFailed"
    assert fake.call_count(MODELS[name]) == 1


@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_stream_malformed_data(fake, endpoint_factory, name):
    fake.set_scenario(MODELS[name], failure="malformed", stream_error_after=1)
    ep = endpoint_factory(name)
    events = list(client_for(ep).stream(ep, REQ))
    assert events[-1].kind == "error"
    assert events[-1].error.cause_class == "BadResponse"


@pytest.mark.parametrize(("failure", "cls"), [("rate_limit", RateLimited), ("timeout", UpstreamTimeout)])
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_stream_pre_response_failures_are_raised(fake, endpoint_factory, name, failure, cls):
    fake.set_scenario(MODELS[name], failure=failure, retry_after_s=2, hang_ms=3000)
    ep = endpoint_factory(name, timeout_s=0.25)
    with pytest.raises(cls) as info:
        list(client_for(ep).stream(ep, REQ))
    assert info.value.retryable
    assert fake.call_count(MODELS[name]) == 1


# ---- upstream error text is sanitised -------------------------------------------------------

FERNET = "gAAAAABnCANARYCANARYCANARYCANARYCANARY12345"
LEAKY_MESSAGES = {
    "reasoning": f"upstream boom encrypted_content={FERNET} api-key=demo-azure-LEAKCANARY",
    "credential": "upstream boom: key {key} (also api-key=demo-azure-LEAKCANARY) is over quota",
    "item_id": "Item with id 'rs_68a1c0ffee0123456789abcd' not found. Authorization: Bearer LEAKCANARY99",
}
LEAK_CANARIES = (FERNET, "CANARYCANARY", "LEAKCANARY", "rs_68a1c0ffee")


def _leaky_error(fake, model: str, message: str, status: int) -> None:
    """``model`` fails with ``message``: an HTTP ``status`` error body, or as an in-stream error
    event (``event: error``, as Azure/Anthropic send it) when streamed."""
    error = {"type": "error", "error": {"message": message, "type": "server_error", "code": "server_error"}}
    fake.set_scenario(
        model,
        wire=[{"json": error, "event": "error"}],
        wire_body={"error": {"message": message, "type": "server_error", "code": "server_error"}},
        wire_status=status,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [400, 500])
@pytest.mark.parametrize("case", sorted(LEAKY_MESSAGES))
@pytest.mark.parametrize("name", ALL_ENDPOINTS)
def test_upstream_error_text_never_carries_credentials_or_reasoning(
    fake, endpoint_factory, name, case, status, stream, caplog
):
    caplog.set_level(logging.DEBUG)
    ep = endpoint_factory(name)
    key = ep.credential.reveal()
    _leaky_error(fake, MODELS[name], LEAKY_MESSAGES[case].replace("{key}", key), status)
    client = client_for(ep)
    expected = (StreamFailed, UpstreamUnavailable) if stream else UpstreamUnavailable
    with pytest.raises(expected if stream or status == 500 else ClientRequestError) as info:
        if stream:
            list(client.stream(ep, REQ))
        else:
            client.complete(ep, REQ)
    err = info.value
    rendered = "\n".join(
        [
            str(err),
            repr(err),
            json.dumps(err.to_public_dict()),
            "".join(traceback.format_exception(err)),
            caplog.text,
        ]
    )
    assert [c for c in (*LEAK_CANARIES, key, key[:-4], key[4:]) if c in rendered] == [], rendered
    assert err.message.startswith(f"{ep.provider_kind} endpoint {ep.public_id}: ")
    assert len(err.message) <= 500
    assert err.error_type == "server_error"  # the provider's error type is kept
    if not stream:
        assert err.status_code == status
    if case == "reasoning":
        assert "details withheld" in err.message and "upstream boom" not in err.message
    else:
        assert "upstream boom" in err.message or "not found" in err.message


# -- A 200 whose JSON is not a chat completion: read field by field, never a crash ----------------


class _CannedAnswer:
    """A real HTTP server on 127.0.0.1 that answers every POST with ``body`` (JSON text, 200)."""

    def __init__(self, body: str) -> None:
        import http.server
        import threading

        canned = body.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("x-request-id", "req-canned")
                self.send_header("content-length", str(len(canned)))
                self.end_headers()
                self.wfile.write(canned)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_CHOICE = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ('["not", "an", "object"]', "completion without choices"),
        ('{"id": "x", "choices": []}', "completion without choices"),
        ('{"choices": "none"}', "completion without choices"),
        ('{"choices": [{"index": 0, "message": "hi"}]}', "completion choice without a message"),
        (
            json.dumps({"choices": [{**_CHOICE, "message": {"tool_calls": {"id": "c"}}}]}),
            "tool_calls is not a list",
        ),
        (
            json.dumps(
                {
                    "choices": [
                        {**_CHOICE, "message": {"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}}
                    ]
                }
            ),
            "a tool call without a function name",
        ),
        (
            json.dumps({"choices": [{**_CHOICE, "message": {"tool_calls": [{"id": "c", "function": "f"}]}}]}),
            "a tool call without a function name",
        ),
        (
            json.dumps({"choices": [{**_CHOICE, "message": {"content": [{"type": "text", "text": "hi"}]}}]}),
            "message content is not text",
        ),
        (json.dumps({"choices": [_CHOICE], "usage": "12 tokens"}), "usage is not an object"),
        (
            json.dumps({"choices": [_CHOICE], "usage": {"prompt_tokens": "12", "completion_tokens": 3}}),
            "usage holds a token count that is not a whole number",
        ),
        (
            json.dumps({"choices": [_CHOICE], "usage": {"prompt_tokens": 12, "completion_tokens": -1}}),
            "usage holds a token count that is not a whole number",
        ),
        (
            json.dumps({"choices": [_CHOICE], "usage": {"prompt_tokens": 1, "prompt_tokens_details": [3]}}),
            "usage.prompt_tokens_details is not an object",
        ),
    ],
)
def test_a_chat_answer_that_is_json_but_not_a_completion_is_a_bad_response(endpoint_factory, body, what):
    server = _CannedAnswer(body)
    try:
        ep = endpoint_factory("native", base_url=f"{server.url}/v1")
        with pytest.raises(BadResponse) as info:
            client_for(ep).complete(ep, REQ)
    finally:
        server.close()
    err = info.value
    assert str(err) == f"{ep.public_id}: {what}"
    assert err.retryable is True and err.status_code is None
    assert err.endpoint_id == ep.public_id and err.provider_kind == ep.provider_kind
    assert err.upstream_request_id == "req-canned"


def test_a_chat_answer_is_read_from_its_json_with_tool_calls_usage_and_request_id(endpoint_factory):
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                        },
                        {"id": "call_2", "type": "custom"},
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 10},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
    server = _CannedAnswer(json.dumps(body))
    try:
        ep = endpoint_factory("native", base_url=f"{server.url}/v1")
        result = client_for(ep).complete(ep, REQ)
    finally:
        server.close()
    assert result.text == ""
    assert [(c.id, c.name, dict(c.arguments)) for c in result.tool_calls] == [
        ("call_1", "lookup", {"q": "x"})
    ]
    assert result.finish_reason == "tool_calls"
    assert (result.usage.input_tokens, result.usage.cached_input_tokens, result.usage.output_tokens) == (
        30,
        10,
        7,
    )
    assert result.usage.reasoning_tokens == 2
    assert result.upstream_request_id == "req-canned"


def test_a_chat_answer_without_some_usage_counts_bills_them_as_zero(endpoint_factory):
    server = _CannedAnswer(json.dumps({"choices": [_CHOICE], "usage": {"prompt_tokens": 5}}))
    try:
        ep = endpoint_factory("native", base_url=f"{server.url}/v1")
        result = client_for(ep).complete(ep, REQ)
    finally:
        server.close()
    assert result.text == "hi" and result.finish_reason == "stop"
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.reasoning_tokens) == (5, 0, 0)
