"""The server-side reasoning store: exact round trip, endpoint binding, TTL, session end, no leaks."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from muse_experiments.infra import private_redis
from routing import reasoning_store
from routing.providers.types import EndpointConfig, ReasoningState
from routing.reasoning_store import (
    KEYLESS_OWNER,
    MAX_STATES,
    OwnedSession,
    ReasoningStoreUnavailable,
    reasoning_load,
    reasoning_save,
    session_end,
    session_owner,
)

BLOB = "gAAAAABcanary" + "Zm9vYmFy" * 20
KEY_A, KEY_B = session_owner(api_key_id=1), session_owner(api_key_id=2)


def owned(session_id: str, owner: str = KEY_A) -> OwnedSession:
    """``session_id`` as the store keys it for ``owner`` (key A by default)."""
    return OwnedSession(owner=owner, session_id=session_id)


def endpoint(
    public_id: str = "azure/muse-special", credential: str = "key-a", upstream_model: str = "muse-special"
) -> EndpointConfig:
    return EndpointConfig(
        public_id=public_id,
        provider_kind="azure_openai",
        base_url="https://res.openai.azure.com",
        upstream_model=upstream_model,
        api_style="responses",
        api_version="2025-04-01-preview",
        credential=credential,
    )


def state(ep: EndpointConfig, n: int = 0) -> ReasoningState:
    return ReasoningState(
        endpoint_fingerprint=ep.fingerprint,
        provider_kind=ep.provider_kind,
        api_style=ep.api_style,
        items=({"id": f"rs_{n}", "type": "reasoning", "summary": [], "encrypted_content": f"{BLOB}{n}"},),
        tool_call_ids=(f"call_{n}",),
        native_ids={f"call_{n}": f"fc_{n}"},
    )


@pytest.fixture
def redis_store(redis_url, settings):
    from muse_experiments.infra.redis_client import redis_client

    settings.REASONING_STORE_URL = redis_url
    client = redis_client()

    def clean():
        for key in client.scan_iter("muse:reasoning*"):
            client.delete(key)

    clean()
    yield client
    clean()


def test_states_round_trip_exactly_and_in_order(redis_store):
    ep = endpoint()
    saved = [state(ep, n) for n in range(3)]
    for s in saved:
        reasoning_save(session=owned("s1"), state=s, endpoint_id=ep.public_id)
    loaded = reasoning_load(session=owned("s1"), endpoint=ep)
    assert [dict(i) for s in loaded for i in s.items] == [dict(i) for s in saved for i in s.items]
    assert [(s.tool_call_ids, dict(s.native_ids)) for s in loaded] == [
        (s.tool_call_ids, dict(s.native_ids)) for s in saved
    ]
    assert reasoning_load(session=owned("other"), endpoint=ep) == ()


def test_states_of_another_endpoint_or_credential_are_not_returned_and_only_counted_in_logs(
    redis_store, caplog
):
    caplog.set_level(logging.DEBUG)
    producer = endpoint()
    reasoning_save(session=owned("s1"), state=state(producer), endpoint_id=producer.public_id)
    other_key = endpoint(credential="key-b")
    assert other_key.fingerprint != producer.fingerprint
    assert reasoning_load(session=owned("s1"), endpoint=other_key) == ()
    assert reasoning_load(session=owned("s1"), endpoint=endpoint("azure/other", upstream_model="other")) == ()
    assert "1 state(s) of another endpoint/credential not forwarded to azure/muse-special" in caplog.text
    assert BLOB not in caplog.text
    assert len(reasoning_load(session=owned("s1"), endpoint=producer)) == 1


def test_none_state_keeps_what_is_stored(redis_store):
    ep = endpoint()
    reasoning_save(session=owned("s1"), state=state(ep), endpoint_id=ep.public_id)
    reasoning_save(session=owned("s1"), state=None, endpoint_id="avocado/x")
    assert len(reasoning_load(session=owned("s1"), endpoint=ep)) == 1


def test_only_the_newest_states_are_kept(redis_store):
    ep = endpoint()
    for n in range(MAX_STATES + 5):
        reasoning_save(session=owned("s1"), state=state(ep, n))
    loaded = reasoning_load(session=owned("s1"), endpoint=ep)
    assert len(loaded) == MAX_STATES
    assert loaded[0].tool_call_ids == ("call_5",)


def test_session_end_deletes_the_sessions_states(redis_store):
    ep = endpoint()
    reasoning_save(session=owned("s1"), state=state(ep), endpoint_id=ep.public_id)
    assert session_end(session=owned("s1")) == 1
    assert reasoning_load(session=owned("s1"), endpoint=ep) == ()
    assert session_end(session=owned("s1")) == 0


def test_state_repr_and_store_log_lines_never_show_the_blob(redis_store, caplog):
    caplog.set_level(logging.DEBUG)
    ep = endpoint()
    s = state(ep)
    reasoning_save(session=owned("s1"), state=s, endpoint_id=ep.public_id)
    reasoning_load(session=owned("s1"), endpoint=endpoint(credential="other"))
    assert BLOB not in repr(s) and BLOB not in caplog.text


@pytest.mark.redis
def test_redis_store_round_trips_with_a_ttl_and_session_end_leaves_nothing(redis_store, settings):
    settings.REASONING_SESSION_TTL_S = 120
    ep = endpoint()
    reasoning_save(session=owned("s-redis"), state=state(ep, 1), endpoint_id=ep.public_id)
    reasoning_save(session=owned("s-redis"), state=state(ep, 2), endpoint_id=ep.public_id)
    keys = sorted(k.decode() for k in redis_store.scan_iter("muse:reasoning*"))
    assert len(keys) == 1 and "s-redis" not in "".join(keys)  # one list; the session id is hashed
    for key in keys:
        assert 0 < redis_store.ttl(key) <= 120
    loaded = reasoning_load(session=owned("s-redis"), endpoint=ep)
    assert [s.items[0]["encrypted_content"] for s in loaded] == [f"{BLOB}1", f"{BLOB}2"]

    assert session_end(session=owned("s-redis")) == 2
    assert list(redis_store.scan_iter("muse:reasoning*")) == []


@pytest.mark.redis
def test_a_turn_without_reasoning_renews_the_ttl_at_most_once_a_minute_a_state_always_saves(
    redis_store, settings, monkeypatch
):
    settings.REASONING_SESSION_TTL_S = 3600
    ep = endpoint()
    reasoning_save(session=owned("s-renew"), state=state(ep, 1), endpoint_id=ep.public_id)
    [key] = redis_store.scan_iter("muse:reasoning*")
    redis_store.expire(key, 100)
    reasoning_save(session=owned("s-renew"), state=None)  # renewed just now by the save: skipped
    assert 0 < redis_store.ttl(key) <= 100
    reasoning_save(session=owned("s-renew"), state=state(ep, 2), endpoint_id=ep.public_id)  # always stored
    assert redis_store.ttl(key) > 3500 and redis_store.llen(key) == 2
    redis_store.expire(key, 100)
    monkeypatch.setattr(reasoning_store._Renewals, "RENEW_EVERY_S", 0.0)  # as if a minute went by
    reasoning_save(session=owned("s-renew"), state=None)
    assert redis_store.ttl(key) > 3500


@pytest.mark.redis
def test_redis_store_forgets_a_session_after_its_ttl(redis_store, settings):
    settings.REASONING_SESSION_TTL_S = 1
    ep = endpoint()
    reasoning_save(session=owned("s-ttl"), state=state(ep), endpoint_id=ep.public_id)
    assert reasoning_load(session=owned("s-ttl"), endpoint=ep)
    deadline = time.monotonic() + 10
    while list(redis_store.scan_iter("muse:reasoning*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(redis_store.scan_iter("muse:reasoning*")) == []
    assert reasoning_load(session=owned("s-ttl"), endpoint=ep) == ()


def test_an_unreachable_redis_degrades_to_no_reasoning_without_leaking(settings, caplog):
    settings.REASONING_STORE_URL = "redis://127.0.0.1:1/0"
    ep = endpoint()
    reasoning_save(session=owned("s1"), state=state(ep), endpoint_id=ep.public_id)
    assert reasoning_load(session=owned("s1"), endpoint=ep) == ()
    with pytest.raises(ReasoningStoreUnavailable) as exc:
        session_end(session=owned("s1"))
    assert "unavailable" in str(exc.value)
    assert BLOB not in caplog.text


# --- sessions belong to their owner (issue 30, finding 4) -----------------------------------------


def test_the_same_session_id_under_another_key_is_a_separate_session(redis_store):
    """Key B naming key A's session id gets none of A's reasoning, cannot end A's session, and
    keeps its own states apart; the keyless source sees neither."""
    ep = endpoint()
    for n in (1, 2):
        reasoning_save(session=owned("one-session"), state=state(ep, n), endpoint_id=ep.public_id)
    assert reasoning_load(session=owned("one-session", KEY_B), endpoint=ep) == ()
    assert session_end(session=owned("one-session", KEY_B)) == 0
    reasoning_save(session=owned("one-session", KEY_B), state=None)  # B's turn without reasoning
    reasoning_save(session=owned("one-session", KEY_B), state=state(ep, 3), endpoint_id=ep.public_id)

    def blobs(owner: str) -> list[str]:
        return [
            s.items[0]["encrypted_content"]
            for s in reasoning_load(session=owned("one-session", owner), endpoint=ep)
        ]

    assert blobs(KEY_A) == [f"{BLOB}1", f"{BLOB}2"]
    assert blobs(KEY_B) == [f"{BLOB}3"]
    assert blobs(KEYLESS_OWNER) == []
    assert session_end(session=owned("one-session", KEYLESS_OWNER)) == 0
    assert session_end(session=owned("one-session")) == 2
    assert blobs(KEY_B) == [f"{BLOB}3"]  # A's end leaves B's session alone
    assert session_end(session=owned("one-session", KEY_B)) == 1


def test_owners_are_the_api_key_or_the_keyless_source_and_both_parts_are_required():
    assert session_owner(api_key_id=7) == "key:7"
    assert session_owner(api_key_id=None) == KEYLESS_OWNER
    assert owned("s", "key:1").store_key != owned("s", "key:2").store_key
    assert owned("s", "key:1").store_key != owned("s", KEYLESS_OWNER).store_key
    for owner, session_id in (("", "s"), ("key:1", ""), ("key:1\x00x", "s")):
        with pytest.raises(ValueError):
            OwnedSession(owner=owner, session_id=session_id)


@pytest.mark.redis
def test_keys_written_before_sessions_had_owners_are_neither_read_nor_ended_and_expire(redis_store):
    """A session stored under its id alone (before the owner was part of the key) is left to its
    TTL: no owner receives its reasoning, and no owner's session end deletes it."""
    import hashlib

    ep = endpoint()
    legacy = "muse:reasoning:" + hashlib.sha256(b"s-old").hexdigest()
    redis_store.rpush(legacy, reasoning_store.state_to_json(state(ep, 9)))
    redis_store.expire(legacy, 60)
    assert reasoning_load(session=owned("s-old"), endpoint=ep) == ()
    assert session_end(session=owned("s-old")) == 0
    assert redis_store.llen(legacy) == 1 and 0 < redis_store.ttl(legacy) <= 60


