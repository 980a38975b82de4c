"""Failed API-key authentications: no database work, one path for every kind, refused per address.

Real PostgreSQL (or SQLite) and Redis, real requests through Django's test client. Timing is
measured by ``bench/bench_auth_failures.py``, not here.
"""

from __future__ import annotations

import ipaddress
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from muse_experiments.api.auth import api_key_create

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

ATTACKER, NEIGHBOUR = "203.0.113.7", "203.0.113.8"
CHAT = {"model": "muse-default", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "muse-default", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def _redis(redis_url):
    """Every test here has Redis (the shared counter); one turns it off to test the embedded default."""
    return redis_url


def job_url() -> str:
    return f"/api/v1/completions/{uuid.uuid4()}"


def get(raw: str, address: str = ATTACKER):
    return APIClient().get(job_url(), HTTP_AUTHORIZATION=f"Bearer {raw}", REMOTE_ADDR=address)


def wrong_secret(raw: str) -> str:
    """``raw`` with its prefix kept and its secret changed."""
    _, prefix, secret = raw.split("_", 2)
    return f"muse_{prefix}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}"


def unknown_prefix(raw: str) -> str:
    """``raw`` with a prefix no key has, and the same secret."""
    _, prefix, secret = raw.split("_", 2)
    return f"muse_{'f' if prefix[0] != 'f' else 'e'}{prefix[1:]}_{secret}"


def test_an_unknown_prefix_costs_no_database_query(settings):
    settings.CONFIG_REFRESH_INTERVAL_S = 60
    _, raw = api_key_create(name="k", scopes=["completions"])
    assert get(raw, NEIGHBOUR).status_code == 404  # the key snapshot is built (its one query)
    with CaptureQueriesContext(connection) as queries:
        refused = get(unknown_prefix(raw))
    assert refused.status_code == 401, refused.content
    assert refused.json()["error"]["message"] == "Invalid or revoked API key."
    assert [q["sql"] for q in queries.captured_queries] == []
    with CaptureQueriesContext(connection) as queries:
        assert APIClient().post(
            "/v1/chat/completions", CHAT, format="json", HTTP_AUTHORIZATION=f"Bearer {unknown_prefix(raw)}"
        ).status_code == 401  # fmt: skip
    assert [q["sql"] for q in queries.captured_queries] == []


def _lines_run(fn) -> list[tuple[str, int]]:
    """The lines of the project's authentication modules that ``fn()`` executes, in order."""
    root = Path(__file__).resolve().parents[3] / "muse_experiments"
    watched = {
        str(root / name) for name in ("api/auth.py", "api/auth_failures.py", "infra/config_version.py")
    }
    lines: list[tuple[str, int]] = []

    def tracer(frame, event, arg):
        if frame.f_code.co_filename not in watched:
            return None
        if event == "line":
            lines.append((Path(frame.f_code.co_filename).name, frame.f_lineno))
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return lines


def test_an_unknown_prefix_and_a_wrong_secret_run_the_same_code_and_queries(settings):
    settings.CONFIG_REFRESH_INTERVAL_S = 60
    _, raw = api_key_create(name="k", scopes=["completions"])
    assert get(raw, NEIGHBOUR).status_code == 404  # snapshot built
    assert get("muse_warm_up", NEIGHBOUR).status_code == 401  # the counting script is registered
    answers, queries, paths = {}, {}, {}
    for kind, bad in (("unknown", unknown_prefix(raw)), ("wrong", wrong_secret(raw))):
        with CaptureQueriesContext(connection) as captured:
            paths[kind] = _lines_run(lambda kind=kind, bad=bad: answers.__setitem__(kind, get(bad)))
        queries[kind] = [q["sql"] for q in captured.captured_queries]
    assert answers["unknown"].status_code == answers["wrong"].status_code == 401
    assert answers["unknown"].json() == answers["wrong"].json()
    assert queries["unknown"] == queries["wrong"] == []
    assert paths["unknown"] == paths["wrong"] and paths["unknown"]


def _refused_the_same_way(response, *, shape: str) -> None:
    assert response.status_code == 429, response.content
    assert 1 <= int(response["Retry-After"]) <= 61
    body = response.json()
    if shape == "api":
        assert body["error"]["code"] == "throttled"
        assert body["error"]["message"].startswith("Too many failed authentications from this address.")
    elif shape == "openai":
        assert body["error"]["type"] == "rate_limit_error"
    else:
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"


def test_twenty_failures_refuse_the_address_even_a_valid_key_and_not_its_neighbour(settings):
    settings.CONFIG_REFRESH_INTERVAL_S = 60
    _, raw = api_key_create(name="k", scopes=["completions"])
    assert get(raw, NEIGHBOUR).status_code == 404
    bad = [unknown_prefix(raw), wrong_secret(raw), "muse_nounderscores", "sk-not-a-muse-key"] * 5
    assert [get(b).status_code for b in bad] == [401] * 20
    with CaptureQueriesContext(connection) as queries:
        valid_from_attacker = get(raw)  # the 21st request: refused before any key lookup
        guess = get(unknown_prefix(raw))
    _refused_the_same_way(valid_from_attacker, shape="api")
    _refused_the_same_way(guess, shape="api")
    assert queries.captured_queries == []
    # the drop-ins refuse it too, in their vendors' shapes
    dropin = APIClient(HTTP_AUTHORIZATION=f"Bearer {raw}", REMOTE_ADDR=ATTACKER)
    _refused_the_same_way(dropin.post("/v1/chat/completions", CHAT, format="json"), shape="openai")
    _refused_the_same_way(dropin.post("/v1/messages", MESSAGES, format="json"), shape="anthropic")
    # another address is unaffected: its valid key works, its failures are its own 401s
    assert get(raw, NEIGHBOUR).status_code == 404
    assert get(wrong_secret(raw), NEIGHBOUR).status_code == 401


def test_an_address_refused_in_another_process_is_refused_here_with_no_new_round_trip(settings):
    """The count is shared through Redis: this process is made to forget what it learned (as
    another process never knew it), and the address is still refused, a valid key by its rate-limit
    script's reply (the same one round trip), a guess by its failure count."""
    from muse_experiments.api import auth_failures

    settings.CONFIG_REFRESH_INTERVAL_S = 60
    _, raw = api_key_create(name="k", scopes=["completions"])
    assert [get(wrong_secret(raw)).status_code for _ in range(20)] == [401] * 20
    auth_failures.forget_all()
    _refused_the_same_way(get(raw), shape="api")
    auth_failures.forget_all()
    _refused_the_same_way(get(unknown_prefix(raw)), shape="api")
    auth_failures.forget_all()
    dropin = APIClient(HTTP_AUTHORIZATION=f"Bearer {raw}", REMOTE_ADDR=ATTACKER)
    _refused_the_same_way(dropin.post("/v1/chat/completions", CHAT, format="json"), shape="openai")
    assert get(raw, NEIGHBOUR).status_code == 404


def test_a_request_that_authenticates_sends_redis_nothing_new(settings, monkeypatch):
    """Only failures count: an authenticated request's Redis traffic is what it was, its
    rate-limit script and the job's claim (the configuration version is not re-checked here)."""
    import redis

    settings.CONFIG_REFRESH_INTERVAL_S = 60
    _, raw = api_key_create(name="k", scopes=["completions"])
    assert get(raw).status_code == 404
    commands: list[str] = []
    real = redis.connection.AbstractConnection.send_packed_command  # TCP and Unix-socket connections

    def spy(self, command, check_health=True):
        packed = b"".join(command) if isinstance(command, list) else command
        commands.append(packed.split(b"\r\n")[2].decode())
        return real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", spy)
    assert get(raw).status_code == 404
    assert commands == ["EVALSHA", "HMGET"]


def test_failures_are_counted_in_a_window_and_refusals_are_not_counted(settings, redis_url):
    import redis

    from muse_experiments.api import auth_failures

    settings.AUTH_FAILURE_LIMIT = 3
    settings.AUTH_FAILURE_WINDOW_S = 30
    assert [get("muse_nope_x").status_code for _ in range(5)] == [401, 401, 401, 429, 429]
    client = redis.Redis.from_url(redis_url)
    key = auth_failures.counter_key(ATTACKER)
    assert int(client.get(key)) == 3  # the refused requests were not counted
    assert 0 < client.pttl(key) <= 30_000
    client.delete(key)
    auth_failures.forget_all()
    assert get("muse_nope_x").status_code == 401  # the window is over: counted afresh


def test_with_redis_unreachable_failures_fail_open_and_are_logged_once(settings, monkeypatch, caplog):
    import redis

    from muse_experiments.api import auth_failures

    settings.CONFIG_REFRESH_INTERVAL_S = 60
    settings.AUTH_FAILURE_LIMIT = 2
    assert get("muse_nope_x").status_code == 401  # snapshot built while Redis answers
    down = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.2, socket_connect_timeout=0.2)
    monkeypatch.setattr(auth_failures, "redis_client", lambda url=None: down)
    monkeypatch.setattr(auth_failures, "REDIS_RETRY_S", 0.0)  # ask Redis again on every failure
    with caplog.at_level("WARNING", logger="muse_experiments.api.auth_failures"):
        assert [get("muse_nope_x").status_code for _ in range(4)] == [401] * 4
    warnings = [r for r in caplog.records if r.name == "muse_experiments.api.auth_failures"]
    assert len(warnings) == 1 and "Redis unavailable" in warnings[0].getMessage()


