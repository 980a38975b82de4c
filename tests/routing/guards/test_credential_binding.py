"""Provider credentials are bound to their hosts (issue 30, finding 2).

A catalogue editor pointed the Anthropic provider at a listener on 127.0.0.1 and the next routed
call delivered the key there; ``credential_env=SECRET_KEY`` delivered Django's secret key. Now
the binding (settings ``PROVIDER_CREDENTIAL_HOSTS`` / ``SIMULATED_UPSTREAMS``) is checked where
the catalogue is written and again before every upstream call, changing where a credential goes
needs ``routing.change_provider_endpoint``, and the audit keeps old and new values.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from muse_experiments.experiments.models import AuditEntry
from muse_experiments.infra.config_version import invalidate_all
from routing.catalogue import avocado_id
from routing.guards.credentials import CredentialBinding, CredentialNotAllowed, credential_for
from routing.jobs import completion_job_create
from routing.models import Attempt, CompletionJob, Provider
from routing.pipeline.streaming import stream_job_events
from tests.conftest import REPO, UPSTREAM_KEYS, allow_simulated_upstream, forget_simulated_upstream
from tests.factories import UNUSED_UPSTREAM, make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

CLAUDE = "anthropic/claude-sonnet-5-5"
AZURE = "azure/muse-special"
CONTROL = avocado_id(14)
#: What SECRET_KEY holds in the tests that point a provider at it.
DJANGO_SECRET = "django-secret-canary-5e1d7a"
SECRETS = (*UPSTREAM_KEYS.values(), DJANGO_SECRET, "insecure-development-only-key")


# ---- the binding itself: host matching and start-up refusals (no database) ----------------------

BINDING = CredentialBinding.build(
    {
        "ANTHROPIC_API_KEY": ["api.anthropic.com"],
        "AZURE_OPENAI_API_KEY": ["*.openai.azure.com", "*.cognitiveservices.azure.com"],
        "AVOCADO_API_KEY": ["avocado.internal.example:8443"],
        "IDN_API_KEY": ["bücher.example"],
    },
    ["127.0.0.1:8900", "[::1]:8901", "localhost:8902"],
)

A, Z, V = "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "AVOCADO_API_KEY"


@pytest.mark.parametrize(
    ("env_name", "url", "refused_field"),
    [
        # the bound host, however it is spelled
        (A, "https://api.anthropic.com", None),
        (A, "https://api.anthropic.com/", None),
        (A, "https://api.anthropic.com/v1", None),
        (A, "https://API.Anthropic.COM", None),
        (A, "https://api.anthropic.com:443", None),
        # another port, scheme or host that only looks like it
        (A, "https://api.anthropic.com:8443", "base_url"),
        (A, "http://api.anthropic.com", "base_url"),
        (A, "ftp://api.anthropic.com", "base_url"),
        (A, "https://api.anthropic.com.evil.example", "base_url"),
        (A, "https://evilapi.anthropic.com", "base_url"),
        (A, "https://x.api.anthropic.com", "base_url"),
        (A, "https://api.anthropic.com.", "base_url"),  # trailing dot
        (A, "https://api.anthropic.com%2eevil.example", "base_url"),
        (A, "https://\u0430pi.anthropic.com", "base_url"),  # Cyrillic "а": another host (punycode)
        (A, "https://\uff41pi.anthropic.com", "base_url"),  # full-width "ａ": not a valid IDN
        # user information, query, fragment, backslash, whitespace: parsers disagree on these
        (A, "https://api.anthropic.com@evil.example", "base_url"),
        (A, "https://user:pw@api.anthropic.com", "base_url"),
        (A, "https://evil.example#@api.anthropic.com", "base_url"),
        (A, "https://evil.example?@api.anthropic.com", "base_url"),
        (A, "https://api.anthropic.com\\@evil.example", "base_url"),
        (A, " https://api.anthropic.com", "base_url"),
        (A, "https://api.anthropic.com/v1\r\nHost: evil.example", "base_url"),
        (A, "https://api.anthropic.com:", "base_url"),
        (A, "https://api.anthropic.com:0", "base_url"),
        (A, "https://api.anthropic.com:99999", "base_url"),
        # a leading "*." label: exactly one label in front
        (Z, "https://muse.openai.azure.com", None),
        (Z, "https://muse.openai.azure.com/openai/v1/", None),
        (Z, "https://muse.cognitiveservices.azure.com", None),
        (Z, "https://openai.azure.com", "base_url"),
        (Z, "https://a.b.openai.azure.com", "base_url"),
        (Z, "https://muse-openai.azure.com", "base_url"),
        (Z, "https://muse.openai.azure.com.evil.example", "base_url"),
        (Z, "https://*.openai.azure.com", "base_url"),
        (Z, "https://-x.openai.azure.com", "base_url"),
        (Z, "https://api.anthropic.com", "base_url"),  # another variable's host
        # a configured port is that port
        (V, "https://avocado.internal.example:8443/v1", None),
        (V, "https://avocado.internal.example/v1", "base_url"),
        # internationalised names compare after IDNA and lowercasing
        ("IDN_API_KEY", "https://BÜCHER.example", None),
        ("IDN_API_KEY", "https://xn--bcher-kva.example", None),
        # the simulated upstreams: exactly their loopback host and port, http or https
        (A, "http://127.0.0.1:8900", None),
        (A, "https://127.0.0.1:8900/v1", None),
        (V, "http://127.0.0.1:8900/v1", None),
        (A, "http://127.0.0.1:8901", "base_url"),
        (A, "http://127.0.0.1", "base_url"),
        (A, "http://localhost:8900", "base_url"),
        (A, "http://localhost:8902", None),
        (A, "http://[::1]:8901", None),
        (A, "http://[0:0:0:0:0:0:0:1]:8901", None),
        (A, "http://[::1]:8900", "base_url"),
        (A, "http://[::ffff:127.0.0.1]:8900", "base_url"),
        (A, "http://[::1%25lo]:8901", "base_url"),
        (A, "http://127.1:8900", "base_url"),
        (A, "http://2130706433:8900", "base_url"),
        (A, "http://0x7f.0.0.1:8900", "base_url"),
        (A, "http://127.0.0.01:8900", "base_url"),
        (A, "http://127.0.0.1.:8900", "base_url"),
        (A, "http://user@127.0.0.1:8900", "base_url"),
        # variables outside the binding go nowhere, simulated upstreams included
        ("SECRET_KEY", "https://api.anthropic.com", "credential_env"),
        ("DATABASE_URL", "http://127.0.0.1:8900", "credential_env"),
    ],
)
def test_a_credential_goes_only_to_its_bound_hosts(env_name, url, refused_field):
    refusal = BINDING.refusal(env_name=env_name, base_url=url)
    assert list(refusal) == ([refused_field] if refused_field else [])


def test_a_refusal_names_what_is_allowed():
    refusal = BINDING.refusal(env_name=A, base_url="http://127.0.0.1:4444")
    assert refusal["base_url"].startswith("ANTHROPIC_API_KEY may not be sent to http://127.0.0.1:4444; ")
    assert "https://api.anthropic.com" in refusal["base_url"] and "127.0.0.1:8900" in refusal["base_url"]
    unbound = BINDING.refusal(env_name="SECRET_KEY", base_url="https://api.anthropic.com")
    assert "SECRET_KEY is not a provider credential variable" in unbound["credential_env"]
    assert "ANTHROPIC_API_KEY, AVOCADO_API_KEY, AZURE_OPENAI_API_KEY" in unbound["credential_env"]


@pytest.mark.parametrize(
    ("hosts", "simulated", "message"),
    [
        ({"SECRET_KEY": ["api.example.com"]}, [], "names SECRET_KEY"),
        ({"DATABASE_URL": ["api.example.com"]}, [], "names DATABASE_URL"),
        ({"REDIS_URL": ["api.example.com"]}, [], "names REDIS_URL"),
        ({"CELERY_BROKER_URL": ["api.example.com"]}, [], "names CELERY_BROKER_URL"),
        ({"METRICS_TOKEN": ["api.example.com"]}, [], "names METRICS_TOKEN"),
        ({"DJANGO_ANYTHING": ["api.example.com"]}, [], "names DJANGO_ANYTHING"),
        ({"SECRET_KEY_FILE": ["api.example.com"]}, [], "names SECRET_KEY_FILE"),
        ({"MUSE_VAR_DIR": ["api.example.com"]}, [], "names MUSE_VAR_DIR"),  # read by the settings
        ({"api_key": ["api.example.com"]}, [], "not an environment variable name"),
        ({"K": ["*.com"]}, [], "at least two labels"),
        ({"K": ["api.*.example.com"]}, [], "whole leading label"),
        ({"K": ["*"]}, [], "whole leading label"),
        ({"K": ["127.0.0.1"]}, [], "IP addresses and loopback hosts"),
        ({"K": ["localhost"]}, [], "IP addresses and loopback hosts"),
        ({"K": ["https://api.example.com"]}, [], "not a URL"),
        ({"K": ["api.example.com/v1"]}, [], "not a URL"),
        ({"K": ["api..example.com"]}, [], "not a host name"),
        ({"K": ["api.example.com."]}, [], "not a host name"),
        ({"K": ["api.example.com:0"]}, [], "the port must be"),
        ({"K": ["api.example.com"]}, ["10.0.0.5:8900"], "loopback host"),
        ({"K": ["api.example.com"]}, ["example.com:8900"], "loopback host"),
        ({"K": ["api.example.com"]}, ["127.0.0.1"], "give host:port"),
    ],
)
def test_a_bad_binding_is_refused_with_a_clear_message(hosts, simulated, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        CredentialBinding.build(hosts, simulated, settings_env_vars={"MUSE_VAR_DIR", "SECRET_KEY"})


def _start_django(tmp_path, **env) -> subprocess.CompletedProcess:
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.PROVIDER_CREDENTIAL_HOSTS))"
    )
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "muse_experiments.settings",
        "DJANGO_DEBUG": "true",
        "MUSE_VAR_DIR": str(tmp_path),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL"])
def test_binding_a_django_variable_stops_every_process_at_start_up(tmp_path, name):
    started = _start_django(tmp_path, PROVIDER_CREDENTIAL_HOSTS=f"{name}=api.example.com")
    assert started.returncode != 0
    assert f"django.core.exceptions.ImproperlyConfigured: PROVIDER_CREDENTIAL_HOSTS names {name}" in (
        started.stderr
    )


def test_the_binding_is_overridden_from_the_environment_in_one_format(tmp_path):
    started = _start_django(
        tmp_path,
        PROVIDER_CREDENTIAL_HOSTS="ANTHROPIC_API_KEY=api.anthropic.com;"
        "AZURE_OPENAI_API_KEY=*.openai.azure.com,eu.example.com:8443",
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert json.loads(started.stdout) == {
        "ANTHROPIC_API_KEY": ["api.anthropic.com"],
        "AZURE_OPENAI_API_KEY": ["*.openai.azure.com", "eu.example.com:8443"],
    }
    malformed = _start_django(tmp_path, PROVIDER_CREDENTIAL_HOSTS="ANTHROPIC_API_KEY=a=b")
    assert malformed.returncode != 0 and "use NAME=host,host;NAME=host" in malformed.stderr


def test_the_settings_default_binding_knows_the_provider_variables_and_none_of_djangos(settings):
    assert settings.PROVIDER_CREDENTIAL_HOSTS["ANTHROPIC_API_KEY"] == ["api.anthropic.com"]
    assert settings.PROVIDER_CREDENTIAL_HOSTS["OPENAI_API_KEY"] == ["api.openai.com"]
    assert "*.openai.azure.com" in settings.PROVIDER_CREDENTIAL_HOSTS["AZURE_OPENAI_API_KEY"]
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "METRICS_TOKEN"} <= settings.SETTINGS_ENV_VARS
    assert not set(settings.PROVIDER_CREDENTIAL_HOSTS) & settings.SETTINGS_ENV_VARS


# ---- a real listener on 127.0.0.1 that must receive nothing ------------------------------------


class Listener:
    """A TCP listener on 127.0.0.1 (an ephemeral port) that records every byte sent to it, then
    closes the connection without answering."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.received = bytearray()
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(1.0)
                try:
                    while chunk := conn.recv(65536):
                        self.received += chunk
                        if b"\r\n\r\n" in self.received:
                            break
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def fast_retries(settings):
    settings.ROUTING_MAX_RETRIES = 1
    settings.ROUTING_BACKOFF_BASE_MS = 1.0
    settings.ROUTING_BACKOFF_CAP_MS = 5.0


