"""APIs: training opt-out, session end, and the ingestion gate endpoint."""

from __future__ import annotations

import base64
import json
import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from muse_experiments.api.auth import api_key_create
from muse_experiments.experiments.models import ApiKey
from routing import reasoning_store
from routing.models import CompletionJob
from routing.providers.types import ReasoningState
from routing.reasoning_store import OwnedSession, session_owner
from routing.transcripts.gate import record_json
from routing.transcripts.models import GateCounter, TrainingOptOut, TrainingRecord
from routing.transcripts.selectors import gate_totals
from tests.transcripts.conftest import AVOCADO, make_job, record_turn, scoped_client
from tests.transcripts.test_gate import TRICKY, record

pytestmark = pytest.mark.django_db


def test_opt_out_api_opts_out_and_back_in_and_updates_unexported_turns(catalogue_seeded):
    record_turn("s1", "u1", AVOCADO)
    record_turn("s1", "u1", AVOCADO)
    client = scoped_client("training")
    response = client.post("/api/v1/users/u1/training-opt-out")
    assert response.status_code == 200
    assert response.json() == {"user_id": "u1", "opted_out": True, "turns_changed": 2}
    assert client.post("/api/v1/users/u1/training-opt-out").json()["turns_changed"] == 0  # idempotent
    assert client.get("/api/v1/users/u1/training-opt-out").json()["opted_out"] is True
    assert re.fullmatch(r"api-key:test \([^)]+\)", TrainingOptOut.objects.get(user_id="u1").actor)
    response = client.delete("/api/v1/users/u1/training-opt-out")
    assert response.json() == {"user_id": "u1", "opted_out": False, "turns_changed": 2}
    assert not TrainingOptOut.objects.exists()


def test_opt_out_api_needs_the_training_scope(db):
    assert scoped_client("completions").post("/api/v1/users/u1/training-opt-out").status_code == 403


STATE = ReasoningState(
    "fp", "azure_openai", "responses", ({"type": "reasoning", "encrypted_content": "gAAAAAx"},)
)


