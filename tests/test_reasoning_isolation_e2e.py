"""Encrypted reasoning end to end: REST API -> real Celery worker -> fake upstreams, three turns with tools.

Two sessions (``azure/muse-special`` over the Responses API, a Claude model over Messages), each
three turns; the client posts its tool results back. The fake upstreams issue reasoning blobs,
verify every blob passed back (``verify_reasoning``) and record what they received. Afterwards:
turns 2 and 3 carried the earlier reasoning; the client never saw any; a raw scan of every
database table, the captured logs (this process and the worker's), Redis (after session end) and
the training export finds no blob.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from muse_experiments.experiments.models import ForcedAssignment
from muse_experiments.infra import config_version
from routing.catalogue import avocado_id
from tests.conftest import wait_for_records_written
from tests.factories import api_key, make_experiment, seed_catalogue
from tests.routing.reasoning_session import issued_reasoning, secret_strings

AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"
SESSIONS = {
    "e2e-reasoning-azure": ("azure", AZURE, "muse-special"),
    "e2e-reasoning-claude": ("claude", CLAUDE, "claude-sonnet-5-5"),
}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def run_session(client: httpx.Client, session_id: str, user_id: str) -> list[dict]:
    """Three turns: tool call, answer after the tool result, tool call again. Returns the responses."""
    messages: list[dict] = [{"role": "user", "content": "Weather in Bern?"}]
    responses = []
    for _ in range(3):
        response = client.post(
            "/api/v1/completions",
            json={"session_id": session_id, "user_id": user_id, "messages": messages, "tools": TOOLS},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "succeeded", body
        responses.append(body)
        result = body["result"]
        if result["tool_calls"]:
            messages.append(
                {"role": "assistant", "content": result["text"], "tool_calls": result["tool_calls"]}
            )
            messages += [
                {"role": "tool", "tool_call_id": tc["id"], "content": json.dumps({"temp_c": 21})}
                for tc in result["tool_calls"]
            ]
        else:
            messages += [
                {"role": "assistant", "content": result["text"]},
                {"role": "user", "content": "And Zurich?"},
            ]
    return responses


def database_dump() -> str:
    """Every row of every table, as text (raw SQL, no ORM)."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608 - table names from introspection
            chunks.append(f"{table}: {cursor.fetchall()!r}")
    return "\n".join(chunks)


def redis_dump(url: str) -> str:
    """Every key and value in the Redis database, read by type (no compressed DUMP format)."""
    import redis

    client = redis.Redis.from_url(url)
    readers = {
        b"string": client.get,
        b"list": lambda k: client.lrange(k, 0, -1),
        b"hash": client.hgetall,
        b"set": client.smembers,
        b"zset": lambda k: client.zrange(k, 0, -1),
        b"stream": lambda k: client.xrange(k),
    }
    out = []
    for key in client.scan_iter("*"):
        kind = client.type(key)
        reader = readers.get(kind)
        out.append(f"{key!r}: {reader(key) if reader else kind!r}")
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_reasoning_reaches_the_upstream_on_later_turns_and_nowhere_else(
    live_server, upstreams, celery_worker_process, caplog
):
    caplog.set_level(logging.DEBUG)
    seed_catalogue(upstreams.url)
    experiment = make_experiment(key="reasoning-e2e", arms=[("azure", AZURE, 0.5), ("claude", CLAUDE, 0.5)])
    variants = {v.key: v for v in experiment.variants.all()}
    for session_id, (variant, _, _) in SESSIONS.items():
        ForcedAssignment.objects.create(experiment=experiment, unit_id=session_id, variant=variants[variant])
    config_version.bump()
    for _, _, model in SESSIONS.values():
        upstreams.set_scenario(
            model,
            reasoning=True,
            encrypted_reasoning="always",
            verify_reasoning=True,
            redacted_thinking=model.startswith("claude"),
            thinking_text="",
        )

    headers = {"Authorization": f"Bearer {api_key(['completions', 'training:export'])}"}
    client_seen = []
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as client:
        for session_id, (_, public_id, _) in SESSIONS.items():
            responses = run_session(client, session_id, user_id="u-e2e")
            assert [r["result"]["served_model"] for r in responses] == [public_id] * 3
            assert [bool(r["result"]["tool_calls"]) for r in responses] == [True, False, True]
            client_seen += [json.dumps(r) for r in responses]
            client_seen += [client.get(f"/api/v1/completions/{r['id']}").text for r in responses]

        canaries = []
        for _, _, model in SESSIONS.values():
            calls = upstreams.calls(model=model)
            assert [c["outcome"] for c in calls] == ["ok", "ok", "ok"]  # every blob passed back verified
            first, second = (
                secret_strings(issued_reasoning(calls[0])),
                secret_strings(issued_reasoning(calls[1])),
            )
            assert first and second
            assert all(blob in calls[1]["raw_body"] for blob in first)  # turn 2 got turn 1's reasoning
            assert all(blob in calls[2]["raw_body"] for blob in first + second)  # turn 3 got both
            canaries += first + second + secret_strings(issued_reasoning(calls[2]))

        for session_id in SESSIONS:
            ended = client.post(f"/api/v1/sessions/{session_id}/end")
            assert ended.status_code == 200
            assert ended.json()["deleted_states"] == 3  # the worker's store, shared through Redis
        wait_for_records_written()
        export = client.post("/api/v1/training/export", json={"dry_run": True}).text

    manifest = json.loads(export.splitlines()[-1])["manifest"]
    assert manifest["records"] == 0 and manifest["excluded"]["external_provider"] == 6

    from routing.transcripts.selectors import session_transcript

    for session_id, (variant, public_id, _) in SESSIONS.items():
        turns = session_transcript(session_id)
        assert [(t.number, t.served_model, t.provenance, t.variant_key) for t in turns] == [
            (n, public_id, "external", variant) for n in (1, 2, 3)
        ]
        assert turns[1].input_messages[-1]["role"] == "tool"  # the tool result the client posted back

    places = {
        "client responses": "\n".join(client_seen),
        "database": database_dump(),
        "logs (test process)": caplog.text,
        "logs (worker)": (Path(settings.VAR_DIR) / "worker-test.log").read_text(errors="replace"),
        "training export": export,
        "redis": redis_dump(settings.REDIS_URL),
    }
    for place, text in places.items():
        for blob in canaries:
            assert blob[:32] not in text, f"reasoning blob found in {place}"