def nothing_leaked(text: str) -> bool:
    return not any(secret in text for secret in SECRETS)


# ---- the admin: form errors, the permission, the audit -----------------------------------------


def provider_form_data(client, provider: Provider) -> dict[str, str]:
    """The provider's change form as the admin renders it for ``client``, ready to post."""
    form = client.get(f"/admin/routing/provider/{provider.pk}/change/").context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    return {k: ("on" if v is True else v) for k, v in data.items() if v not in (False, None, "")}


def post_provider(client, provider: Provider, **changes):
    data = {**provider_form_data(client, provider), **changes}
    return client.post(f"/admin/routing/provider/{provider.pk}/change/", data)


@pytest.fixture
def editor_client(client, django_user_model):
    """A catalogue editor: staff, view/change on providers and model endpoints, nothing else."""
    user = django_user_model.objects.create_user("editor", password="unused-9f2c", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="routing",
            codename__in=["view_provider", "change_provider", "view_modelendpoint", "change_modelendpoint"],
        )
    )
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_base_url_on_a_loopback_listener_is_a_form_error_and_the_listener_gets_nothing(
    upstreams, admin_client, listener, fast_retries
):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", CONTROL, 0.0), ("claude", CLAUDE, 1.0)])
    anthropic_provider = Provider.objects.get(key="anthropic")

    response = post_provider(admin_client, anthropic_provider, base_url=listener.url)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["base_url"]
    assert f"ANTHROPIC_API_KEY may not be sent to {listener.url}" in errors["base_url"][0]
    assert "https://api.anthropic.com" in errors["base_url"][0]
    anthropic_provider.refresh_from_db()
    assert anthropic_provider.base_url == upstreams.url
    assert not AuditEntry.objects.filter(object_type="Provider").exclude(actor="test").exists()
    invalidate_all()
    assert run(job()).result["served_model"] == CLAUDE  # still served where it was
    assert listener.connections == 0 and listener.received == b""


