"""Training export: streamed JSONL of eligible turns, manifest counts, opt-out at export time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from routing.transcripts.export import TrainingExport
from routing.transcripts.gate import gate_check
from routing.transcripts.models import TranscriptTurn
from routing.transcripts.services import training_opt_in, training_opt_out
from tests.transcripts.conftest import AVOCADO, AVOCADO_14, AZURE, CLAUDE, record_turn, scoped_client

pytestmark = pytest.mark.django_db


def write_corpus():
    """u1: 3 native turns; u2: 2 native + 1 Azure; u3: 1 native, 1 Claude; u4: 1 native on v14."""
    for i in range(3):
        record_turn("s-u1", "u1", AVOCADO, result={**_result(f"u1 answer {i}")})
    record_turn("s-u2", "u2", AVOCADO)
    record_turn("s-u2", "u2", AZURE)
    record_turn("s-u2", "u2", AVOCADO)
    record_turn("s-u3", "u3", AVOCADO)
    record_turn("s-u3", "u3", CLAUDE)
    record_turn("s-u4", "u4", AVOCADO_14)


def _result(text):
    from tests.transcripts.conftest import public_result

    return public_result(text)


def read_stream(response) -> tuple[list[dict], dict]:
    assert response.streaming
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    return lines[:-1], lines[-1]["manifest"]


def test_opt_out_before_and_after_transcripts_were_written_and_export_counts_match(catalogue_seeded):
    training_opt_out(user_id="u3", actor="test")  # before any of u3's turns
    write_corpus()
    assert TranscriptTurn.objects.filter(user_id="u3", training_eligible=True).count() == 0
    _, n = training_opt_out(user_id="u2", actor="test")  # after u2's turns were written
    assert n == 2  # u2's two native turns became ineligible
    export = TrainingExport()
    lines = list(export.records())
    export.commit()
    records = [json.loads(line) for line in lines]
    assert sorted(r["user_id"] for r in records) == ["u1", "u1", "u1", "u4"]
    m = export.manifest
    assert m["considered"] == 9 and m["records"] == 4 and m["marked_exported"] == 4
    assert m["excluded"] == {
        "external_provider": 2,
        "opted_out": 3,
        "contains_encrypted_reasoning": 0,
        "contains_opaque_blob": 0,
    }
    assert gate_check(records).counts["accepted"] == 4  # what we export, the gate accepts unchanged
    # Exported turns are not exported again; u2 opting back in makes their unexported turns eligible.
    assert training_opt_in(user_id="u2", actor="test") == 2
    again = TrainingExport()
    assert sorted(json.loads(x)["user_id"] for x in again.records()) == ["u2", "u2"]
    assert again.manifest["excluded"] == {
        "external_provider": 2,
        "opted_out": 1,
        "contains_encrypted_reasoning": 0,
        "contains_opaque_blob": 0,
    }


def test_opt_out_is_honoured_at_export_time_even_if_flags_were_not_updated(catalogue_seeded):
    record_turn("s1", "u1", AVOCADO)
    from routing.transcripts.models import TrainingOptOut

    TrainingOptOut.objects.create(user_id="u1")  # written behind the services' back
    export = TrainingExport()
    assert list(export.records()) == []
    assert export.manifest["excluded"]["opted_out"] == 1


def test_export_filters_by_time_range_and_model_version(catalogue_seeded):
    write_corpus()
    old = TranscriptTurn.objects.filter(user_id="u1").order_by("number").first()
    TranscriptTurn.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    since = timezone.now() - timedelta(days=1)
    export = TrainingExport(since=since, model_version="avocado-v15")
    users = sorted(json.loads(x)["user_id"] for x in export.records())
    assert users == ["u1", "u1", "u2", "u2", "u3"]
    assert export.manifest["considered"] == 5  # v15 turns after `since`; the others never looked at
    by_id = TrainingExport(until=since, model_version=AVOCADO)
    assert [json.loads(x)["turn"] for x in by_id.records()] == [1]
    v14 = TrainingExport(model_version="avocado-v14")
    assert [json.loads(x)["user_id"] for x in v14.records()] == ["u4"]


def test_export_api_streams_jsonl_with_a_manifest_and_marks_turns(catalogue_seeded):
    write_corpus()
    client = scoped_client("training:export")
    response = client.post("/api/v1/training/export", {"dry_run": True}, format="json")
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    records, manifest = read_stream(response)
    assert len(records) == manifest["records"] == 7 and manifest["marked_exported"] == 0
    assert not TranscriptTurn.objects.filter(exported_at__isnull=False).exists()

    response = client.post("/api/v1/training/export", {}, format="json")
    records, manifest = read_stream(response)
    assert manifest["records"] == manifest["marked_exported"] == 7
    assert manifest["excluded"]["external_provider"] == 2
    assert set(records[0]) >= {"record_id", "session_id", "turn", "user_id", "provenance", "input", "output"}
    assert TranscriptTurn.objects.filter(exported_at__isnull=False).count() == 7
    records, manifest = read_stream(client.post("/api/v1/training/export", {}, format="json"))
    assert records == [] and manifest["considered"] == 2  # only the external turns remain unexported


def test_an_interrupted_export_stream_marks_nothing(catalogue_seeded):
    write_corpus()
    export = TrainingExport()
    stream = export.lines()  # what the API streams
    next(stream)
    stream.close()  # the client went away
    assert not TranscriptTurn.objects.filter(exported_at__isnull=False).exists()
    with pytest.raises(RuntimeError):
        export.commit()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"model": "x"}, "model"),
    ],
)
def test_export_api_refuses_bad_filters_with_field_errors(db, body, field):
    response = scoped_client("training:export").post("/api/v1/training/export", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_export_api_needs_its_own_scope(db):
    assert (
        scoped_client("ops", "training").post("/api/v1/training/export", {}, format="json").status_code == 403
    )


def test_export_command_writes_jsonl_and_manifest_and_marks_turns(catalogue_seeded, tmp_path, capsys):
    write_corpus()
    training_opt_out(user_id="u1", actor="test")
    out = tmp_path / "train.jsonl"
    call_command(
        "export_training", "--out", str(out), "--model-version", "avocado-v15", "--since", "2000-01-01"
    )
    lines = out.read_text().splitlines()
    assert sorted(json.loads(x)["user_id"] for x in lines) == ["u2", "u2", "u3"]
    manifest = json.loads((tmp_path / "train.jsonl.manifest.json").read_text())
    assert manifest["records"] == 3 and manifest["excluded"]["opted_out"] == 3
    assert json.loads(capsys.readouterr().out) == manifest
    assert TranscriptTurn.objects.filter(exported_at__isnull=False).count() == 3


def test_export_command_rejects_bad_dates(db, tmp_path):
    with pytest.raises(CommandError, match="--since"):
        call_command("export_training", "--out", str(tmp_path / "x.jsonl"), "--since", "soon")
