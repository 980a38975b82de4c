"""A turn retried or regenerated within one session: the replayed reasoning is the newest matching one.

Within one ``X-Muse-Session-Id`` a client may run the same tool round twice ("weather in Paris" ->
function call -> tool result; then the same again: a retry, a regeneration, a restarted branch), or
ask the same question first through ``/v1/chat/completions`` and then through ``/v1/responses``.
Both rounds' assistant turns have the same content, hence the same ``turn_digest``; only their
tool-call ids (and the provider's item ids / signatures) differ. Replaying the older round's
reasoning with the newer tool call made the upstream refuse the tool-result turn (Azure: "Item
'rs_…' of type 'reasoning' was provided without its required following item"; Anthropic:
"thinking … blocks in the latest assistant message cannot be modified"), and the client got 502.

The simulated upstreams enforce those placement rules, so every call must come back ``ok``; on
top, the tool-result turn of the second round must carry the second round's reasoning, and only it.
"""

from __future__ import annotations

import pytest

from routing.providers import CompletionRequest, Message, ToolCall
from routing.providers.reasoning import anchor_reasoning
from routing.providers.types import ReasoningState, assistant_turn_digest
from tests.routing.test_reasoning_sessions_generated import (
    AZURE,
    CLAUDE,
    ChatPath,
    MessagesPath,
    ResponsesPath,
    issued,
)
from tests.routing.test_reasoning_sessions_generated import platform as platform  # noqa: F401 - fixture

QUESTION = "weather in Paris"


def reasoning_on(upstreams, model: str) -> None:
    upstreams.set_scenario(
        model,
        reasoning=True,
        encrypted_reasoning="always",
        verify_reasoning=True,
        redacted_thinking=model == CLAUDE[1],
        tool_calls="auto",
    )


def tool_round(session) -> None:
    """One round: the question -> a function call -> its result -> the model's answer."""
    session.messages = [{"role": "user", "content": QUESTION}]
    _, calls = session.turn(False)
    assert calls
    session.tool_results(calls)
    text, after = session.turn(False)
    assert text and not after


def replayed(call: dict, model: str) -> list[dict]:
    """The reasoning items/blocks one upstream request carried."""
    if model == CLAUDE[1]:
        return [
            b
            for m in call["body"]["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] in ("thinking", "redacted_thinking")
        ]
    return [i for i in call["body"]["input"] if i.get("type") == "reasoning"]


def assert_second_round_replays_its_own_reasoning(upstreams, model: str) -> None:
    calls = upstreams.calls(model=model)
    assert [c["outcome"] for c in calls] == ["ok"] * 4  # the fake enforced the placement rules
    round1, round2 = issued(calls[0]), issued(calls[2])
    assert round1 and round2 and round1 != round2
    assert replayed(calls[1], model) == round1
    assert replayed(calls[3], model) == round2  # the newest state, not round 1's


PATH_CASES = [
    pytest.param(ResponsesPath, AZURE, id="responses-azure"),
    pytest.param(ResponsesPath, CLAUDE, id="responses-claude"),
    pytest.param(MessagesPath, CLAUDE, id="messages-claude"),
    pytest.param(ChatPath, AZURE, id="chat-azure"),
]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("path", "target"), PATH_CASES)
def test_the_same_tool_round_twice_in_one_session_succeeds_with_the_newest_reasoning(platform, path, target):  # noqa: F811
    url, key, upstreams, _ = platform
    public_id, model = target
    reasoning_on(upstreams, model)
    session = path(url, key, f"retry-{path.__name__}-{model}", public_id)
    try:
        tool_round(session)
        tool_round(session)  # same session, same question: a retry / regeneration
    finally:
        session.close()
    assert_second_round_replays_its_own_reasoning(upstreams, model)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("target", [AZURE, CLAUDE], ids=["azure", "claude"])
def test_the_same_question_through_chat_completions_then_responses_in_one_session(platform, target):  # noqa: F811
    url, key, upstreams, _ = platform
    public_id, model = target
    reasoning_on(upstreams, model)
    sid = f"cross-{model}"
    chat, responses = ChatPath(url, key, sid, public_id), ResponsesPath(url, key, sid, public_id)
    try:
        tool_round(chat)
        tool_round(responses)
    finally:
        chat.close()
        responses.close()
    assert_second_round_replays_its_own_reasoning(upstreams, model)


# ---- anchor_reasoning: which state a turn gets --------------------------------------------------


def _round(n: int, call_id: str, history: list[Message]) -> tuple[ReasoningState, Message]:
    calls = (ToolCall(call_id, "get_weather", {"city": "Paris"}),)
    state = ReasoningState(
        "fp",
        "openai",
        "responses",
        ({"n": n},),
        tool_call_ids=(call_id,),
        turn_digest=assistant_turn_digest(history, "", calls),
    )
    return state, Message("assistant", "", tool_calls=calls)


def test_anchor_reasoning_picks_the_state_whose_tool_call_ids_the_client_sent_back():
    history = [Message("user", QUESTION)]
    s1, turn1 = _round(1, "call_a", history)
    s2, turn2 = _round(2, "call_b", history)
    s3, turn3 = _round(3, "call_c", history)

    def request(turn: Message) -> CompletionRequest:
        return CompletionRequest(
            messages=(*history, turn, Message("tool", "sunny", tool_call_id=turn.tool_calls[0].id))
        )

    assert anchor_reasoning(request(turn3), [s1, s2, s3]) == {1: [s3]}
    assert anchor_reasoning(request(turn2), [s1, s2, s3]) == {1: [s2]}  # an older branch keeps its own
    assert anchor_reasoning(request(turn1), [s1, s2, s3]) == {1: [s1]}


def test_anchor_reasoning_with_repeated_ids_takes_the_newest():
    history = [Message("user", QUESTION)]
    s1, turn = _round(1, "functions.get_weather:0", history)
    s2, _ = _round(2, "functions.get_weather:0", history)
    request = CompletionRequest(
        messages=(*history, turn, Message("tool", "sunny", tool_call_id=turn.tool_calls[0].id))
    )
    assert anchor_reasoning(request, [s1, s2]) == {1: [s2]}


def test_anchor_reasoning_replays_nothing_when_the_turn_matches_no_state_ids():
    """Same content, other ids (the answer the client kept came without reasoning, or from another
    endpoint): no state is known to belong to it, so the turn goes without reasoning."""
    history = [Message("user", QUESTION)]
    s1, _ = _round(1, "call_a", history)
    s2, _ = _round(2, "call_b", history)
    _, kept = _round(3, "call_unknown", history)
    request = CompletionRequest(
        messages=(*history, kept, Message("tool", "sunny", tool_call_id="call_unknown"))
    )
    assert anchor_reasoning(request, [s1, s2]) == {}


def test_anchor_reasoning_text_turn_regenerated_takes_the_newest_and_never_reuses_a_state():
    history = [Message("user", "hi")]
    digest = assistant_turn_digest(history, "Hello.", ())
    s1 = ReasoningState("fp", "openai", "responses", ({"n": 1},), turn_digest=digest)
    s2 = ReasoningState("fp", "openai", "responses", ({"n": 2},), turn_digest=digest)
    request = CompletionRequest(messages=(*history, Message("assistant", "Hello."), Message("user", "go")))
    assert anchor_reasoning(request, [s1, s2]) == {1: [s2]}