def test_a_key_created_after_the_snapshot_works_once_the_version_moves(
    settings, django_capture_on_commit_callbacks
):
    """No database lookup on a miss: a new key is learnt from the snapshot, which its creation's
    version bump makes every process rebuild within ``CONFIG_REFRESH_INTERVAL_S``."""
    settings.CONFIG_REFRESH_INTERVAL_S = 0
    _, first = api_key_create(name="first", scopes=["completions"])
    assert get(first).status_code == 404  # snapshot built
    with django_capture_on_commit_callbacks(execute=True):
        _, later = api_key_create(name="later", scopes=["completions"])
    assert get(later).status_code == 404


# --- the client address ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "remote, forwarded, trusted, expected",
    [
        ("198.51.100.4", "", [], "198.51.100.4"),
        # without trusted proxies, X-Forwarded-For is the client's word and ignored
        ("198.51.100.4", "192.0.2.1", [], "198.51.100.4"),
        # a peer that is not a trusted proxy cannot choose its address either
        ("198.51.100.4", "192.0.2.1", ["10.0.0.0/8"], "198.51.100.4"),
        # through trusted proxies: the rightmost address that is not one of them
        ("10.0.0.5", "192.0.2.1, 198.51.100.9, 10.0.0.7", ["10.0.0.0/8"], "198.51.100.9"),
        ("10.0.0.5", "not-an-address, 198.51.100.9", ["10.0.0.5"], "198.51.100.9"),
        ("10.0.0.5", "", ["10.0.0.0/8"], "10.0.0.5"),
        # IPv6 counts per /64; an IPv4-mapped address is its IPv4 address
        ("2001:db8:1:2:aaaa::1", "", [], "2001:db8:1:2::/64"),
        ("::ffff:198.51.100.4", "", [], "198.51.100.4"),
        ("", "", [], "unknown"),
    ],
)
def test_the_client_address_trusts_x_forwarded_for_only_from_trusted_proxies(
    rf, settings, remote, forwarded, trusted, expected
):
    from muse_experiments.api.auth_failures import client_address

    settings.TRUSTED_PROXIES = tuple(ipaddress.ip_network(n) for n in trusted)
    request = rf.get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


def test_behind_a_trusted_proxy_each_client_is_counted_apart(settings):
    settings.TRUSTED_PROXIES = (ipaddress.ip_network("10.0.0.0/8"),)
    _, raw = api_key_create(name="k", scopes=["completions"])
    proxy = {"REMOTE_ADDR": "10.0.0.5"}

    def via_proxy(key: str, client: str):
        return APIClient().get(
            job_url(), HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_X_FORWARDED_FOR=client, **proxy
        )

    assert [via_proxy(wrong_secret(raw), ATTACKER).status_code for _ in range(21)] == [401] * 20 + [429]
    assert via_proxy(raw, NEIGHBOUR).status_code == 404  # the proxy's other clients are not refused
    assert via_proxy(raw, ATTACKER).status_code == 429
