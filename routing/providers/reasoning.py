"""Which provider-native reasoning a request replays, and where (Django-free): a result's state is
bound to the assistant turn it came with (:func:`bind_reasoning`), states from another endpoint
are dropped (:func:`usable_reasoning_state`), and each kept state is anchored to the message of
its turn, never moved (:func:`anchor_reasoning`)."""

from __future__ import annotations

import logging
from dataclasses import replace

from routing.providers.types import (
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    ReasoningState,
    assistant_turn_digest,
    conversation_digests,
)

log = logging.getLogger("routing.providers")


def bind_reasoning(result: CompletionResult, request: CompletionRequest) -> CompletionResult:
    """``result`` with its reasoning state bound to the assistant turn it came with: the state's
    ``turn_digest`` is the :func:`~routing.providers.types.assistant_turn_digest` of the request's
    history plus the result's text and tool calls (see :func:`anchor_reasoning`)."""
    state = result.reasoning_state
    if state is None:
        return result
    digest = assistant_turn_digest(request.messages, result.text, result.tool_calls)
    return replace(result, reasoning_state=replace(state, turn_digest=digest))


def usable_reasoning_state(endpoint: EndpointConfig, request: CompletionRequest) -> list[ReasoningState]:
    """States produced by this exact endpoint+credential; others are dropped (logged, no content)."""
    usable = []
    for state in request.reasoning_state:
        if state.matches(endpoint):
            usable.append(state)
        else:
            log.info(
                "dropping reasoning state from another endpoint (items=%d) for %s",
                len(state.items),
                endpoint.public_id,
            )
    return usable


def anchor_reasoning(
    request: CompletionRequest, states: list[ReasoningState]
) -> dict[int, list[ReasoningState]]:
    """Map assistant-message index -> reasoning states to replay before that turn's content.

    ``states`` are in the order they were produced (oldest first). Each assistant message gets at
    most one state: the one that came with exactly that turn. A state *matches* a message when its
    ``turn_digest`` equals the message's :func:`~routing.providers.types.conversation_digests`
    entry (states without a digest: when its tool-call ids intersect the message's) and its
    ``tool_call_ids`` are the ids of the message's tool calls (a state that recorded none is not
    told apart by ids).

    A session may hold several states with the same digest: the same turn retried or regenerated
    (one ``X-Muse-Session-Id``, the same question asked twice, through one drop-in or several).
    Their reasoning is not interchangeable (each upstream response has its own tool-call ids and
    provider item ids; Responses then refuses a reasoning item "without its required following
    item", Anthropic thinking blocks that "cannot be modified"), so the tool-call ids the client
    sent back decide: the NEWEST state whose ids are the message's wins. When the digest matches
    but no state's ids do (ambiguous or inconsistent: e.g. the answer the client kept came
    without reasoning, or from another endpoint), nothing is replayed for that turn -- both APIs
    accept a turn without its reasoning (Anthropic's tool loop then goes without ``thinking``:
    :func:`routing.providers.anthropic_messages._tool_loop_without_thinking`), never a wrong one.

    A state whose turn is not in the history any more (the client edited or dropped it) is
    dropped, never moved to another turn, and no state is replayed twice.
    """
    digests = conversation_digests(request.messages)
    out: dict[int, list[ReasoningState]] = {}
    used: set[int] = set()
    ambiguous = 0
    for i, m in enumerate(request.messages):
        if m.role != "assistant":
            continue
        ids = {tc.id for tc in m.tool_calls}
        exact: int | None = None  # newest state with these very tool-call ids
        unlabelled: int | None = None  # newest state that recorded no tool-call ids
        same_turn = False
        for n, state in enumerate(states):
            if n in used:
                continue
            if state.turn_digest:
                if digests[i] != state.turn_digest:
                    continue
            elif not (set(state.tool_call_ids) & ids):
                continue
            same_turn = True
            if not state.tool_call_ids:
                unlabelled = n
            elif set(state.tool_call_ids) == ids:
                exact = n
        chosen = exact if exact is not None else unlabelled
        if chosen is None:
            ambiguous += same_turn
            continue
        used.add(chosen)
        out[i] = [states[chosen]]
    dropped = len(states) - len(used)
    if ambiguous:
        log.info(
            "reasoning: %d turn(s) sent without reasoning (stored states of that turn do not match its tool calls)",
            ambiguous,
        )
    if dropped:
        log.info(
            "reasoning: %d state(s) not replayed (superseded, or their assistant turn is no longer in the history)",
            dropped,
        )
    return out
