"""Schemathesis against our OpenAPI schema, in process (WSGI): no input may cause a 5xx.

Every operation of ``/api/schema/`` gets a bounded number of generated requests (schema-conforming
and not), authenticated with a key holding every scope, and the ``not_a_server_error`` check. The
drop-in ``/v1/*`` endpoints follow vendor specs and are not in our schema; their malformed-input
handling is tested in ``tests/routing/test_dropin.py``. No worker runs: a completion is answered
202 (streamed ones run in process against an empty catalogue and end with an error event).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from muse_experiments.wsgi import application
from tests.factories import api_key

pytestmark = pytest.mark.django_db


schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
#: Generated requests per operation: the suite's default keeps CI bounded; ``make schemathesis-full``
#: runs 1,000 per operation (SCHEMATHESIS_MAX_EXAMPLES=1000).
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "8"))


@pytest.fixture(autouse=True)
def _in_process(settings):
    """Completions are not waited for (no worker: 202); the WSGI calls keep the test's database
    connection open (as Django's test client does)."""
    settings.COMPLETION_SYNC_WAIT_S = 0.01
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
def test_no_generated_request_causes_a_server_error(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {api_key()}"}, checks=[not_a_server_error])
