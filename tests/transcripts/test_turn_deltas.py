"""Transcripts store each turn's new messages only; every reader gets each turn's whole input back."""

from __future__ import annotations

import json

import pytest

from routing.transcripts.export import TrainingExport
from routing.transcripts.models import TranscriptTurn
from routing.transcripts.selectors import session_transcript, turn_input_messages
from tests.transcripts.conftest import AVOCADO, record_turn

pytestmark = pytest.mark.django_db


def conversation(n: int) -> list[list[dict]]:
    """The whole input of each of ``n`` turns of an agent that appends its answer and a new question."""
    inputs, history = [], [{"role": "system", "content": "be brief"}]
    for i in range(n):
        history = [*history, {"role": "user", "content": f"question {i}"}]
        inputs.append(list(history))
        history = [*history, {"role": "assistant", "content": f"answer {i}"}]
    return inputs


def test_storage_grows_with_the_session_length_not_its_square(catalogue_seeded):
    inputs = conversation(12)
    for messages in inputs:
        record_turn("s1", "u1", AVOCADO, messages=messages)
    turns = session_transcript("s1")
    assert [len(t.input_messages) for t in turns] == [2] + [2] * 11  # system+question, then answer+question
    assert sum(len(t.input_messages) for t in turns) == 24  # the whole inputs add up to 156 messages
    assert [t.context_messages for t in turns] == [0] + [len(m) for m in inputs[:-1]]
    assert [turn_input_messages(t) for t in turns] == inputs


def test_a_client_that_rewrites_its_history_gets_that_turn_stored_whole(catalogue_seeded):
    inputs = conversation(3)
    rewritten = [{"role": "system", "content": "be verbose"}, {"role": "user", "content": "again"}]
    for messages in [inputs[0], inputs[1], rewritten, [*rewritten, {"role": "user", "content": "more"}]]:
        record_turn("s1", "u1", AVOCADO, messages=messages)
    turns = session_transcript("s1")
    assert [t.context_messages for t in turns] == [0, 2, 0, 2]
    assert turns[2].input_messages == rewritten
    assert turn_input_messages(turns[3]) == [*rewritten, {"role": "user", "content": "more"}]


def test_the_training_export_reassembles_every_turn_unchanged(catalogue_seeded):
    inputs = conversation(5)
    for messages in inputs:
        record_turn("s1", "u1", AVOCADO, messages=messages)
    record_turn("s2", "u2", AVOCADO, messages=conversation(1)[0])  # interleaved sessions
    lines = [json.loads(line) for line in TrainingExport().records()]
    by_turn = {(r["session_id"], r["turn"]): r["input"]["messages"] for r in lines}
    assert [by_turn[("s1", i + 1)] for i in range(5)] == inputs
    assert by_turn[("s2", 1)] == conversation(1)[0]
    # and from the database alone (no export cache), e.g. the fifth turn exported on its own
    fifth = TranscriptTurn.objects.get(transcript__session_id="s1", number=5)
    assert turn_input_messages(fifth) == inputs[4]
