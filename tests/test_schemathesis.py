"""Schemathesis against our OpenAPI schema, in process (WSGI): no input may cause a 5xx.

Every operation of ``/api/schema/`` gets generated requests (schema-conforming and not: the
schema's examples, schemathesis' coverage cases, then ``SCHEMATHESIS_MAX_EXAMPLES`` fuzzed ones),
authenticated with one key per operation holding every scope (rate limit out of reach, so no
request is answered 429 instead of reaching the view), and the ``not_a_server_error`` check. The
drop-in ``/v1/*`` endpoints follow vendor specs and are not in our schema; their malformed-input
handling is tested in ``tests/routing/dropin/test_endpoints.py``. No worker runs: a completion is answered
202 (streamed ones end with an error event).

Each operation's test records how many requests it sent, per phase, and why Hypothesis stopped
(``schemathesis_cases`` in the report's user properties); ``tests/conftest.py`` prints the table
at the end of the run (also under pytest-xdist: ``make schemathesis-full`` runs two processes).
"""

from __future__ import annotations

import collections
import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from muse_experiments.api.auth import MAX_RATE_LIMIT_PER_MINUTE, api_key_create
from muse_experiments.wsgi import application
from tests.factories import ALL_SCOPES

pytestmark = pytest.mark.django_db


schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
#: Fuzzed requests per operation: the suite's default keeps CI bounded; ``make schemathesis-full``
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


@pytest.fixture
def auth_headers(db) -> dict[str, str]:
    """One key per operation (every generated request of the operation uses it), with the highest
    rate limit: no run reaches it, so no 429 stands in for the view's answer."""
    _, raw = api_key_create(
        name="schemathesis", scopes=ALL_SCOPES, rate_limit_per_minute=MAX_RATE_LIMIT_PER_MINUTE
    )
    return {"Authorization": f"Bearer {raw}"}


@pytest.fixture
def sent(request):
    """Counts the requests this operation's test sends, per phase; records them with Hypothesis'
    reason for stopping as ``("schemathesis_cases", {...})`` in the report's user properties.
    Fails the operation when Hypothesis gave up generating (most drawn inputs invalid)."""
    counts: collections.Counter[str] = collections.Counter()
    labels: list[str] = []
    yield counts, labels
    stats = getattr(request.node, "hypothesis_statistics", "")
    stopped = next(
        (line.strip()[len("- ") :] for line in stats.splitlines() if "Stopped because" in line), ""
    )
    record = {"operation": labels[0] if labels else "?", "phases": dict(counts), "stopped": stopped}
    request.node.user_properties.append(("schemathesis_cases", record))
    # fewer fuzzed requests than asked is fine only when Hypothesis ran out of distinct inputs
    # ("nothing left to do"), not when it kept failing to generate them
    assert "satisfied assumptions" not in stopped, f"{record}: generation gave up"


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
def test_no_generated_request_causes_a_server_error(case, auth_headers, sent):
    counts, labels = sent
    labels[:] = [f"{case.operation.method.upper()} {case.operation.path}"]
    counts[case._meta.phase.name.value if case._meta else "explicit"] += 1
    case.call_and_validate(headers=auth_headers, checks=[not_a_server_error])