def turn(client: httpx.Client, session_id: str, messages: list[dict], *, stream: bool = False) -> dict | str:
    """One turn through ``POST /api/v1/completions``: the finished job (JSON), or the SSE text."""
    response = client.post(
        "/api/v1/completions",
        json={
            "session_id": session_id,
            "user_id": "u-shared",
            "messages": messages,
            "tools": TOOLS,
            "stream": stream,
        },
    )
    assert response.status_code == 200, response.text
    if stream:
        assert "event: done" in response.text, response.text
        return response.text
    body = response.json()
    assert body["status"] == "succeeded", body
    return body


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_session_id_belongs_to_the_key_that_started_it(
    live_server, upstreams, celery_worker_process, redis_url
):
    """Issue 30, finding 4, over real HTTP with a real worker and Redis: key B naming key A's
    session id (even replaying A's conversation) gets none of A's reasoning upstream, on the
    streamed path too; B's session end deletes only B's own state; a key that never used the id
    gets a 404; A's session carries on with its own reasoning."""
    seed_catalogue(upstreams.url)
    make_experiment(key="shared-e2e", arms=[("control", avocado_id(14), 0.0), ("azure", AZURE, 1.0)])
    config_version.bump()
    upstreams.set_scenario(
        "muse-special", reasoning=True, encrypted_reasoning="always", verify_reasoning=True, thinking_text=""
    )
    session_id = "e2e-shared-session"
    a, b, c = (
        httpx.Client(
            base_url=live_server.url,
            headers={"Authorization": f"Bearer {api_key(['completions'])}"},
            timeout=60,
        )
        for _ in range(3)
    )
    with a, b, c:
        first = turn(a, session_id, [{"role": "user", "content": "Weather in Bern?"}])
        tool_calls = first["result"]["tool_calls"]
        assert tool_calls
        replay = [
            {"role": "user", "content": "Weather in Bern?"},
            {"role": "assistant", "content": first["result"]["text"], "tool_calls": tool_calls},
            *(
                {"role": "tool", "tool_call_id": tc["id"], "content": json.dumps({"temp_c": 21})}
                for tc in tool_calls
            ),
        ]
        a_blobs = secret_strings(issued_reasoning(upstreams.calls(model="muse-special")[0]))
        assert a_blobs

        turn(b, session_id, replay, stream=True)  # B's turn: its request must carry none of A's reasoning
        b_request = upstreams.calls(model="muse-special")[1]
        assert b_request["outcome"] == "ok"
        assert not [blob for blob in a_blobs if blob in b_request["raw_body"]]
        assert [i for i in b_request["body"]["input"] if i.get("type") == "reasoning"] == []

        ended_b = b.post(f"/api/v1/sessions/{session_id}/end")
        assert ended_b.status_code == 200 and ended_b.json() == {
            "session_id": session_id,
            "deleted_states": 1,
        }
        stranger = c.post(f"/api/v1/sessions/{session_id}/end")
        assert stranger.status_code == 404
        assert stranger.json() == {
            "error": {
                "code": "not_found",
                "message": f"No session '{session_id}' was started with this API key.",
            }
        }

        turn(a, session_id, replay)  # A's second turn: A's own reasoning, untouched by B and C
        a_request = upstreams.calls(model="muse-special")[2]
        assert a_request["outcome"] == "ok"
        sent = [i for i in a_request["body"]["input"] if i.get("type") == "reasoning"]
        assert sent == issued_reasoning(upstreams.calls(model="muse-special")[0])
        ended_a = a.post(f"/api/v1/sessions/{session_id}/end")
        assert ended_a.json() == {"session_id": session_id, "deleted_states": 2}
        wait_for_records_written()
        assert b.post(f"/api/v1/sessions/{session_id}/end").json()["deleted_states"] == 0  # B's session: 200