# --- the folder store: the embedded default's processes share sessions --------------------------


# --- the web and worker processes share sessions ---------------------------------------------

#: Runs in a separate Python process: one store operation, prints its result.
CHILD = """
import sys
import django
django.setup()
from routing.reasoning_store import reasoning_load, reasoning_save, session_end
from tests.routing.test_reasoning_store import endpoint, owned, state
op, session, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ep = endpoint()
if op == "save":
    reasoning_save(session=owned(session), state=state(ep, n), endpoint_id=ep.public_id)
    print("saved")
elif op == "load":
    print(",".join(s.items[0]["encrypted_content"][-1:] for s in reasoning_load(session=owned(session), endpoint=ep)))
else:
    print(session_end(session=owned(session)))
"""


def run_python(code: str, *args, env: dict[str, str]) -> str:
    """Run ``code`` in a new Python process with Django's settings; its last line of output."""
    env = {**env, "DJANGO_SETTINGS_MODULE": "muse_experiments.settings", "DJANGO_DEBUG": "true"}
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        cwd=settings_module_root(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def in_other_process(redis_url: str, *args) -> str:
    """Run one store operation in a new Python process (another web or worker process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("REASONING_STORE_URL", "DATABASE_URL")}
    return run_python(CHILD, *args, env={**env, "REDIS_URL": redis_url})


def settings_module_root() -> Path:
    return Path(__file__).resolve().parents[2]


def test_a_session_continues_across_processes_and_its_end_reaches_all_of_them(
    redis_store, redis_url, settings
):
    """Turn 1 served by one process, turn 2 by another, the session ended by a third: each sees
    the states the others saved (an in-process store would lose them: issue 10)."""
    settings.REASONING_SESSION_TTL_S = 120
    ep = endpoint()
    assert in_other_process(redis_url, "save", "s-multi", 1) == "saved"
    reasoning_save(session=owned("s-multi"), state=state(ep, 2), endpoint_id=ep.public_id)
    assert in_other_process(redis_url, "load", "s-multi", 0) == "1,2"
    loaded = reasoning_load(session=owned("s-multi"), endpoint=ep)
    assert [s.items[0]["encrypted_content"] for s in loaded] == [f"{BLOB}1", f"{BLOB}2"]

    assert in_other_process(redis_url, "end", "s-multi", 0) == "2"
    assert reasoning_load(session=owned("s-multi"), endpoint=ep) == ()
    assert list(redis_store.scan_iter("muse:reasoning*")) == []


def test_without_redis_url_the_store_is_the_private_server_of_the_checkout():
    """Without ``REDIS_URL`` (outside the test suite) the store is the private Redis under var/,
    which keeps nothing on disk (tests/muse_experiments/infra/test_private_redis.py)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REASONING_STORE_URL", "MUSE_VAR_DIR")
    }
    code = (
        "import django; django.setup(); from django.conf import settings; print(settings.REASONING_STORE_URL)"
    )
    assert run_python(code, env=env) == private_redis.url(settings_module_root() / "var" / "redis")