@pytest.mark.django_db
@pytest.mark.parametrize("variable", ["SECRET_KEY", "DATABASE_URL"])
def test_djangos_own_variables_are_refused_as_a_provider_credential(upstreams, admin_client, variable):
    seed_catalogue(upstreams.url)
    anthropic_provider = Provider.objects.get(key="anthropic")

    response = post_provider(admin_client, anthropic_provider, credential_env=variable)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["credential_env"]
    assert errors["credential_env"][0].startswith(
        f"{variable} is not a provider credential variable; allowed: "
    )
    assert "ANTHROPIC_API_KEY" in errors["credential_env"][0]
    anthropic_provider.refresh_from_db()
    assert anthropic_provider.credential_env == "ANTHROPIC_API_KEY"


@pytest.mark.django_db
def test_an_editor_without_the_permission_cannot_change_where_a_credential_goes(
    upstreams, editor_client, listener
):
    seed_catalogue(upstreams.url)
    anthropic_provider = Provider.objects.get(key="anthropic")
    url = f"/admin/routing/provider/{anthropic_provider.pk}/change/"

    page = editor_client.get(url).content.decode()
    assert 'name="base_url"' not in page and 'name="credential_env"' not in page  # read-only
    assert upstreams.url in page  # shown, not editable

    data = provider_form_data(editor_client, anthropic_provider)
    assert editor_client.post(url, {**data, "base_url": listener.url}).status_code == 403
    assert editor_client.post(url, {**data, "credential_env": "SECRET_KEY"}).status_code == 403
    assert editor_client.get("/admin/routing/provider/add/").status_code == 403
    anthropic_provider.refresh_from_db()
    assert (anthropic_provider.base_url, anthropic_provider.credential_env) == (
        upstreams.url,
        "ANTHROPIC_API_KEY",
    )

    # the rest of the provider is still theirs to edit
    data.pop("enabled")
    assert editor_client.post(url, data).status_code == 302
    anthropic_provider.refresh_from_db()
    assert anthropic_provider.enabled is False and anthropic_provider.base_url == upstreams.url