def key_client(name: str) -> tuple[APIClient, ApiKey]:
    """A client authenticated with a new ``completions`` key, and that key."""
    key, raw = api_key_create(name=name, scopes=["completions"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client, key


def started(session_id: str, key: ApiKey | None, states: int = 1) -> OwnedSession:
    """A session that ``key`` (None: a signed-in user) started: its job and ``states`` stored states."""
    job = make_job(session_id, "u1")
    CompletionJob.objects.filter(pk=job.pk).update(api_key=key)
    session = OwnedSession(owner=session_owner(api_key_id=key.pk if key else None), session_id=session_id)
    for _ in range(states):
        reasoning_store.reasoning_save(session=session, state=STATE, endpoint_id="azure/muse-special")
    return session


def test_session_end_api_deletes_the_sessions_reasoning(db, redis_store):
    client, key = key_client("a")
    started("s-end", key)
    response = client.post("/api/v1/sessions/s-end/end")
    assert response.status_code == 200
    assert response.json() == {"session_id": "s-end", "deleted_states": 1}
    assert client.post("/api/v1/sessions/s-end/end").json() == {"session_id": "s-end", "deleted_states": 0}


@pytest.mark.redis
def test_a_key_cannot_end_another_keys_session_it_gets_a_404_and_nothing_changes(db, redis_store):
    """Issue 30, finding 4: key B ending key A's session used to answer ``deleted_states: 2``."""
    client_a, key_a = key_client("a")
    client_b, _ = key_client("b")
    session_a = started("s-shared", key_a, states=2)

    response = client_b.post("/api/v1/sessions/s-shared/end")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": "not_found", "message": "No session 's-shared' was started with this API key."}
    }
    assert redis_store.llen("muse:reasoning:" + session_a.store_key) == 2  # A's reasoning is untouched
    assert client_a.post("/api/v1/sessions/s-shared/end").json() == {
        "session_id": "s-shared",
        "deleted_states": 2,
    }


@pytest.mark.redis
def test_two_keys_with_one_session_id_end_only_their_own_session(db, redis_store):
    client_a, key_a = key_client("a")
    client_b, key_b = key_client("b")
    session_a = started("s-both", key_a, states=2)
    session_b = started("s-both", key_b, states=1)
    assert client_b.post("/api/v1/sessions/s-both/end").json()["deleted_states"] == 1
    assert redis_store.llen("muse:reasoning:" + session_a.store_key) == 2
    assert not redis_store.exists("muse:reasoning:" + session_b.store_key)
    assert client_b.post("/api/v1/sessions/s-both/end").json()["deleted_states"] == 0  # B's, still 200
    assert client_a.post("/api/v1/sessions/s-both/end").json()["deleted_states"] == 2


@pytest.mark.redis
def test_a_signed_in_user_ends_only_sessions_started_without_a_key(db, redis_store):
    """Session-cookie callers act as the keyless source: never a key's session, whatever their
    permissions (a superuser here)."""
    _, key_a = key_client("a")
    session_a = started("s-keyed", key_a)
    keyless = started("s-keyless", None, states=2)
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = APIClient()
    client.force_login(admin)

    refused = client.post("/api/v1/sessions/s-keyed/end")
    assert refused.status_code == 404
    assert refused.json()["error"] == {
        "code": "not_found",
        "message": "No session 's-keyed' was started without an API key.",
    }
    assert redis_store.llen("muse:reasoning:" + session_a.store_key) == 1
    assert client.post("/api/v1/sessions/s-keyless/end").json() == {
        "session_id": "s-keyless",
        "deleted_states": 2,
    }
    assert not redis_store.exists("muse:reasoning:" + keyless.store_key)


def test_session_end_api_answers_503_without_details_when_redis_is_down(db, settings):
    settings.REASONING_STORE_URL = "redis://127.0.0.1:1/0"
    response = scoped_client("completions").post("/api/v1/sessions/s1/end")
    assert response.status_code == 503
    assert response.json() == {
        "error": {"code": "unavailable", "message": "Session store unavailable; retry."}
    }


def ingest(client, records):
    return client.post("/api/v1/training/ingest", {"records": records}, format="json")


def test_ingest_stores_clean_avocado_records_unchanged_and_is_idempotent(db):
    client = scoped_client("training:ingest")
    clean = [record(i) for i in range(3)]
    response = ingest(client, clean)
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("received", "accepted", "duplicates", "rejected")} == {
        "received": 3,
        "accepted": 3,
        "duplicates": 0,
        "rejected": 0,
    }
    for original in clean:
        stored = TrainingRecord.objects.get(record_id=original["record_id"])
        assert stored.body == record_json(original)  # byte-equal canonical JSON, keys in sent order
        assert json.loads(stored.body) == original
    again = ingest(client, clean).json()
    assert again["accepted"] == 0 and again["duplicates"] == 3
    assert [r["status"] for r in again["results"]] == ["duplicate"] * 3
    changed = ingest(client, [{**clean[0], "output": {"text": "different"}}]).json()
    assert changed["results"][0]["reasons"] == ["record_id_conflict"]
    assert TrainingRecord.objects.count() == 3


def test_ingest_rejects_the_tricky_corpus_and_stores_nothing_of_it(db):
    client = scoped_client("training:ingest")
    TrainingOptOut.objects.create(user_id="u-out")
    tricky = [TRICKY[name]() for name in sorted(TRICKY) if "huge" not in name and "deep" not in name]
    batch = [
        record(1000),
        *tricky,
        record(1001, provenance="external", provider_kind="anthropic"),
        record(1002, user_id="u-out"),
        ["not", "a", "record"],
        record(1003),
    ]
    body = ingest(client, batch).json()
    assert body["received"] == len(batch)
    assert body["accepted"] == 2 and body["rejected"] == len(batch) - 2
    assert body["rejected_by_reason"] == {
        "contains_encrypted_reasoning": len(tricky),
        "external_provider": 1,
        "invalid_record": 1,
        "opted_out": 1,
    }
    assert body["results"][len(tricky) + 3] == {
        "index": len(tricky) + 3,
        "record_id": None,
        "status": "rejected",
        "reasons": ["invalid_record"],
        "detail": "record must be a JSON object, not list",
    }
    assert sorted(TrainingRecord.objects.values_list("record_id", flat=True)) == ["rec-1000", "rec-1003"]
    stored = "".join(TrainingRecord.objects.values_list("body", flat=True))
    assert "gAAAAA" not in stored and "signature" not in stored
    totals = gate_totals()
    assert totals["accepted"] == 2
    assert totals["rejected:contains_encrypted_reasoning"] == len(tricky)
    assert totals["rejected:opted_out"] == 1
    ingest(client, [record(1000)])
    assert GateCounter.objects.get(name="duplicate").count == 1


