"""Admin: transcript pages render, the opt-out/opt-in actions go through the services, gate counts show."""

from __future__ import annotations

import pytest

from routing.transcripts.models import GateCounter, TrainingOptOut, Transcript, TranscriptTurn
from tests.transcripts.conftest import AVOCADO, record_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "admin@example.com", "pw-123456789")
    client.force_login(user)
    return client


def test_opt_out_and_back_in_admin_actions_update_unexported_turns(catalogue_seeded, staff_client):
    record_turn("s1", "u1", AVOCADO)
    record_turn("s2", "u2", AVOCADO)
    transcript = Transcript.objects.get(session_id="s1")
    url = "/admin/transcripts/transcript/"
    response = staff_client.post(
        url, {"action": "opt_users_out", "_selected_action": [transcript.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "1 user(s) opted out; 1 unexported turn(s) made ineligible." in response.content.decode()
    assert TrainingOptOut.objects.get(user_id="u1").actor == "admin:admin"
    assert list(TranscriptTurn.objects.filter(training_eligible=True).values_list("user_id", flat=True)) == [
        "u2"
    ]
    staff_client.post(url, {"action": "opt_users_in", "_selected_action": [transcript.pk]})
    assert not TrainingOptOut.objects.exists()
    assert TranscriptTurn.objects.filter(training_eligible=True).count() == 2


def test_adding_an_opt_out_in_the_admin_goes_through_the_service(catalogue_seeded, staff_client):
    record_turn("s1", "u9", AVOCADO)
    response = staff_client.post("/admin/transcripts/trainingoptout/add/", {"user_id": "u9"}, follow=True)
    assert response.status_code == 200
    assert not TranscriptTurn.objects.get(user_id="u9").training_eligible


def test_admin_pages_render_including_gate_counters(catalogue_seeded, staff_client):
    turn = record_turn("s1", "u1", AVOCADO)
    GateCounter.objects.create(name="rejected:contains_encrypted_reasoning", count=7)
    for url in (
        "/admin/transcripts/transcript/",
        f"/admin/transcripts/transcript/{turn.transcript_id}/change/",
        "/admin/transcripts/transcriptturn/",
        "/admin/transcripts/trainingoptout/",
        "/admin/transcripts/trainingrecord/",
    ):
        assert staff_client.get(url).status_code == 200, url
    page = staff_client.get("/admin/transcripts/gatecounter/").content.decode()
    assert "rejected:contains_encrypted_reasoning" in page and ">7<" in page