@pytest.mark.django_db
def test_a_row_moved_outside_the_binding_behind_the_admins_back_cannot_be_saved_by_an_editor(
    upstreams, editor_client, listener
):
    seed_catalogue(upstreams.url)
    Provider.objects.filter(key="anthropic").update(base_url=listener.url)
    anthropic_provider = Provider.objects.get(key="anthropic")

    data = provider_form_data(editor_client, anthropic_provider)
    data.pop("enabled")
    response = editor_client.post(f"/admin/routing/provider/{anthropic_provider.pk}/change/", data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert len(errors) == 1 and f"base url: ANTHROPIC_API_KEY may not be sent to {listener.url}" in errors[0]
    assert Provider.objects.get(key="anthropic").enabled is True


@pytest.mark.django_db
def test_changing_where_a_credential_goes_is_audited_with_old_and_new_values(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    anthropic_provider = Provider.objects.get(key="anthropic")

    response = post_provider(
        admin_client, anthropic_provider, base_url=UNUSED_UPSTREAM, credential_env="OPENAI_API_KEY"
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEntry.objects.filter(object_type="Provider", actor="admin").get()
    assert (entry.action, entry.object_id) == ("update", str(anthropic_provider.pk))
    assert entry.changes == {
        "base_url": [upstreams.url, UNUSED_UPSTREAM],
        "credential_env": ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
    }
    assert nothing_leaked(json.dumps(entry.changes))


@pytest.mark.django_db
def test_adding_a_provider_needs_the_permission_and_is_audited(upstreams, admin_client, editor_client):
    seed_catalogue(upstreams.url)
    data = {
        "key": "openai",
        "kind": "openai",
        "base_url": "https://api.openai.com/v1",
        "credential_env": "OPENAI_API_KEY",
        "enabled": "on",
    }
    assert editor_client.post("/admin/routing/provider/add/", data).status_code == 403
    assert not Provider.objects.filter(key="openai").exists()

    refused = admin_client.post(
        "/admin/routing/provider/add/", {**data, "base_url": "https://api.openai.com.evil.example"}
    )
    assert refused.status_code == 200 and list(refused.context["adminform"].form.errors) == ["base_url"]
    assert admin_client.post("/admin/routing/provider/add/", data).status_code == 302
    provider = Provider.objects.get(key="openai")
    entry = AuditEntry.objects.get(object_type="Provider", object_id=str(provider.pk), actor="admin")
    assert entry.action == "create"
    assert entry.changes["base_url"] == [None, "https://api.openai.com/v1"]
    assert entry.changes["credential_env"] == [None, "OPENAI_API_KEY"]


# ---- the seed command ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_seed_refuses_a_simulated_base_url_that_is_not_configured(listener):
    with pytest.raises(CommandError) as refused:
        call_command("seed_catalogue", simulated_base_url=listener.url)
    port = listener.url.rsplit(":", 1)[1]
    assert f"anthropic.base_url: ANTHROPIC_API_KEY may not be sent to {listener.url}" in str(refused.value)
    assert f"SIMULATED_UPSTREAMS=127.0.0.1:{port}" in str(refused.value)
    assert not Provider.objects.exists()


# ---- the router refuses whatever wrote the row --------------------------------------------------


def pinned_job(model: str, *, stream: bool = False) -> CompletionJob:
    created, _ = completion_job_create(
        api_key=None,
        session_id="s-pinned",
        user_id="u-1",
        subagent="coder",
        attributes={},
        request={"messages": [{"role": "user", "content": "hello"}], "tools": [], "model": model},
        stream=stream,
    )
    return created


def attempts_of(j: CompletionJob) -> list[tuple[str, str]]:
    return list(Attempt.objects.filter(call__job=j).order_by("number").values_list("endpoint", "outcome"))


MOVED_BEHIND_THE_FORM = [
    pytest.param("anthropic", CLAUDE, "base_url", id="anthropic-sdk"),
    pytest.param("avocado", CONTROL, "base_url", id="native-urllib3"),
    pytest.param("azure", AZURE, "credential_env", id="azure-secret-key"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("provider", "endpoint", "field"), MOVED_BEHIND_THE_FORM)
@pytest.mark.parametrize("stream", [False, True], ids=["worker", "stream"])
def test_the_router_sends_nothing_when_the_row_was_changed_behind_the_forms_back(
    upstreams, listener, fast_retries, monkeypatch, provider, endpoint, field, stream
):
    monkeypatch.setenv("SECRET_KEY", DJANGO_SECRET)
    seed_catalogue(upstreams.url)
    moved = {"base_url": listener.url + ("/v1" if provider == "avocado" else "")}
    moved = moved if field == "base_url" else {"credential_env": "SECRET_KEY"}
    Provider.objects.filter(key=provider).update(**moved)  # raw write: no form, no service
    invalidate_all()

    j = pinned_job(endpoint, stream=stream)
    if stream:
        events = list(stream_job_events(job_id=str(j.id)))
        assert events[-1]["type"] == "error"
    else:
        run(j)
    j.refresh_from_db()

    assert listener.connections == 0 and listener.received == b""
    assert upstreams.calls() == []
    assert j.status == "failed"
    assert attempts_of(j) == [(endpoint, "credential_not_allowed")]  # once: permanent, not retried
    host = (
        listener.url.removeprefix("http://") if field == "base_url" else upstreams.url.removeprefix("http://")
    )
    assert j.error.startswith(
        f"credential_not_allowed: Provider '{provider}' may not send its credential to {host}"
    )
    assert nothing_leaked(j.error) and "SECRET_KEY" not in j.error


@pytest.mark.django_db
def test_a_routed_call_falls_back_when_its_variant_may_not_carry_the_credential(
    upstreams, listener, fast_retries
):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", CONTROL, 0.0), ("claude", CLAUDE, 1.0)])
    Provider.objects.filter(key="anthropic").update(base_url=listener.url)
    invalidate_all()

    j = run(job())

    assert listener.connections == 0 and listener.received == b""
    assert (j.status, j.result["served_model"], j.result["reason"]) == (
        "succeeded",
        CONTROL,
        "error_fallback",
    )
    assert attempts_of(j) == [(CLAUDE, "credential_not_allowed"), (CONTROL, "ok")]


@pytest.mark.django_db
def test_credential_for_checks_the_binding_before_reading_the_variable(settings, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", UPSTREAM_KEYS["anthropic"])
    assert (
        credential_for(
            provider="anthropic", env_name="ANTHROPIC_API_KEY", base_url="https://api.anthropic.com"
        )
        == UPSTREAM_KEYS["anthropic"]
    )
    with pytest.raises(CredentialNotAllowed) as refused:
        credential_for(provider="anthropic", env_name="SECRET_KEY", base_url="https://api.anthropic.com")
    assert str(refused.value).startswith(
        "Provider 'anthropic' may not send its credential to api.anthropic.com:443"
    )
    assert settings.SECRET_KEY not in str(refused.value)


@pytest.mark.django_db
# ---- redirects are not followed -----------------------------------------------------------------


class _Redirector(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(307)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirector(listener):
    """An allowed simulated upstream that answers every POST with a 307 to the listener."""
    handler = type("Redirect", (_Redirector,), {"target": listener.url})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    entry = allow_simulated_upstream(url)
    yield url
    forget_simulated_upstream(entry)
    server.shutdown()
    server.server_close()


@pytest.mark.django_db
@pytest.mark.parametrize(("provider", "endpoint"), [("anthropic", CLAUDE), ("azure", AZURE)])
def test_an_upstream_redirect_is_not_followed_with_the_credential(
    upstreams, redirector, listener, fast_retries, provider, endpoint
):
    """httpx strips only ``Authorization`` on a cross-origin redirect: ``x-api-key`` (Anthropic)
    and ``api-key`` (Azure) would follow it."""
    seed_catalogue(upstreams.url)
    Provider.objects.filter(key=provider).update(base_url=redirector)
    invalidate_all()

    j = run(pinned_job(endpoint))

    assert listener.connections == 0 and listener.received == b""
    assert j.status == "failed"
    assert {outcome for _, outcome in attempts_of(j)} == {"BadResponse"}  # an unexpected status
    assert "HTTP 307" in j.error
