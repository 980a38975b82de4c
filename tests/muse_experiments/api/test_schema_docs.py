"""The API reference reads as words (issue 32: Redoc listed raw operation ids such as
``v1_experiments_results_compute_create``) and the site has a favicon."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator


def test_every_operation_has_a_readable_summary_and_id():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = [op for path in schema["paths"].values() for op in path.values()]
    assert len(operations) >= 17
    for op in operations:
        assert re.fullmatch(r"[a-z]+[A-Za-z]*", op["operationId"]), op["operationId"]
        assert op["summary"][0].isupper() and "_" not in op["summary"], op["summary"]
    ids = {op["operationId"] for op in operations}
    assert {"createCompletion", "computeResults", "setKillSwitch"} <= ids and len(ids) == len(operations)


@pytest.mark.django_db
def test_favicon_ico_leads_to_the_site_icon():
    response = Client().get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("muse_experiments/favicon.svg")


@pytest.mark.django_db
def test_redoc_loads_nothing_from_a_cdn():
    body = Client().get("/api/redoc/").content.decode()
    assert "fonts.googleapis.com" not in body
    assert 'rel="icon"' in body
    assert re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", body) == []  # nothing from another host
