"""The completions API refuses bad input with field errors and enforces keys and scopes."""

from __future__ import annotations

import json
import uuid

import pytest
from rest_framework.test import APIClient

from routing.models import CompletionJob
from tests.factories import api_key

pytestmark = pytest.mark.django_db

VALID = {
    "session_id": "s-1",
    "user_id": "u-1",
    "subagent": "coder",
    "messages": [{"role": "user", "content": "hello"}],
}


@pytest.fixture
def client():
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key()}")
    return c


def post_raw(client, body: str):
    return client.generic("POST", "/api/v1/completions", body, content_type="application/json")


def test_missing_fields_are_named_in_a_400(client):
    response = client.post("/api/v1/completions", {"messages": []}, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert set(fields) >= {"session_id", "user_id", "messages"}
    assert fields["session_id"] == ["This field is required."]


def test_bad_json_is_a_400_not_a_500(client):
    response = post_raw(client, '{"session_id": "s-1", ')
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_nan_in_json_is_refused(client):
    response = post_raw(client, json.dumps(VALID)[:-1] + ', "attributes": {"score": NaN}}')
    assert response.status_code == 400


def test_unknown_fields_are_refused_by_name(client):
    response = client.post("/api/v1/completions", {**VALID, "temprature": 0.2}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"temprature": ["Unknown field."]}


def test_wrong_types_are_field_errors(client):
    body = {**VALID, "messages": [{"role": "wizard", "content": 3}], "tools": "search"}
    response = client.post("/api/v1/completions", body, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert "role" in fields["messages"]["0"]
    assert "tools" in fields


def test_json_values_of_the_wrong_type_are_refused_not_coerced(client):
    """DRF alone stores ``123`` as ``"123"`` and reads ``"yes"`` as true: each is a field error here."""
    body = {
        **VALID,
        "session_id": 123,
        "async": "yes",
        "stream": 1,
        "messages": [{"role": "user", "content": 3}],
    }
    response = client.post("/api/v1/completions", body, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert fields["session_id"] == ["Must be a JSON string."]
    assert fields["async"] == fields["stream"] == ["Must be a JSON boolean (true or false)."]
    assert fields["messages"]["0"]["content"] == ["Must be a JSON string."]


def test_tool_messages_need_a_tool_call_id(client):
    body = {**VALID, "messages": [{"role": "tool", "content": "42"}]}
    response = client.post("/api/v1/completions", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["messages"]["0"] == {
        "tool_call_id": ["Required for role 'tool'."]
    }


def test_a_tool_schema_no_provider_accepts_is_a_field_error(client):
    tool = {"name": "g", "parameters": {"type": "object", "properties": "x"}}
    response = client.post("/api/v1/completions", {**VALID, "tools": [tool]}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["tools"]["0"] == {
        "parameters": [
            "parameters.properties: properties must be an object mapping each parameter to its schema."
        ]
    }


def test_requests_without_a_key_get_401():
    response = APIClient().post("/api/v1/completions", VALID, format="json")
    assert response.status_code == 401


def test_a_revoked_or_forged_key_gets_401():
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION="Bearer muse_deadbeef_not-a-real-key")
    assert c.post("/api/v1/completions", VALID, format="json").status_code == 401


def test_a_key_without_the_scope_gets_403():
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['events'])}")
    assert c.post("/api/v1/completions", VALID, format="json").status_code == 403


def test_an_unknown_job_is_a_404(client):
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 404


def test_results_of_an_unknown_experiment_are_a_404(client):
    response = client.get("/api/v1/experiments/no-such-experiment/results")
    assert response.status_code == 404


def test_json_nested_absurdly_deep_is_a_400_not_a_crash(client):
    deep = "[" * 5000 + "]" * 5000
    response = post_raw(client, '{"session_id": "s", "user_id": "u", "attributes": {"x": ' + deep + "}}")
    assert response.status_code == 400
    assert "nested" in response.json()["error"]["message"]


def test_json_deeper_than_the_limit_is_refused_even_when_python_could_parse_it(client):
    deep = "[" * 100 + "]" * 100
    response = post_raw(client, '{"session_id": "s", "user_id": "u", "attributes": {"x": ' + deep + "}}")
    assert response.status_code == 400
    assert "64 levels" in response.json()["error"]["message"]


def test_reusing_an_idempotency_key_with_a_different_request_is_a_422(client):
    first = client.post(
        "/api/v1/completions", {**VALID, "idempotency_key": "k-1", "async": True}, format="json"
    )
    assert first.status_code == 202
    again = client.post(
        "/api/v1/completions", {**VALID, "idempotency_key": "k-1", "async": True}, format="json"
    )
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    other = {**VALID, "messages": [{"role": "user", "content": "something else"}]}
    conflict = client.post(
        "/api/v1/completions", {**other, "idempotency_key": "k-1", "async": True}, format="json"
    )
    assert conflict.status_code == 422
    assert conflict.json()["error"]["code"] == "idempotency_conflict"


def test_the_idempotency_key_header_works_as_the_body_field_does(client):
    body = {**VALID, "async": True}
    first = client.post("/api/v1/completions", body, format="json", HTTP_IDEMPOTENCY_KEY="h-1")
    again = client.post("/api/v1/completions", body, format="json", HTTP_IDEMPOTENCY_KEY="h-1")
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    same = client.post("/api/v1/completions", {**body, "idempotency_key": "h-1"}, format="json")
    assert same.json()["id"] == first.json()["id"]
    other = {**body, "messages": [{"role": "user", "content": "something else"}]}
    conflict = client.post("/api/v1/completions", other, format="json", HTTP_IDEMPOTENCY_KEY="h-1")
    assert conflict.status_code == 422


def test_an_idempotency_key_header_that_differs_from_the_body_field_is_a_400(client):
    response = client.post(
        "/api/v1/completions",
        {**VALID, "async": True, "idempotency_key": "body-key"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="header-key",
    )
    assert response.status_code == 400
    assert "idempotency_key" in response.json()["error"]["fields"]
    assert CompletionJob.objects.count() == 0


def test_unknown_api_paths_answer_404_in_the_api_error_shape(client):
    response = client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "No such endpoint."}}


@pytest.mark.parametrize("job_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "1234", "%20"])
def test_a_malformed_or_unknown_completion_id_is_the_apis_404_not_no_such_endpoint(client, job_id):
    response = client.get(f"/api/v1/completions/{job_id}")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "No such completion."}}
    assert APIClient().get(f"/api/v1/completions/{job_id}").status_code == 401  # authenticated first


