"""Three-turn tool-using sessions through the provider clients with the reasoning store in between.

The fake upstreams verify every reasoning blob passed back (``verify_reasoning``) and record what
they received, so these tests see the wire: turns 2 and 3 carry the earlier turns' reasoning
items byte-for-byte, in order, right before the function call / ``tool_use``; a fallback to
Avocado carries none; and nothing reaches the public result.
"""

from __future__ import annotations

import json
import logging

import pytest

from routing import reasoning_store
from routing.catalogue import avocado_id
from routing.providers import Message, UpstreamUnavailable, client_for
from routing.reasoning_store import reasoning_load, session_end
from tests.routing.reasoning_session import Session, issued_reasoning, secret_strings, seeded_endpoint

AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"


@pytest.fixture
def store(redis_url, settings):
    """Each session on real Redis, starting empty."""
    from muse_experiments.infra.redis_client import redis_client

    settings.REASONING_STORE_URL = redis_url

    def clean():
        for key in redis_client().scan_iter(reasoning_store.KEY_PREFIX + "*"):
            redis_client().delete(key)

    clean()
    yield "redis"
    clean()


def reasoning_upstream(upstreams, model: str, **kw) -> None:
    upstreams.set_scenario(
        model, reasoning=True, encrypted_reasoning="always", verify_reasoning=True, tool_calls="auto", **kw
    )


def test_azure_responses_session_replays_reasoning_exactly_on_turns_2_and_3(upstreams, store, caplog):
    caplog.set_level(logging.DEBUG)
    reasoning_upstream(upstreams, "muse-special")
    ep = seeded_endpoint(upstreams.url, AZURE)
    session = Session(f"az-{store}")
    first, second, third = session.turn(ep), session.turn(ep), session.turn(ep)
    assert first.finish_reason == "tool_calls" and second.finish_reason == "stop"
    assert third.finish_reason == "tool_calls"
    calls = upstreams.calls(model="muse-special")
    assert [c["outcome"] for c in calls] == ["ok", "ok", "ok"]  # the fake verified every blob
    r1, r2 = issued_reasoning(calls[0]), issued_reasoning(calls[1])
    assert r1 and r2 and all(i["encrypted_content"].startswith("gAAAAA") for i in r1 + r2)

    turn2 = calls[1]["body"]["input"]
    assert [i.get("type", i.get("role")) for i in turn2] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert turn2[1] == r1[0]
    for blob in secret_strings(r1):
        assert json.dumps(blob) in calls[1]["raw_body"]  # byte-for-byte on the wire

    turn3 = calls[2]["body"]["input"]
    assert [i.get("type", i.get("role")) for i in turn3] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "assistant",
        "user",
    ]
    assert [turn3[1], turn3[4]] == [r1[0], r2[0]]
    assert turn3[2]["call_id"] == first.tool_calls[0].id

    public = json.dumps([r.to_public_dict() for r in session.results])
    for blob in secret_strings(r1 + r2):
        assert blob not in public and blob not in caplog.text
    session_end(session=session.owned)
    assert reasoning_load(session=session.owned, endpoint=ep) == ()


@pytest.mark.parametrize("thinking_text", ["Considering the weather.", ""], ids=["text", "empty-thinking"])
def test_claude_session_replays_thinking_and_redacted_thinking_before_tool_use(
    upstreams, store, thinking_text, caplog
):
    caplog.set_level(logging.DEBUG)
    reasoning_upstream(upstreams, "claude-sonnet-5-5", redacted_thinking=True, thinking_text=thinking_text)
    ep = seeded_endpoint(upstreams.url, CLAUDE)
    session = Session(f"claude-{store}-{len(thinking_text)}")
    first, second, third = session.turn(ep), session.turn(ep), session.turn(ep)
    assert [r.finish_reason for r in (first, second, third)] == ["tool_calls", "stop", "tool_calls"]
    calls = upstreams.calls(model="claude-sonnet-5-5")
    assert [c["outcome"] for c in calls] == ["ok", "ok", "ok"]
    r1, r2 = issued_reasoning(calls[0]), issued_reasoning(calls[1])
    assert [b["type"] for b in r1] == ["thinking", "redacted_thinking"]
    assert r1[0]["thinking"] == thinking_text

    turn2 = calls[1]["body"]["messages"]
    assert [b["type"] for b in turn2[1]["content"]] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert turn2[1]["content"][:2] == r1

    turn3 = calls[2]["body"]["messages"]
    assert [m["role"] for m in turn3] == ["user", "assistant", "user", "assistant", "user"]
    assert turn3[1]["content"][:2] == r1
    assert [b["type"] for b in turn3[3]["content"]] == ["thinking", "redacted_thinking", "text"]
    assert turn3[3]["content"][:2] == r2
    for blob in secret_strings(r1 + r2):
        assert blob in calls[2]["raw_body"]

    public = json.dumps([r.to_public_dict() for r in session.results])
    for blob in secret_strings(r1 + r2):
        assert blob not in public and blob not in caplog.text
    session_end(session=session.owned)


