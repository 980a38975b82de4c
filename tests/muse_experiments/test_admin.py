"""The admin for product managers, through Django's test client as a superuser."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from muse_experiments.models import AuditEntry, Experiment, ExperimentPhase, Layer, PlatformConfig
from routing.models import ModelEndpoint
from tests.factories import make_experiment

from .conftest import V2, V14, V15

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_redis(settings):
    settings.REDIS_URL = ""


def change_url(experiment) -> str:
    return reverse("admin:muse_experiments_experiment_change", args=[experiment.pk])


def form_data(experiment=None, *, variants=None, forced=(), **fields) -> dict[str, str]:
    """POST data of the experiment change/add form: ``variants`` are
    ``(key, endpoint public id, weight percent, is_control[, overrides])``."""
    endpoints = dict(ModelEndpoint.objects.values_list("public_id", "pk"))
    base = {
        "key": "exp",
        "name": "exp",
        "hypothesis": "",
        "owner": "",
        "unit_type": "session",
        "seed": "",
        "coverage": "1",
        "layer": "",
        "layer_start": "0",
        "layer_end": "1",
        "condition": "{}",
        "primary_metric": "task_success",
        "guardrail_metrics": "",
    }
    if experiment is not None:
        base.update(
            key=experiment.key,
            name=experiment.name,
            unit_type=experiment.unit_type,
            seed=experiment.seed,
            coverage=str(experiment.coverage),
        )
    base.update({k: str(v) for k, v in fields.items()})
    existing = {v.key: v.pk for v in experiment.variants.all()} if experiment else {}
    variants = (
        variants if variants is not None else [("control", V14, 50, True), ("treatment", V15, 50, False)]
    )
    data = dict(base)
    data.update(
        {
            "variants-TOTAL_FORMS": str(len(variants)),
            "variants-INITIAL_FORMS": str(len(existing)) if experiment else "0",
            "variants-MIN_NUM_FORMS": "0",
            "variants-MAX_NUM_FORMS": "1000",
        }
    )
    # existing rows first (Django matches initial forms by position)
    ordered = sorted(variants, key=lambda v: v[0] not in existing)
    for i, row in enumerate(ordered):
        key, pid, percent, control, *rest = row
        data.update(
            {
                f"variants-{i}-id": str(existing.get(key, "")),
                f"variants-{i}-experiment": str(experiment.pk) if experiment else "",
                f"variants-{i}-key": key,
                f"variants-{i}-name": key,
                f"variants-{i}-weight_percent": str(percent),
                f"variants-{i}-endpoint": str(endpoints[pid]),
                f"variants-{i}-overrides": json.dumps(rest[0]) if rest else "{}",
            }
        )
        if control:
            data[f"variants-{i}-is_control"] = "on"
    if experiment is not None:
        pins = {f.unit_id: f.pk for f in experiment.forced.all()}
        data.update(
            {
                "forced-TOTAL_FORMS": str(len(forced)),
                "forced-INITIAL_FORMS": str(len(pins)),
                "forced-MIN_NUM_FORMS": "0",
                "forced-MAX_NUM_FORMS": "1000",
            }
        )
        variant_pk = dict(experiment.variants.values_list("key", "pk"))
        for i, (unit, vkey) in enumerate(forced):
            data.update(
                {
                    f"forced-{i}-id": str(pins.get(unit, "")),
                    f"forced-{i}-experiment": str(experiment.pk),
                    f"forced-{i}-unit_id": unit,
                    f"forced-{i}-variant": str(variant_pk[vkey]),
                    f"forced-{i}-note": "",
                }
            )
    return data


def errors_of(response) -> str:
    """Every form and formset error shown on the page, as one string."""
    assert response.status_code == 200, "expected the form again, with errors"
    context = response.context
    parts = [str(context["adminform"].form.errors)]
    parts += [
        str(fs.formset.non_form_errors()) + str(fs.formset.errors) for fs in context["inline_admin_formsets"]
    ]
    return " ".join(parts)


# --------------------------------------------------------------------------- pages render


def test_the_changelist_add_and_change_pages_render(admin_client, catalogue):
    experiment = make_experiment(key="checkout")
    assert b"checkout" in admin_client.get(reverse("admin:muse_experiments_experiment_changelist")).content
    assert admin_client.get(reverse("admin:muse_experiments_experiment_add")).status_code == 200
    page = admin_client.get(change_url(experiment)).content.decode()
    assert 'name="variants-0-weight_percent"' in page and 'value="50.0"' in page
    assert "Preview assignment" in page and ">Pause</button>" in page and ">Re-randomise</button>" in page
    assert "Audit history" in page and "create" in page and "start" in page
    assert "First start" in page  # the phase table


def test_the_model_picker_shows_provider_and_enabled_state(admin_client, catalogue):
    ModelEndpoint.objects.filter(public_id=V2).update(enabled=False)
    experiment = make_experiment(start=False)
    page = admin_client.get(change_url(experiment)).content.decode()
    assert f"{V14} — Native (Avocado inference service) — enabled" in page
    assert f"{V2} — Native (Avocado inference service) — disabled" in page
    assert "azure/muse-special — Azure OpenAI — enabled" in page


# --------------------------------------------------------------------------- saving through services


def test_adding_an_experiment_saves_through_the_service_with_shares_and_audit(
    admin_client, admin_user, catalogue
):
    data = form_data(variants=[("control", V14, 30, True), ("treatment", V15, 70, False)], key="new-exp")
    response = admin_client.post(reverse("admin:muse_experiments_experiment_add"), data)
    assert response.status_code == 302, errors_of(response)
    experiment = Experiment.objects.get(key="new-exp")
    assert dict(experiment.variants.values_list("key", "weight")) == {"control": 0.3, "treatment": 0.7}
    entry = AuditEntry.objects.get(object_type="Experiment", action="create")
    assert entry.actor == admin_user.username and entry.object_id == str(experiment.pk)


def test_changing_weights_of_a_running_experiment_opens_a_phase(admin_client, catalogue):
    experiment = make_experiment()
    data = form_data(experiment, variants=[("control", V14, 20, True), ("treatment", V15, 80, False)])
    response = admin_client.post(change_url(experiment), data)
    assert response.status_code == 302, errors_of(response)
    assert ExperimentPhase.objects.get(experiment=experiment, number=2).weights == {
        "control": 0.2,
        "treatment": 0.8,
    }
    update = AuditEntry.objects.get(object_type="Experiment", action="update")
    assert update.changes["variants"]["changed"]["treatment"] == {"weight": [0.5, 0.8]}


def test_qa_pins_are_edited_inline_and_audited(admin_client, catalogue):
    experiment = make_experiment()
    response = admin_client.post(
        change_url(experiment), form_data(experiment, forced=[("qa-1", "treatment")])
    )
    assert response.status_code == 302, errors_of(response)
    assert list(experiment.forced.values_list("unit_id", "variant__key")) == [("qa-1", "treatment")]
    assert AuditEntry.objects.get(action="forced_assignments").changes == {
        "forced": {"qa-1": [None, "treatment"]}
    }


# --------------------------------------------------------------------------- form errors


@pytest.mark.parametrize(
    "variants, message",
    [
        (
            [("control", V14, 50, True), ("treatment", V15, 40, False)],
            "Weights must sum to 100% (they sum to 90%).",
        ),
        (
            [("control", V14, 50, False), ("treatment", V15, 50, False)],
            "Exactly one variant must be the control (found 0).",
        ),
        (
            [("control", V14, 50, True), ("treatment", V15, 50, True)],
            "Exactly one variant must be the control (found 2).",
        ),
        (
            [("control", V14, "nan", True), ("treatment", V15, 50, False)],
            "Enter a finite number (not NaN or infinity).",
        ),
        (
            [("control", V14, "inf", True), ("treatment", V15, 50, False)],
            "Enter a finite number (not NaN or infinity).",
        ),
        (
            [("control", V14, 50, True), ("treatment", V15, 50, False, {"temperature": 3})],
            "temperature must be a finite number between 0 and 2.",
        ),
        (
            [("control", V14, 50, True), ("treatment", V15, 50, False, {"top_k": 3})],
            "Unknown override",
        ),
    ],
    ids=["sum", "no control", "two controls", "nan", "inf", "bad temperature", "unknown override"],
)
def test_invalid_variant_sets_come_back_as_form_errors(admin_client, catalogue, variants, message):
    experiment = make_experiment()
    response = admin_client.post(change_url(experiment), form_data(experiment, variants=variants))
    assert message in errors_of(response)
    assert message in response.content.decode()
    assert dict(experiment.variants.values_list("key", "weight")) == {"control": 0.5, "treatment": 0.5}
    assert not AuditEntry.objects.filter(action="update").exists()


def test_a_disabled_model_is_refused_for_a_running_experiment(admin_client, catalogue):
    experiment = make_experiment()
    ModelEndpoint.objects.filter(public_id=V2).update(enabled=False)
    response = admin_client.post(
        change_url(experiment),
        form_data(experiment, variants=[("control", V14, 50, True), ("treatment", V2, 50, False)]),
    )
    assert f"Disabled model(s) cannot serve a running experiment: {V2}." in errors_of(response)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"condition": "{not json"}, "Enter a valid JSON."),
        ({"condition": '{"tier": {"$gteq": 1}}'}, "Unknown operator $gteq at tier."),
        ({"condition": '["pro"]'}, "The condition must be a JSON object"),
        ({"coverage": "nan"}, "Enter a finite number (not NaN or infinity)."),
        ({"coverage": "1.5"}, "Ensure this value is less than or equal to 1"),
    ],
)
def test_invalid_experiment_fields_come_back_as_form_errors(admin_client, catalogue, fields, message):
    experiment = make_experiment(start=False)
    response = admin_client.post(change_url(experiment), form_data(experiment, **fields))
    assert message in errors_of(response)


def test_an_overlapping_layer_range_names_the_other_experiment(admin_client, catalogue):
    layer = Layer.objects.create(key="ranking")
    make_experiment(key="first", layer=layer, layer_start=0.0, layer_end=0.5)
    data = form_data(key="second", layer=layer.pk, layer_start="0.25", layer_end="0.75")
    response = admin_client.post(reverse("admin:muse_experiments_experiment_add"), data)
    assert "Layer range [0.25, 0.75) overlaps experiment first [0, 0.5)." in errors_of(response)
    assert not Experiment.objects.filter(key="second").exists()


def test_the_key_is_locked_once_started(admin_client, catalogue):
    experiment = make_experiment(key="locked")
    response = admin_client.post(
        change_url(experiment), form_data(experiment, key="renamed", name="New name")
    )
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert (experiment.key, experiment.name) == ("locked", "New name")


# --------------------------------------------------------------------------- lifecycle, preview, platform


def test_lifecycle_buttons_call_the_services_and_report_illegal_moves(admin_client, catalogue):
    experiment = make_experiment(start=False)

    def press(action):
        url = reverse("admin:muse_experiments_experiment_lifecycle", args=[experiment.pk, action])
        return admin_client.post(url, follow=True)

    assert press("start").redirect_chain[-1][0] == change_url(experiment)
    experiment.refresh_from_db()
    assert experiment.status == "running"
    page = press("archive").content.decode()
    assert "Cannot go from running to archived." in page
    press("rerandomise")
    assert ExperimentPhase.objects.filter(experiment=experiment).count() == 2
    url = reverse("admin:muse_experiments_experiment_lifecycle", args=[experiment.pk, "pause"])
    assert admin_client.get(url).status_code == 405


def test_changelist_actions_run_the_lifecycle_services(admin_client, catalogue):
    a = make_experiment(key="a", start=False)
    b = make_experiment(key="b", start=False)
    admin_client.post(
        reverse("admin:muse_experiments_experiment_changelist"),
        {"action": "start", "_selected_action": [a.pk, b.pk]},
    )
    assert set(Experiment.objects.values_list("status", flat=True)) == {"running"}


def test_the_preview_page_shows_the_decision_and_why(admin_client, catalogue):
    experiment = make_experiment(key="pv", condition={"tier": "pro"})
    url = reverse("admin:muse_experiments_experiment_preview", args=[experiment.pk])
    assert admin_client.get(url).status_code == 200
    page = admin_client.get(
        url, {"session_id": "s-1", "user_id": "u-1", "attributes": '{"tier": "free"}'}
    ).content.decode()
    assert "pv:not_targeted" in page
    page = admin_client.get(
        url, {"session_id": "s-1", "user_id": "u-1", "attributes": '{"tier": "pro"}'}
    ).content.decode()
    assert "pv:assigned" in page
    page = admin_client.get(url, {"session_id": "s-1", "attributes": "[1]"}).content.decode()
    assert "Attributes must be a JSON object" in page


def test_the_holdout_is_edited_in_the_admin_with_audit(admin_client, catalogue, admin_user):
    PlatformConfig.objects.get_or_create(pk=1)
    url = reverse("admin:muse_experiments_platformconfig_change", args=[1])
    assert admin_client.get(url).status_code == 200
    response = admin_client.post(url, {"holdout_share": "0.1", "holdout_seed": "global-holdout"})
    assert response.status_code == 302
    assert PlatformConfig.objects.get(pk=1).holdout_share == 0.1
    entry = AuditEntry.objects.get(object_type="PlatformConfig")
    assert (entry.actor, entry.changes) == (admin_user.username, {"holdout_share": [0.0, 0.1]})
    response = admin_client.post(url, {"holdout_share": "0.9", "holdout_seed": "global-holdout"})
    assert response.status_code == 200 and "less than or equal to 0.5" in response.content.decode()


def test_the_audit_history_is_visible_on_the_experiment_page(admin_client, catalogue):
    experiment = make_experiment()
    admin_client.post(change_url(experiment), form_data(experiment, hypothesis="faster answers"))
    page = admin_client.get(change_url(experiment)).content.decode()
    assert "&quot;hypothesis&quot;: [&quot;&quot;, &quot;faster answers&quot;]" in page


def test_the_preview_page_of_a_malformed_experiment_id_is_a_404(admin_client, catalogue):
    assert admin_client.get("/admin/muse_experiments/experiment/abc/preview/").status_code == 404
    assert admin_client.get("/admin/muse_experiments/experiment/999999/preview/").status_code == 404


def test_a_condition_nested_absurdly_deep_is_a_form_error(admin_client, catalogue):
    from muse_experiments.models import Experiment

    deep = '{"a": ' * 3000 + "1" + "}" * 3000
    response = admin_client.post(
        reverse("admin:muse_experiments_experiment_add"), form_data(key="deep", condition=deep)
    )
    assert response.status_code == 200
    assert "nested too deeply" in errors_of(response)
    assert not Experiment.objects.filter(key="deep").exists()


def test_starting_an_experiment_warns_about_older_running_ones_that_take_its_traffic(admin_client, catalogue):
    make_experiment(key="older")
    newer = make_experiment(key="newer", start=False)
    url = reverse("admin:muse_experiments_experiment_lifecycle", args=[newer.pk, "start"])
    page = admin_client.post(url, follow=True).content.decode().lower()  # the admin capitalises messages
    assert "newer: running experiments evaluated first may take its traffic: older." in page
