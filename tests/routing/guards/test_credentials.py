"""Credentials come from the environment or *_FILE secrets, and never leak anywhere (canary test)."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command

from muse_experiments.api.auth import api_key_create
from muse_experiments.experiments.models import AuditEntry
from routing.catalogue import avocado_id
from routing.guards.credentials import MissingCredential, fingerprint, resolve_credential
from routing.models import CallRecord, CompletionJob, ModelEndpoint, Provider
from routing.ops_services import kill_switch_set
from routing.simulated import FakeUpstreams
from tests.conftest import allow_simulated_upstream, forget_simulated_upstream
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

CANARY = "sk-canary-7f3a9c2e41b8d6f0a5"
CANARY_REJECTED = "sk-canary-7f3aREJECTED0b1c2d3"
NATIVE_KEY = "sk-native-ok-0123456789"


def test_the_credential_is_read_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("MUSE_TEST_KEY", "  secret-value \n")
    monkeypatch.delenv("MUSE_TEST_KEY_FILE", raising=False)
    assert resolve_credential("MUSE_TEST_KEY") == "secret-value"


def test_a_secret_file_wins_over_the_variable(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("from-file\n")
    monkeypatch.setenv("MUSE_TEST_KEY", "from-env")
    monkeypatch.setenv("MUSE_TEST_KEY_FILE", str(secret))
    assert resolve_credential("MUSE_TEST_KEY") == "from-file"


def test_an_unreadable_secret_file_names_only_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MUSE_TEST_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(MissingCredential, match=r"^MUSE_TEST_KEY_FILE is set but unreadable"):
        resolve_credential("MUSE_TEST_KEY")


def test_a_missing_credential_says_which_variable(monkeypatch):
    monkeypatch.delenv("MUSE_TEST_KEY", raising=False)
    monkeypatch.delenv("MUSE_TEST_KEY_FILE", raising=False)
    with pytest.raises(MissingCredential, match="MUSE_TEST_KEY is not set"):
        resolve_credential("MUSE_TEST_KEY")


def test_a_fingerprint_is_short_stable_and_not_the_secret():
    assert fingerprint(CANARY) == fingerprint(CANARY)
    assert len(fingerprint(CANARY)) == 12 and fingerprint(CANARY) not in CANARY


@pytest.fixture
def canary_upstreams(monkeypatch, tmp_path):
    """Upstreams that accept the canary as the Azure key and reject the Anthropic one; the Azure
    key is given as a *_FILE secret, the Anthropic one as a variable."""
    from routing.catalogue import endpoint_seeds

    fake = FakeUpstreams(api_keys={"native": NATIVE_KEY, "azure": CANARY, "anthropic": "sk-ant-other"})
    fake.add_models(*(e.upstream_model for e in endpoint_seeds()))
    fake.start()
    entry = allow_simulated_upstream(fake.url)
    secret = tmp_path / "azure-key"
    secret.write_text(CANARY)
    monkeypatch.setenv("AVOCADO_API_KEY", NATIVE_KEY)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY_FILE", str(secret))
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY_REJECTED)
    yield fake
    forget_simulated_upstream(entry)
    fake.stop()


def _leaks(text: str) -> list[str]:
    return [c for c in (CANARY, CANARY_REJECTED, "7f3a9c2e41b8", "REJECTED0b1c2d3") if c in text]


@pytest.mark.django_db
def test_a_canary_credential_never_appears_in_logs_database_responses_admin_or_errors(
    canary_upstreams, caplog, client, admin_client, settings
):
    caplog.set_level(logging.DEBUG)
    settings.ROUTING_MAX_RETRIES = 1
    settings.ROUTING_BACKOFF_BASE_MS = 1.0
    seed_catalogue(canary_upstreams.url)
    make_experiment(
        arms=[
            ("control", avocado_id(14), 0.0),
            ("azure", "azure/muse-special", 0.5),
            ("claude", "anthropic/claude-sonnet-5-5", 0.5),
        ]
    )
    jobs = [run(job(session_id=f"s-{i}", user_id=f"u-{i}")) for i in range(6)]
    canary_upstreams.set_scenario("muse-special", failure="server_error")
    jobs += [run(job(session_id=f"t-{i}", user_id=f"v-{i}")) for i in range(6)]
    canary_upstreams.set_scenario("avocado-v14", failure="auth")
    canary_upstreams.set_scenario("avocado-v15", failure="bad_request")
    jobs += [run(job(session_id=f"w-{i}", user_id=f"x-{i}")) for i in range(4)]
    kill_switch_set(scope="provider", target="azure", active=True, reason="canary drill", actor="ops")

    # the scenario really exercised success, 5xx, auth failures and a failed job
    outcomes = set(
        CallRecord.objects.filter(job__in=jobs).values_list("attempts__outcome", flat=True).distinct()
    )
    assert {"ok", "UpstreamUnavailable", "AuthFailed", "ClientRequestError"} <= outcomes
    assert CompletionJob.objects.filter(
        status="succeeded", result__served_model="azure/muse-special"
    ).exists()
    failed = CompletionJob.objects.filter(status="failed")
    assert failed.exists()

    # logs (DEBUG, every logger, SDKs included)
    assert _leaks(caplog.text) == []
    # the database: every row of every table
    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    assert "azure/muse-special" in dump.getvalue()
    assert _leaks(dump.getvalue()) == []
    # error messages stored on failed jobs
    assert _leaks(" ".join(failed.values_list("error", flat=True))) == []
    # API responses
    owner, raw_key = api_key_create(name="canary", scopes=["completions", "ops"])
    CompletionJob.objects.update(api_key=owner)  # jobs are visible to the key that created them
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw_key}"}
    for j in jobs:
        response = client.get(f"/api/v1/completions/{j.id}", **headers)
        assert response.status_code == 200 and _leaks(response.content.decode()) == []
    assert _leaks(client.get("/api/v1/ops/kill-switches", **headers).content.decode()) == []
    # admin pages
    pages = ["/admin/routing/provider/", "/admin/routing/modelendpoint/", "/admin/routing/callrecord/"]
    pages += [f"/admin/routing/provider/{p.pk}/change/" for p in Provider.objects.all()]
    pages += [f"/admin/routing/callrecord/{c.pk}/change/" for c in CallRecord.objects.all()[:20]]
    pages += ["/admin/muse_experiments/auditentry/"]
    pages += [
        f"/admin/routing/modelendpoint/{ModelEndpoint.objects.get(public_id='azure/muse-special').pk}/change/"
    ]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert _leaks(response.content.decode()) == [], page
    assert AuditEntry.objects.exists()
