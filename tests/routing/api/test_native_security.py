"""Keys, scopes, ownership, rate limits and size limits of the completions API (in process)."""

from __future__ import annotations

import json
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from muse_experiments.api.auth import api_key_create, api_key_revoke, digest_key
from muse_experiments.api.throttling import sliding_wait_s
from muse_experiments.experiments.models import ApiKey
from routing.jobs import completion_job_create
from routing.models import CompletionJob

pytestmark = pytest.mark.django_db

VALID = {"session_id": "s-1", "user_id": "u-1", "messages": [{"role": "user", "content": "hi"}]}


def client_for(raw: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


def test_a_key_sees_only_its_own_jobs():
    mine, my_raw = api_key_create(name="mine", scopes=["completions"])
    theirs, _ = api_key_create(name="theirs", scopes=["completions"])
    job, _ = completion_job_create(
        api_key=theirs, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []}
    )
    own, _ = completion_job_create(
        api_key=mine, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []}
    )
    client = client_for(my_raw)
    assert client.get(f"/api/v1/completions/{job.id}").status_code == 404
    response = client.get(f"/api/v1/completions/{own.id}")
    assert response.status_code == 200
    assert response.json()["id"] == str(own.id)


def test_the_create_api_key_command_prints_a_working_key_once_and_stores_only_its_digest():
    out, err = StringIO(), StringIO()
    call_command("create_api_key", "--name", "ci", "--scopes", "completions,events", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    key = ApiKey.objects.get(name="ci")
    assert raw.startswith(f"muse_{key.prefix}_")
    assert key.digest == digest_key(raw) and raw not in key.digest
    assert key.scopes == ["completions", "events"]
    assert raw not in err.getvalue()
    assert client_for(raw).get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 404
    with pytest.raises(CommandError, match="Unknown scopes"):
        call_command(
            "create_api_key", "--name", "x", "--scopes", "admin", stdout=StringIO(), stderr=StringIO()
        )
    with pytest.raises(CommandError, match="between 0 and 2147483647"):
        call_command(
            "create_api_key", "--name", "x", "--rate-limit", "99999999999999999999", stdout=StringIO(), stderr=StringIO()
        )  # fmt: skip


def test_a_revoked_key_is_refused():
    key, raw = api_key_create(name="k", scopes=["completions"])
    api_key_revoke(key=key)
    assert client_for(raw).get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 401


def test_a_cached_key_is_refused_once_revoked_after_the_configuration_refresh(
    settings, django_capture_on_commit_callbacks
):
    settings.CONFIG_REFRESH_INTERVAL_S = 0  # check the configuration version on every request
    key, raw = api_key_create(name="k", scopes=["completions"])
    client = client_for(raw)
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 404  # key now cached
    with django_capture_on_commit_callbacks(execute=True):
        api_key_revoke(key=key)
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 401


def test_a_scope_removed_in_the_admin_reaches_the_cached_key(
    settings, admin_client, django_capture_on_commit_callbacks
):
    settings.CONFIG_REFRESH_INTERVAL_S = 0
    key, raw = api_key_create(name="k", scopes=["completions", "events"])
    client = client_for(raw)
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            f"/admin/muse_experiments/apikey/{key.pk}/change/",
            {"name": "k", "scopes": '["events"]', "rate_limit_per_minute": 6000, "owner": ""},
        )
    assert response.status_code == 302, response.content[:2000]
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 403