def test_a_session_that_falls_back_to_avocado_sends_it_no_external_reasoning(upstreams, store):
    reasoning_upstream(upstreams, "muse-special")
    azure = seeded_endpoint(upstreams.url, AZURE)
    avocado = seeded_endpoint(upstreams.url, avocado_id(15))
    session = Session(f"fallback-{store}")
    session.turn(azure)
    issued = secret_strings(issued_reasoning(upstreams.calls(model="muse-special")[0]))

    # Turn 2: Azure is down; the router falls back to Avocado, loading state for *Avocado*.
    upstreams.update_scenario("muse-special", failure="unavailable")
    with pytest.raises(UpstreamUnavailable):
        session.turn(azure)
    assert reasoning_load(session=session.owned, endpoint=avocado) == ()
    result = session.turn(avocado)
    assert result.text and result.reasoning_state is None
    (avocado_call,) = upstreams.calls(model="avocado-v15")
    for blob in issued:
        assert blob not in avocado_call["raw_body"]
    assert "encrypted_content" not in avocado_call["raw_body"]
    assert all("reasoning" not in json.dumps(m) for m in avocado_call["body"]["messages"])

    # Even handed the Azure state directly, the Avocado client forwards nothing.
    stored = reasoning_load(session=session.owned, endpoint=azure)
    assert stored
    from routing.providers import CompletionRequest

    client_for(avocado).complete(
        avocado, CompletionRequest(messages=tuple(session.messages), reasoning_state=stored)
    )
    for blob in issued:
        assert blob not in upstreams.calls(model="avocado-v15")[-1]["raw_body"]

    # Back on Azure, the session's Azure reasoning is still there and still verifies.
    upstreams.update_scenario("muse-special", failure=None)
    session.turn(azure)
    last = upstreams.calls(model="muse-special")[-1]
    assert last["outcome"] == "ok"
    assert all(json.dumps(blob) in last["raw_body"] for blob in issued)
    session_end(session=session.owned)


@pytest.mark.parametrize("public_id", [CLAUDE, AZURE])
def test_issue_11_four_turns_replay_each_turns_reasoning_in_its_own_place(upstreams, store, public_id):
    """Tool call A; text answer; "And what about Berlin?" -> tool call B; text answer. Turn 4 used
    to carry turn 2's reasoning in turn 3's assistant message (Claude: 400; Azure: misplaced)."""
    model = "claude-sonnet-5-5" if public_id == CLAUDE else "muse-special"
    reasoning_upstream(upstreams, model)
    ep = seeded_endpoint(upstreams.url, public_id)
    session = Session(f"issue11-{store}-{model}")
    session.turn(ep)  # tool_use A
    session.turn(ep)  # text answer after tool(A)
    session.messages[-1] = Message("user", "And what about Berlin?")
    session.turn(ep)  # tool_use B
    fourth = session.turn(ep)  # text answer after tool(B)
    assert fourth.finish_reason == "stop"
    calls = upstreams.calls(model=model)
    assert [c["outcome"] for c in calls] == ["ok"] * 4
    issued = [issued_reasoning(c) for c in calls[:3]]
    sent = calls[3]["body"]
    if public_id == CLAUDE:
        assistants = [m["content"] for m in sent["messages"] if m["role"] == "assistant"]
        for own, content in zip(issued, assistants, strict=True):
            assert content[: len(own)] == own  # each turn's thinking first in its own message
            assert all(b["type"] not in ("thinking", "redacted_thinking") for b in content[len(own) :])
        assert [b["type"] for b in assistants[1]] == ["thinking", "text"]  # the text turn keeps its own
    else:
        kinds = [i.get("type", i.get("role")) for i in sent["input"]]
        assert kinds == [
            "user",
            "reasoning",
            "function_call",
            "function_call_output",
            "reasoning",
            "assistant",
            "user",
            "reasoning",
            "function_call",
            "function_call_output",
        ]
        assert [i for i in sent["input"] if i.get("type") == "reasoning"] == [r[0] for r in issued]
