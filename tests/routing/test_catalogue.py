"""The seeded catalogue and admin edits of it (audited, picked up by routing at once)."""

from __future__ import annotations

import re

import pytest

from muse_experiments.experiments.models import AuditEntry, PlatformConfig
from muse_experiments.infra.config_version import invalidate_all
from routing.catalogue import avocado_id
from routing.models import ModelEndpoint
from routing.selectors import catalogue
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

pytestmark = pytest.mark.django_db


def test_the_seed_has_15_avocado_versions_muse_special_and_claude():
    seed_catalogue()
    ids = set(ModelEndpoint.objects.values_list("public_id", flat=True))
    avocados = {i for i in ids if i.startswith("avocado/")}
    assert len(avocados) == 15 and all(re.fullmatch(r"avocado/[0-9a-f]{32}", i) for i in avocados)
    assert {"azure/muse-special", "anthropic/claude-sonnet-5-5", "anthropic/claude-haiku-5-5"} <= ids
    assert catalogue().default_id == avocado_id(15)
    e = catalogue().get("azure/muse-special")
    assert (e.provider_kind, e.api_style, e.supports_reasoning, e.max_concurrency, e.timeout_s) == (
        "azure_openai",
        "responses",
        True,
        64,
        60.0,
    )


def test_an_admin_edit_is_audited_and_routes_the_next_call(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", "azure/muse-special", 1.0)])
    upstreams.add_models("muse.special_v2")
    endpoint = ModelEndpoint.objects.get(public_id="azure/muse-special")
    assert run(job(session_id="s-1")).result["served_model"] == "azure/muse-special"
    version_before = PlatformConfig.objects.get(pk=1).version
    url = f"/admin/routing/modelendpoint/{endpoint.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("on" if v is True else "" if v is False or v is None else v) for k, v in data.items()}
    data.update(upstream_model="muse.special_v2", max_concurrency="8")
    response = admin_client.post(url, {k: v for k, v in data.items() if v != ""})
    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEntry.objects.get(object_type="ModelEndpoint", object_id=str(endpoint.pk))
    assert entry.actor == "admin"
    assert entry.changes == {"upstream_model": "muse.special_v2", "max_concurrency": "8"}
    assert PlatformConfig.objects.get(pk=1).version > version_before  # the edit bumped the version
    invalidate_all()  # (with Redis the bump is published on commit, which a test transaction never does)
    run(job(session_id="s-2"))
    assert upstreams.call_count(model="muse.special_v2") == 1  # deployment name used verbatim


def test_a_bad_admin_edit_shows_form_errors_and_changes_nothing(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    endpoint = ModelEndpoint.objects.get(public_id="azure/muse-special")
    url = f"/admin/routing/modelendpoint/{endpoint.pk}/change/"
    response = admin_client.post(url, {"public_id": "not an id", "timeout_s": "0", "max_concurrency": "0"})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert {"public_id", "timeout_s", "max_concurrency"} <= set(errors)
    endpoint.refresh_from_db()
    assert endpoint.public_id == "azure/muse-special"
    assert not AuditEntry.objects.filter(object_type="ModelEndpoint").exists()


def test_the_seed_says_which_output_contracts_each_model_honours():
    from routing.providers.contracts import JSON_MODE, STRUCTURED_OUTPUT, TOOLS

    seed_catalogue()
    caps = {pid: catalogue().get(pid).capabilities for pid in (avocado_id(15), "azure/muse-special")}
    assert all({TOOLS, STRUCTURED_OUTPUT, JSON_MODE} <= c for c in caps.values())
    claude = catalogue().get("anthropic/claude-sonnet-5-5").capabilities
    assert STRUCTURED_OUTPUT in claude and JSON_MODE not in claude


def test_json_mode_cannot_be_ticked_on_a_messages_endpoint():
    from django.core.exceptions import ValidationError

    seed_catalogue()
    claude = ModelEndpoint.objects.get(public_id="anthropic/claude-sonnet-5-5")
    claude.supports_json_mode = True
    with pytest.raises(ValidationError) as refused:
        claude.full_clean()
    assert "supports_json_mode" in refused.value.message_dict


def test_the_migration_lets_existing_openai_endpoints_honour_json_and_leaves_the_others_off():
    """Existing rows get the new capabilities by what their provider is known to honour."""
    import importlib

    from django.apps import apps

    seed_catalogue()
    ModelEndpoint.objects.update(supports_structured_output=False, supports_json_mode=False)
    migration = importlib.import_module("routing.migrations.0010_endpoint_output_contracts")
    migration.openai_endpoints_honour_json(apps, None)
    on = set(
        ModelEndpoint.objects.filter(supports_structured_output=True, supports_json_mode=True).values_list(
            "public_id", flat=True
        )
    )
    assert on == {"azure/muse-special"}