_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL = {"type": "function", "function": {"name": "weather", "parameters": _PARAMETERS}}
RESPONSES_TOOL = {"type": "function", "name": "weather", "parameters": _PARAMETERS}
ANTHROPIC_TOOL = {"name": "weather", "input_schema": _PARAMETERS}
NAMED_CHAT = {"type": "function", "function": {"name": "nope"}}


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"max_tokens": -5}, "max_tokens"),
        ("/v1/chat/completions", {"max_completion_tokens": True}, "max_completion_tokens"),
        ("/v1/chat/completions", {"temperature": 2.5}, "temperature"),
        ("/v1/chat/completions", {"top_p": "0.9"}, "top_p"),
        ("/v1/responses", {"max_output_tokens": 0}, "max_output_tokens"),
        ("/v1/messages", {"temperature": 1.5}, "temperature"),
        ("/v1/messages", {"top_k": -1}, "top_k"),
        ("/v1/chat/completions", {"max_tokens": 10**12}, "max_tokens"),
        ("/v1/responses", {"max_output_tokens": 2**21}, "max_output_tokens"),
        ("/v1/messages", {"max_tokens": 10**12}, "max_tokens"),
        ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 1e20}}, "thinking.budget_tokens"),
        ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking.budget_tokens"),
        ("/v1/messages", {"thinking": {"type": "on"}}, "thinking.type"),
        ("/v1/chat/completions", {"tool_choice": "required"}, "tool_choice"),
        ("/v1/chat/completions", {"tool_choice": "sometimes"}, "tool_choice"),
        ("/v1/chat/completions", {"tools": [TOOL], "tool_choice": NAMED_CHAT}, "tool_choice"),
        (
            "/v1/responses",
            {"tools": [RESPONSES_TOOL], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice",
        ),
        ("/v1/messages", {"tool_choice": {"type": "any"}}, "tool_choice"),
        (
            "/v1/messages",
            {"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "nope"}},
            "tool_choice",
        ),
        ("/v1/messages", {"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ],
)
def test_sampling_parameters_the_variant_overrides_are_still_held_to_the_providers_ranges(
    client, path, extra, param
):
    """They are ignored (the experiment variant decides) but a client's bug is a 400 here, as it
    would be upstream, rather than silently accepted."""
    from routing.models import CompletionJob

    messages = [{"role": "user", "content": "hello"}]
    body = {
        "model": "muse-default",
        **({"input": "hello"} if path == "/v1/responses" else {"messages": messages}),
    }
    if path == "/v1/messages":
        body["max_tokens"] = 16
    response = client.post(path, {**body, **extra}, format="json", HTTP_X_MUSE_SESSION_ID="s-1")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error.get("param", param) == param and param in error["message"]
    assert CompletionJob.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/chat/completions", {"tools": [TOOL], "tool_choice": "required"}),
        (
            "/v1/chat/completions",
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "weather"}}},
        ),
        ("/v1/chat/completions", {"tool_choice": "none", "max_tokens": 1_048_576}),
        (
            "/v1/responses",
            {"tools": [RESPONSES_TOOL], "tool_choice": {"type": "function", "name": "weather"}},
        ),
        ("/v1/messages", {"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "weather"}}),
        (
            "/v1/chat/completions",
            {
                "tools": [TOOL],
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [TOOL]}},
            },
        ),
        (
            "/v1/responses",
            {
                "tools": [RESPONSES_TOOL],
                "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [RESPONSES_TOOL]},
            },
        ),
        (
            "/v1/messages",
            {"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
        ),
        ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 4096}),
        ("/v1/messages", {"tool_choice": {"type": "auto"}, "thinking": {"type": "disabled"}}),
    ],
)
def test_tool_choice_and_token_limits_the_provider_accepts_pass_validation(client, path, extra):
    from tests.factories import seed_catalogue

    seed_catalogue()  # a forced tool choice needs a model that can honour it (the default can)
    body = {
        "stream": True,  # answered at once (not read): only the validation is under test
        "model": "muse-default",
        **(
            {"input": "hello"}
            if path == "/v1/responses"
            else {"messages": [{"role": "user", "content": "hi"}]}
        ),
    }
    if path == "/v1/messages":
        body["max_tokens"] = 16
    body.update(extra)
    response = client.post(path, body, format="json", HTTP_X_MUSE_SESSION_ID="s-1")
    assert response.status_code == 200 and response.streaming
    response.close()