def test_ingest_response_never_echoes_rejected_content(db):
    client = scoped_client("training:ingest")
    body = ingest(client, [TRICKY["base64-json-thinking"](), TRICKY["fernet-blob-in-plain-text"]()]).content
    from tests.transcripts.test_gate import BLOB, SIGNATURE

    assert BLOB.encode() not in body and SIGNATURE.encode() not in body
    assert base64.b64encode(SIGNATURE.encode())[:20] not in body


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"records": []}, "records"),
        ({"records": "x"}, "records"),
        ({}, "records"),
        ({"records": [record(1)], "extra": 1}, "extra"),
    ],
)
def test_ingest_refuses_malformed_batches_with_field_errors(db, payload, field):
    response = scoped_client("training:ingest").post("/api/v1/training/ingest", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not TrainingRecord.objects.exists()


def test_ingest_needs_its_scope(db):
    assert ingest(scoped_client("training:export"), [record(1)]).status_code == 403


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/users/%20alice/training-opt-out", "user_id"),
        ("/api/v1/users/alice%20/training-opt-out", "user_id"),
        ("/api/v1/users/alice%E2%80%8B/training-opt-out", "user_id"),
        ("/api/v1/users/alice%00/training-opt-out", "user_id"),
        ("/api/v1/users/alice%CC%81/training-opt-out", "user_id"),
        (f"/api/v1/users/{'a' * 201}/training-opt-out", "user_id"),
        ("/api/v1/sessions/%00/end", "session_id"),
        ("/api/v1/sessions/%20s1/end", "session_id"),
        ("/api/v1/sessions/s1%E2%80%8B/end", "session_id"),
    ],
)
def test_path_ids_that_break_the_unit_id_rule_are_400s_and_change_nothing(path, field):
    scope = "training" if field == "user_id" else "completions"
    response = scoped_client(scope).post(path)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
    assert not TrainingOptOut.objects.exists()


def test_opted_out_users_id_variants_cannot_bring_records_in(db):
    assert scoped_client("training").post("/api/v1/users/alice/training-opt-out").status_code == 200
    batch = [
        record(1, user_id="alice"),
        record(2, user_id="alice "),
        record(3, user_id="alice\u200b"),
        record(4, user_id="bob", session_id="s\u200b"),
        record(5, user_id="bob"),
    ]
    body = ingest(scoped_client("training:ingest"), batch).json()
    assert [(r["status"], r["reasons"]) for r in body["results"]] == [
        ("rejected", ["opted_out"]),
        ("rejected", ["invalid_record"]),
        ("rejected", ["invalid_record"]),
        ("rejected", ["invalid_record"]),
        ("accepted", []),
    ]
    assert list(TrainingRecord.objects.values_list("record_id", "user_id")) == [("rec-5", "bob")]


@pytest.mark.parametrize("method", ["post", "delete"])
def test_opt_out_api_refuses_a_body_field_as_unknown(db, method):
    """``{"extra": 1}`` was ignored (200, the user opted out); every other API refuses it."""
    response = getattr(scoped_client("training"), method)(
        "/api/v1/users/u1/training-opt-out", {"extra": 1}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"extra": ["Unknown field."]}
    assert not TrainingOptOut.objects.exists()
