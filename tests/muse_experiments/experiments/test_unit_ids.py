"""One rule for session and user ids at every entry point (issue 11 §5): ids are hashed exactly as
sent, so nothing trims or normalises them; ambiguous ids are refused with a 400 / form error."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from muse_experiments.experiments.forms import ForcedAssignmentForm
from muse_experiments.experiments.validation import unit_id_problem
from routing.models import CompletionJob
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db

REFUSED = {
    "leading space": " u1",
    "trailing newline": "u1\n",
    "tab inside at the end": "u1\t",
    "NUL": "u\x001",
    "zero-width space": "u\u200b1",
    "decomposed e-acute (NFD)": "caf" + "e\u0301",
    "line separator": "u\u20281",
    "too long": "u" * 201,
}
ACCEPTED = ["u1", "café", "ユーザー-7", "a b", "x" * 200]


@pytest.mark.parametrize("value", list(REFUSED.values()), ids=list(REFUSED))
def test_the_rule_refuses_ids_that_could_differ_invisibly(value):
    assert unit_id_problem(value)


@pytest.mark.parametrize("value", ACCEPTED)
def test_the_rule_accepts_canonical_ids_including_nfc_unicode(value):
    assert unit_id_problem(value) is None


def client_with(*scopes):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(list(scopes))}")
    return c


@pytest.mark.parametrize("field", ["session_id", "user_id"])
@pytest.mark.parametrize("value", [" u1", "u1 ", "caf" + "e\u0301"], ids=["leading", "trailing", "nfd"])
def test_the_completions_api_refuses_ambiguous_ids_with_a_400_and_stores_nothing(field, value):
    body = {
        "session_id": "s-1",
        "user_id": "u-1",
        "messages": [{"role": "user", "content": "hi"}],
        field: value,
    }
    response = client_with("completions").post("/api/v1/completions", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert CompletionJob.objects.count() == 0


def test_the_completions_api_keeps_an_nfc_unicode_id_exactly(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    body = {
        "session_id": "sitzung-ä",
        "user_id": "café",
        "messages": [{"role": "user", "content": "hi"}],
        "async": True,
    }
    response = client_with("completions").post("/api/v1/completions", body, format="json")
    assert response.status_code == 202, response.content
    job = CompletionJob.objects.get()
    assert (job.session_id, job.user_id) == ("sitzung-ä", "café")


def test_the_events_api_and_the_preview_apply_the_same_rule():
    events = client_with("events").post(
        "/api/v1/events", {"event_id": "e-1", "name": "task_success", "user_id": "u1 "}, format="json"
    )
    assert events.status_code == 400
    assert events.json()["error"]["fields"]["events"]["0"]["user_id"] == [
        "Remove the whitespace at the start or end: ids are used exactly as sent."
    ]
    preview = client_with("analytics:read").post(
        "/api/v1/experiments/preview-assignment", {"session_id": "\tu1"}, format="json"
    )
    assert preview.status_code == 400 and "session_id" in preview.json()["error"]["fields"]


def test_the_anthropic_drop_in_refuses_an_ambiguous_metadata_user_id():
    response = client_with("completions").post(
        "/v1/messages",
        {
            "model": "muse-default",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"user_id": "u1 "},
        },
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["message"] == (
        "'metadata.user_id': Remove the whitespace at the start or end: ids are used exactly as sent."
    )
    assert CompletionJob.objects.count() == 0


CHAT = {"model": "muse-default", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        (
            {"user": " a"},
            "user",
            "'user': Remove the whitespace at the start or end: ids are used exactly as sent.",
        ),
        ({"user": 5}, "user", "'user' must be a string."),
        ({"user": 5.5}, "user", "'user' must be a string."),
        ({"metadata": "x"}, "metadata", "'metadata' must be an object."),
        ({"metadata": {"user_id": 5}}, "metadata.user_id", "'metadata.user_id' must be a string."),
        ({"metadata": {"session_id": "s\u200b"}}, "metadata.session_id", None),
    ],
)
def test_the_openai_drop_in_names_the_body_field_of_a_bad_or_mistyped_id(extra, param, message):
    """A bad id names the field it came from; a mistyped one is refused, not ignored (ignoring it
    made the call an anonymous unit of its own)."""
    response = client_with("completions").post("/v1/chat/completions", {**CHAT, **extra}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == param
    if message:
        assert response.json()["error"]["message"] == message
    assert CompletionJob.objects.count() == 0


def test_a_qa_pin_with_an_ambiguous_unit_id_is_a_form_error(upstreams):
    seed_catalogue(upstreams.url)
    experiment = make_experiment()
    variant = experiment.variants.first()
    bad = ForcedAssignmentForm(data={"unit_id": " qa-1", "variant": variant.pk, "note": ""})
    assert not bad.is_valid() and "unit_id" in bad.errors
    good = ForcedAssignmentForm(data={"unit_id": "qa-1", "variant": variant.pk, "note": ""})
    good.is_valid()
    assert "unit_id" not in good.errors