def test_a_key_deleted_in_the_admin_is_refused_like_a_revoked_one(
    settings, admin_client, django_capture_on_commit_callbacks
):
    settings.CONFIG_REFRESH_INTERVAL_S = 0
    key, raw = api_key_create(name="gone", scopes=["completions", "events"])
    client = client_for(raw)
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 404  # key now cached
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/admin/muse_experiments/apikey/{key.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not ApiKey.objects.filter(pk=key.pk).exists()
    assert client.post("/api/v1/completions", VALID, format="json").status_code == 401
    assert client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_job_for_a_key_deleted_after_it_was_cached_is_a_401_not_a_500():
    """Within the refresh bound a process still holds the deleted key: a job written before its
    task is published (an id handed out for later) cannot reference it (the foreign key fails at
    commit), and the caller is told the key no longer exists. (A waiting caller's job is written by
    the worker, without the key: tests/routing/web/test_dispatch.py.)"""
    from rest_framework.exceptions import AuthenticationFailed

    from routing.web.dispatch import submit_completion

    key, _ = api_key_create(name="stale", scopes=["completions"])
    ApiKey.objects.filter(pk=key.pk).delete()  # as another process would, behind this one's cache
    with pytest.raises(AuthenticationFailed):
        submit_completion(
            api_key=key, session_id="s", user_id="u", subagent="", attributes={},
            request={"messages": [{"role": "user", "content": "x"}]}, durable=True,
        )  # fmt: skip
    assert not CompletionJob.objects.exists()


def test_a_key_over_its_rate_limit_gets_429_with_retry_after():
    _, raw = api_key_create(name="slow", scopes=["completions"], rate_limit_per_minute=3)
    client = client_for(raw)
    statuses = [client.get(f"/api/v1/completions/{uuid.uuid4()}").status_code for _ in range(4)]
    assert statuses == [404, 404, 404, 429]
    refused = client.get(f"/api/v1/completions/{uuid.uuid4()}")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 121


def test_the_sliding_window_wait_is_when_one_more_request_fits():
    # 10 per minute, 6 in the previous window, 4 in this one, 25% into it: 6*0.75+4 = 8.5 (+1 fits)
    assert sliding_wait_s(limit=10, current=4, previous=6, elapsed_fraction=0.25) == 0
    # 10 in the previous window, 5 now, 20% in: fits when 10*(1-f)+6 <= 10 → f = 0.6 → 24 s
    assert sliding_wait_s(limit=10, current=5, previous=10, elapsed_fraction=0.2) == pytest.approx(24.0)
    # full this window: next window at 48 s, then 10*(1-g)+1 <= 10 → g = 0.1 → +6 s
    assert sliding_wait_s(limit=10, current=10, previous=0, elapsed_fraction=0.2) == pytest.approx(54.0)


def test_an_oversize_body_is_a_413_with_a_clear_error(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    _, raw = api_key_create(name="k", scopes=["completions"])
    body = {**VALID, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = client_for(raw).post("/api/v1/completions", body, format="json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert not CompletionJob.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        "[1, 2]",
        '{"session_id": 5, "user_id": [], "messages": {}}',
        json.dumps({**VALID, "stream": True, "async": True}),
        json.dumps(
            {
                **VALID,
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "c", "name": "n", "arguments": "x"}]}
                ],
            }
        ),
        json.dumps({**VALID, "attributes": {f"a{i}": i for i in range(65)}}),
        '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x"}], "attributes": {"x": Infinity}}',
        # a number that overflows a float is not a number we can store (SQLite's JSON_VALID and
        # PostgreSQL's jsonb both refuse inf): 400, not a 500 from the insert
        '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x"}], "attributes": {"n": 1e400}}',
        '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x"}],'
        ' "tools": [{"name": "f", "parameters": {"x": -1e400}}]}',
        # a lone surrogate has no UTF-8 encoding: no database can store it
        '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x"}], "attributes": {"plan": "\\udfff"}}',
        '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x\\ud800"}]}',
    ],
)
def test_malformed_completion_requests_are_400s_with_field_errors(body):
    _, raw = api_key_create(name="k", scopes=["completions"])
    response = client_for(raw).generic("POST", "/api/v1/completions", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] in ("invalid", "parse_error")
    assert not CompletionJob.objects.exists()


