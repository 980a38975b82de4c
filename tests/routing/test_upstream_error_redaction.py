"""Upstream error text never carries credentials or encrypted reasoning to clients, the database
or the logs.

Live server + a real Celery worker + the simulated upstreams over HTTP, driven through the
official ``openai`` SDK; the upstream's error messages are laced with canaries: a Fernet-like
``encrypted_content`` blob, an ``api-key=...`` pair, the Azure credential the call used, and a
reasoning item id.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings
from django.core.management import call_command

from routing.models import Attempt, CallRecord, CompletionJob
from tests.conftest import UPSTREAM_KEYS, wait_for_records_written
from tests.factories import api_key, seed_catalogue

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AZURE = "azure/muse-special"
FERNET = "gAAAAABnCANARYCANARYCANARYCANARYCANARY12345"
API_KEY_CANARY = "demo-azure-LEAKCANARY"
REASONING_ID = "rs_68a1c0ffee0123456789abcdef012345"
CANARIES = (FERNET, "CANARYCANARY", API_KEY_CANARY, "LEAKCANARY", UPSTREAM_KEYS["azure"], REASONING_ID)

MESSAGES = {
    "reasoning": f"upstream boom encrypted_content={FERNET} api-key={API_KEY_CANARY}",
    "credential": f"upstream boom: the key {UPSTREAM_KEYS['azure']} is rate limited (api-key={API_KEY_CANARY})",
    "item_id": f"Item with id '{REASONING_ID}' not found. Authorization: Bearer {API_KEY_CANARY}",
}


def closed_circuits() -> None:
    """Forget the failures so far: each call below reaches the upstream (no circuit_open)."""
    from routing.guards.circuit import breaker
    from routing.guards.cooling import cooling_clear

    breaker().reset()
    cooling_clear()


def leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


def fail_with(upstreams, message: str, *, status: int = 500, etype: str = "server_error") -> None:
    """``muse-special`` fails with ``message``: an in-stream ``error`` event when streamed, an
    HTTP ``status`` error body when not (with Redis the drop-ins call the upstream non-streamed)."""
    error = {"type": "error", "error": {"message": message, "type": etype, "code": None}}
    upstreams.set_scenario(
        "muse-special",
        wire=[{"json": error, "event": "error"}],
        wire_body={"error": {"message": message, "type": etype, "code": None, "param": None}},
        wire_status=status,
    )


@pytest.fixture
def platform(live_server, upstreams, celery_worker_process, caplog):
    caplog.set_level(logging.DEBUG)
    seed_catalogue(upstreams.url)
    return live_server.url, api_key(["completions"]), upstreams


def everything_stored() -> str:
    """Every row of every table, the worker's log, as text."""
    dump = io.StringIO()
    call_command("dumpdata", "routing", stdout=dump)
    worker_log = Path(settings.VAR_DIR) / "worker-test.log"
    return dump.getvalue() + (worker_log.read_text(errors="replace") if worker_log.exists() else "")


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_upstream_error_text_is_sanitised_everywhere(platform, caplog, case):
    url, key, upstreams = platform
    fail_with(upstreams, MESSAGES[case])
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)

    # Responses, streamed: the failure arrives as response.failed (or a 5xx before the stream)
    events = []
    try:
        with client.responses.create(model=AZURE, input="hi", stream=True) as stream:
            events = [e.model_dump_json() for e in stream]
    except openai.APIStatusError as exc:
        assert leaks(json.dumps(exc.body)) == [] and leaks(str(exc)) == []
    else:
        failed = [e for e in events if '"response.failed"' in e]
        message = json.loads(failed[-1])["response"]["error"]["message"]
        assert "azure/muse-special" in message and "circuit_open" not in message
    assert leaks("\n".join(events)) == [], events

    # Chat Completions, not streamed: a 5xx in OpenAI's error shape, without the canaries
    closed_circuits()
    r = http.post(
        "/v1/chat/completions", json={"model": AZURE, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code >= 500, r.text
    message = r.json()["error"]["message"]
    assert "azure/muse-special: " in message and "circuit_open" not in message
    assert leaks(r.text) == [], r.text

    # the same through the official SDK
    closed_circuits()
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model=AZURE, messages=[{"role": "user", "content": "hi"}])
    assert leaks(json.dumps(err.value.body)) == [] and leaks(str(err.value)) == []

    # the database (jobs' errors, call records, attempts) and the logs
    wait_for_records_written()
    jobs = list(CompletionJob.objects.all())
    assert jobs and all(j.status == "failed" and j.error for j in jobs)
    assert leaks(" ".join(j.error for j in jobs)) == []
    assert CallRecord.objects.exists() and Attempt.objects.exists()
    assert leaks(everything_stored()) == []
    assert leaks(caplog.text) == []


def test_the_project_reasoning_detector_also_judges_provider_error_messages():
    """With Django up (web and worker processes) the detector of ``routing.transcripts.gate``,
    which also decodes base64/hex/JSON layers, judges every provider error message."""
    import base64

    from routing.providers.errors import WITHHELD, ProviderError

    item = json.dumps({"type": "reasoning", "encrypted_content": "c2VjcmV0IHJlYXNvbmluZyBibG9i" * 2})
    encoded = base64.b64encode(item.encode()).decode()
    assert ProviderError(f"azure endpoint x: HTTP 400: bad input {encoded}").message == WITHHELD
    assert (
        ProviderError("azure endpoint x: HTTP 400: bad input").message
        == "azure endpoint x: HTTP 400: bad input"
    )
