"""Transcripts: ordered turns with provenance and eligibility, never any encrypted reasoning."""

from __future__ import annotations

import json

import pytest

from routing.transcripts.models import Transcript, TranscriptTurn
from routing.transcripts.selectors import session_transcript, turn_training_eligible
from routing.transcripts.services import training_opt_out, transcript_record_turn
from tests.transcripts.conftest import AVOCADO, AZURE, CLAUDE, make_job, public_result, record_turn

pytestmark = pytest.mark.django_db

BLOB = "gAAAAABcanary" + "QUJDRA" * 20
SIGNATURE = "EqQBcanarySignature" + "x1y2" * 20


def test_turns_are_numbered_in_order_with_model_variant_and_provenance(catalogue_seeded):
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Bern"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]
    tool_calls = [{"id": "call_2", "name": "get_time", "arguments": {"tz": "CET"}}]
    t1 = record_turn("s1", "u1", AZURE, variant_key="azure")
    t2 = record_turn("s1", "u1", AVOCADO, messages=messages, result=public_result("", tool_calls))
    t3 = record_turn("s1", "u1", CLAUDE)
    turns = session_transcript("s1")
    assert [t.number for t in turns] == [1, 2, 3]
    assert [(t.served_model, t.provenance, t.training_eligible) for t in turns] == [
        (AZURE, "external", False),
        (AVOCADO, "native", True),
        (CLAUDE, "external", False),
    ]
    assert turns[0].variant_key == "azure" and turns[1].experiment_key == "exp"
    assert turns[1].model_version == "avocado-v15"
    assert turns[1].input_messages == messages  # incl. the tool result posted back
    assert turns[1].tool_calls == tool_calls and turns[1].finish_reason == "tool_calls"
    assert Transcript.objects.get(session_id="s1").user_id == "u1"
    assert [t1.pk, t2.pk, t3.pk] == [t.pk for t in turns]


def test_recording_the_same_job_twice_keeps_one_turn(catalogue_seeded):
    job = make_job("s1", "u1")
    kwargs = {
        "job": job,
        "served_endpoint_public_id": AVOCADO,
        "provider_kind": "native",
        "result_public": public_result(),
        "experiment_key": None,
        "variant_key": None,
    }
    first = transcript_record_turn(**kwargs)
    assert transcript_record_turn(**kwargs).pk == first.pk
    assert TranscriptTurn.objects.count() == 1


def test_a_failed_job_records_nothing(catalogue_seeded):
    job = make_job("s1", "u1")
    assert (
        transcript_record_turn(
            job=job,
            served_endpoint_public_id="",
            provider_kind="native",
            result_public=None,
            experiment_key=None,
            variant_key=None,
        )
        is None
    )
    assert not TranscriptTurn.objects.exists()


def test_encrypted_reasoning_anywhere_in_a_turn_is_stripped_before_storing(catalogue_seeded, caplog):
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": f"echo {BLOB}"},
        {
            "role": "tool",
            "tool_call_id": "c",
            "content": json.dumps({"type": "thinking", "thinking": "", "signature": SIGNATURE}),
        },
    ]
    result = public_result("ok", [{"id": "c2", "name": "n", "arguments": {"x": {"encrypted_content": BLOB}}}])
    turn = record_turn("s1", "u1", AVOCADO, messages=messages, result=result)
    turn.refresh_from_db()
    stored = json.dumps([turn.input_messages, turn.tools, turn.output_text, turn.tool_calls, turn.usage])
    assert BLOB not in stored and SIGNATURE not in stored
    assert turn.reasoning_removed == 3
    assert not turn.training_eligible and not turn_training_eligible(turn)
    assert turn.input_messages[0] == {"role": "user", "content": "hi"}  # clean parts kept
    assert "removed 3 encrypted-reasoning carrier(s)" in caplog.text
    assert BLOB not in caplog.text and SIGNATURE not in caplog.text


def test_a_user_opted_out_before_the_turn_gets_ineligible_turns(catalogue_seeded):
    training_opt_out(user_id="u1", actor="test")
    turn = record_turn("s1", "u1", AVOCADO)
    assert not turn.training_eligible and not turn_training_eligible(turn)