def test_a_tool_result_that_answers_no_earlier_tool_call_is_a_400(client):
    body = {
        "model": "muse-default",
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "tool", "tool_call_id": "call_unknown", "content": "25C"},
        ],
    }
    response = client.post("/v1/chat/completions", body, format="json", HTTP_X_MUSE_SESSION_ID="s-1")
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[1].tool_call_id"


@pytest.mark.parametrize(
    ("part", "field"), [({"type": "text"}, "text"), ({"type": "refusal", "text": "no"}, "refusal")]
)
def test_a_content_part_without_its_text_is_a_400_naming_it(client, part, field):
    body = {
        "model": "muse-default",
        "messages": [{"role": "assistant", "content": [part]}, {"role": "user", "content": "x"}],
    }
    response = client.post("/v1/chat/completions", body, format="json", HTTP_X_MUSE_SESSION_ID="s-1")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == f"messages[0].content[0].{field}"


def test_an_anonymous_call_retried_with_its_idempotency_key_gets_its_first_job():
    """An anonymous call's unit id is made fresh per request, so it is not part of what a retry
    must match: the retry returns the first job (it was a 422 every time)."""
    from routing.idempotency import IdempotencyConflict
    from routing.jobs import completion_job_create
    from routing.models import CompletionJob

    request = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "anonymous": True}
    first, created = completion_job_create(
        api_key=None, session_id="anon-1", user_id="anon-1", subagent="", attributes={},
        request=request, idempotency_key="k1",
    )  # fmt: skip
    again, created_again = completion_job_create(
        api_key=None, session_id="anon-2", user_id="anon-2", subagent="", attributes={},
        request=request, idempotency_key="k1",
    )  # fmt: skip
    assert (created, created_again, again.pk, again.session_id) == (True, False, first.pk, "anon-1")
    named = {**request, "anonymous": False}
    with pytest.raises(IdempotencyConflict):  # a named unit is still part of the request
        completion_job_create(
            api_key=None, session_id="s-2", user_id="u-2", subagent="", attributes={},
            request=named, idempotency_key="k1",
        )  # fmt: skip
    assert CompletionJob.objects.count() == 1


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/messages", {"metadata": "alice"}, "metadata"),
        ("/v1/messages", {"metadata": ["alice"]}, "metadata"),
        ("/v1/chat/completions", {"user": "bob", "metadata": {"user_id": 5}}, "metadata.user_id"),
        ("/v1/chat/completions", {"safety_identifier": 5}, "safety_identifier"),
        ("/v1/responses", {"safety_identifier": 5}, "safety_identifier"),
    ],
)
def test_every_identity_field_is_checked_on_every_drop_in(client, path, extra, param):
    from routing.models import CompletionJob

    body = {
        "model": "muse-default",
        **({"input": "hi"} if path == "/v1/responses" else {"messages": [{"role": "user", "content": "hi"}]}),
    }
    if path == "/v1/messages":
        body["max_tokens"] = 16
    response = client.post(path, {**body, **extra}, format="json")
    assert response.status_code == 400, response.content
    assert param in json.dumps(response.json())
    assert CompletionJob.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")],
)
def test_a_drop_in_idempotency_conflict_is_in_the_providers_error_shape(client, path, shape, settings):
    # the first, streamed request is left unread: no worker needed
    body = {"model": "muse-default", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    if path == "/v1/messages":
        body["max_tokens"] = 16
    headers = {"HTTP_IDEMPOTENCY_KEY": "idem-2", "HTTP_X_MUSE_SESSION_ID": "s-1"}
    assert client.post(path, body, format="json", **headers).status_code == 200
    other = {**body, "messages": [{"role": "user", "content": "something else"}]}
    response = client.post(path, other, format="json", **headers)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "already used with a different request" in error["message"]
    if shape == "anthropic":
        assert response.json()["type"] == "error"
    else:
        assert error["param"] == "Idempotency-Key"


@pytest.mark.parametrize("path", ["/api/v1/completions", "/v1/chat/completions"])
def test_a_number_too_long_to_convert_is_a_400_without_python_internals(client, path):
    response = client.generic(
        "POST", path, '{"max_tokens": ' + "9" * 5000 + "}", content_type="application/json"
    )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "more than 4300 digits" in message and "sys." not in message
