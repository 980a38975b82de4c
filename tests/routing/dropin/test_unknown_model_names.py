"""What a drop-in says when ``model`` names no model: the aliases in words, and the id to pin
when the caller sent a version label (``avocado-v14``), as the rest of the API accepts."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from routing.catalogue import avocado_id
from routing.models import CompletionJob
from tests.factories import api_key, seed_catalogue

pytestmark = pytest.mark.django_db


@pytest.fixture
def client():
    seed_catalogue()
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['completions'])}")
    return c


def _chat(client: APIClient, model: str):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return client.post("/v1/chat/completions", body, format="json")


def test_a_version_label_is_a_404_that_names_the_model_id_to_pin(client):
    response = _chat(client, "avocado-v14")
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert error["message"] == (
        "The model 'avocado-v14' does not exist. Use 'muse-default' (the experiments decide) or a "
        f"catalogue model id. 'avocado-v14' is a version label: pin the model by its id, '{avocado_id(14)}'."
    )
    assert not CompletionJob.objects.exists()


def test_an_unknown_name_lists_the_alias_in_words_not_as_a_python_list(client):
    message = _chat(client, "gpt-imaginary").json()["error"]["message"]
    assert message == (
        "The model 'gpt-imaginary' does not exist. Use 'muse-default' (the experiments decide) or a "
        "catalogue model id."
    )