def test_a_lone_surrogate_is_a_400_naming_its_field_escaped():
    _, raw = api_key_create(name="k", scopes=["completions"])
    body = '{"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x"}], "attributes": {"p\\udfff": "x"}}'
    response = client_for(raw).generic("POST", "/api/v1/completions", body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["attributes.p\\udfff"]
    assert not CompletionJob.objects.exists()


@pytest.mark.redis
def test_the_redis_counter_counts_this_window_with_a_ttl_and_reads_the_previous_one(redis_url):
    import redis

    from muse_experiments.api.throttling import WINDOW_S, _RedisCounter

    client = redis.Redis.from_url(redis_url)
    current, previous = f"muse:rl:test-{uuid.uuid4().hex}:2", f"muse:rl:test-{uuid.uuid4().hex}:1"
    failures = f"muse:authfail:test-{uuid.uuid4().hex}"
    counter = _RedisCounter()
    assert counter.hit(current, previous, failures) == (1, 0, 0)  # no previous window yet
    client.set(previous, 7)
    assert counter.hit(current, previous, failures) == (2, 7, 0)
    assert 0 < client.ttl(current) <= 2 * WINDOW_S + 5
    counter.undo(current)
    assert int(client.get(current)) == 1
    # the client's address at its failure limit: refused for the counter's remaining time, not counted
    client.set(failures, 20, px=30_000)
    _, _, refused_s = counter.hit(current, previous, failures)
    assert 29 < refused_s <= 30 and int(client.get(current)) == 1
    client.delete(current, previous, failures)


def _counted(redis_url: str, prefix: str) -> int:
    """This minute's count of requests for the key with ``prefix`` (``muse_experiments.api.throttling``)."""
    import time

    import redis

    from muse_experiments.api.throttling import WINDOW_S

    value = redis.Redis.from_url(redis_url).get(f"muse:rl:{prefix}:{int(time.time() // WINDOW_S)}")
    return int(value or 0)


@pytest.mark.redis
def test_a_drop_in_call_over_its_limit_is_refused_and_dispatches_nothing(redis_url):
    from muse_experiments.infra.redis_client import redis_client

    key, raw = api_key_create(name="dropin-slow", scopes=["completions"], rate_limit_per_minute=1)
    client = client_for(raw)
    queued = redis_client().llen("completions")
    chat = {"model": "muse-default", "messages": [{"role": "user", "content": "hi"}]}
    # the one admitted request of the minute: an invalid body, a 400 (counted, as before)
    assert client.post("/v1/chat/completions", {"messages": []}, format="json").status_code == 400
    assert _counted(redis_url, key.prefix) == 1
    # a valid call over the limit: refused before any job exists
    refused = client.post("/v1/chat/completions", chat, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert 1 <= int(refused["retry-after"]) <= 121
    assert not CompletionJob.objects.exists()
    assert redis_client().llen("completions") == queued  # no task published
    # over the limit with an invalid body: refused (the throttle runs before validation), not counted
    assert client.post("/v1/chat/completions", {"messages": []}, format="json").status_code == 429
    assert _counted(redis_url, key.prefix) == 1
    # Anthropic's endpoint shares the rule
    messages = {"model": "muse-default", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/messages", messages, format="json").status_code == 429


@pytest.mark.redis
def test_any_api_view_answers_429_over_the_limit_and_counts_only_what_it_admits(redis_url, rf):
    from rest_framework.response import Response
    from rest_framework.views import APIView

    class Forgetful(APIView):
        def get(self, request):
            return Response({"ok": True})  # does nothing about the limit itself

    key, raw = api_key_create(name="forgetful", scopes=["completions"], rate_limit_per_minute=1)
    view = Forgetful.as_view()
    statuses = [view(rf.get("/", HTTP_AUTHORIZATION=f"Bearer {raw}")).status_code for _ in range(3)]
    assert statuses == [200, 429, 429]
    assert _counted(redis_url, key.prefix) == 1


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "*/*"])
def test_the_drop_ins_answer_json_whatever_accept_says_as_the_vendors_do(accept):
    _, raw = api_key_create(name="accept", scopes=["completions"])
    client = client_for(raw)
    chat = client.post("/v1/chat/completions", {"messages": []}, format="json", HTTP_ACCEPT=accept)
    assert chat.status_code == 400
    assert chat["Content-Type"] == "application/json"
    assert chat.json()["error"]["param"] == "model"
    messages = client.post("/v1/messages", {"messages": []}, format="json", HTTP_ACCEPT=accept)
    assert messages.status_code == 400 and messages["Content-Type"] == "application/json"
    assert messages.json()["type"] == "error"
    # our own API still negotiates: an Accept it cannot serve is DRF's 406
    ours = client.post("/api/v1/completions", {}, format="json", HTTP_ACCEPT=accept)
    assert ours.status_code == (406 if accept == "application/xml" else 400)
