"""The admin for product managers, through Django's test client as a superuser."""

from __future__ import annotations

import html
import json
from datetime import UTC

import pytest
from django.urls import reverse

from muse_experiments.experiments.models import AuditEntry, Experiment, ExperimentPhase, Layer, PlatformConfig
from muse_experiments.experiments.validation import unit_id_problem
from routing.models import ModelEndpoint
from tests.factories import make_experiment
from tests.muse_experiments.conftest import V2, V14, V15

pytestmark = pytest.mark.django_db


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
        "coverage": "100",
        "layer": "",
        "layer_start": "0",
        "layer_end": "100",
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
            coverage=str(experiment.coverage * 100),
            base_version=str(experiment.version),
            layer=str(experiment.layer_id or ""),
            layer_start=str(experiment.layer_start * 100),
            layer_end=str(experiment.layer_end * 100),
            hypothesis=experiment.hypothesis,
            primary_metric=experiment.primary_metric,
            guardrail_metrics=", ".join(experiment.guardrail_metrics),
        )
        if experiment.status in ("running", "paused"):
            base["confirm_new_phase"] = "on"  # tests of the confirmation step drop it
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
    # models by version label, the public id on hover
    assert f'title="{V14}">avocado-v14 — Native (Avocado inference service) — enabled' in page
    assert f'title="{V2}">avocado-v2 — Native (Avocado inference service) — disabled' in page
    assert "Azure OpenAI — enabled" in page and 'title="azure/muse-special"' in page


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
    assert not AuditEntry.objects.filter(action="update").exclude(actor="pm").exists()


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
        ({"coverage": "150"}, "Ensure this value is less than or equal to 100"),
    ],
)
def test_invalid_experiment_fields_come_back_as_form_errors(admin_client, catalogue, fields, message):
    experiment = make_experiment(start=False)
    response = admin_client.post(change_url(experiment), form_data(experiment, **fields))
    assert message in errors_of(response)


def test_an_overlapping_layer_range_names_the_other_experiment(admin_client, catalogue):
    layer = Layer.objects.create(key="ranking")
    make_experiment(key="first", layer=layer, layer_start=0.0, layer_end=0.5)
    data = form_data(key="second", layer=layer.pk, layer_start="25", layer_end="75")
    response = admin_client.post(reverse("admin:muse_experiments_experiment_add"), data)
    assert "Layer range [25 %, 75 %) overlaps experiment first [0 %, 50 %)." in errors_of(response)
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
    # the model by its version label, the id on hover
    assert (
        f'<span title="{V14}">avocado-v14</span>' in page or f'<span title="{V15}">avocado-v15</span>' in page
    )
    page = admin_client.get(url, {"session_id": "s-1", "attributes": "[1]"}).content.decode()
    assert "Attributes must be a JSON object" in page


@pytest.mark.parametrize("field", ["session_id", "user_id"])
@pytest.mark.parametrize("bad", [" s-1", "s-1\u200b"])
def test_the_preview_page_refuses_an_id_the_api_refuses_instead_of_trimming_it(
    admin_client, catalogue, field, bad
):
    """ " s-1" was trimmed to "s-1" and previewed as that unit; ids are used exactly as sent."""
    experiment = make_experiment(key="pv")
    url = reverse("admin:muse_experiments_experiment_preview", args=[experiment.pk])
    valid = {"session_id": "s-1", "user_id": "u-1", "attributes": "{}"}
    page = admin_client.get(url, {**valid, field: bad}).content.decode()
    assert html.escape(unit_id_problem(bad)) in page
    assert "pv:assigned" not in page and "pv:not_" not in page  # no decision shown
    assert "pv:assigned" in admin_client.get(url, valid).content.decode()


def test_the_holdout_is_edited_in_the_admin_with_audit(admin_client, catalogue, admin_user):
    PlatformConfig.objects.get_or_create(pk=1)
    url = reverse("admin:muse_experiments_platformconfig_change", args=[1])
    assert admin_client.get(url).status_code == 200
    response = admin_client.post(url, {"holdout_share": "10", "holdout_seed": "global-holdout"})
    assert response.status_code == 302
    assert PlatformConfig.objects.get(pk=1).holdout_share == 0.1
    entry = AuditEntry.objects.get(object_type="PlatformConfig")
    assert (entry.actor, entry.changes) == (admin_user.username, {"holdout_share": [0.0, 0.1]})
    response = admin_client.post(url, {"holdout_share": "90", "holdout_seed": "global-holdout"})
    assert response.status_code == 200 and "less than or equal to 50" in response.content.decode()


def test_the_audit_history_is_visible_on_the_experiment_page(admin_client, catalogue):
    experiment = make_experiment()
    admin_client.post(change_url(experiment), form_data(experiment, hypothesis="faster answers"))
    page = admin_client.get(change_url(experiment)).content.decode()
    assert "<li>hypothesis: — → faster answers</li>" in page


def test_the_preview_page_of_a_malformed_experiment_id_is_a_404(admin_client, catalogue):
    assert admin_client.get("/admin/muse_experiments/experiment/abc/preview/").status_code == 404
    assert admin_client.get("/admin/muse_experiments/experiment/999999/preview/").status_code == 404


def test_a_condition_nested_absurdly_deep_is_a_form_error(admin_client, catalogue):
    from muse_experiments.experiments.models import Experiment

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


# --------------------------------------------------------------------------- integrity of edits


def three_arm(**kwargs):
    from muse_experiments.experiments.services.edits import experiment_update
    from muse_experiments.experiments.services.lifecycle import experiment_start
    from muse_experiments.experiments.services.variants import VariantInput

    experiment = make_experiment(start=False, **kwargs)
    experiment_update(
        experiment=experiment,
        actor="pm",
        variants=[
            *[
                VariantInput(key=v.key, weight=w, endpoint=v.endpoint, is_control=v.is_control, id=v.pk)
                for v, w in zip(experiment.variants.all(), [0.34, 0.33], strict=True)
            ],
            VariantInput(key="third", weight=0.33, endpoint=ModelEndpoint.objects.get(public_id=V2)),
        ],
    )
    experiment_start(experiment=experiment, actor="pm")
    return Experiment.objects.get(pk=experiment.pk)


THREE = [("control", V14, 34, True), ("treatment", V15, 33, False), ("third", V2, 33, False)]


def test_a_variant_left_out_of_the_form_is_not_deleted(admin_client, catalogue):
    experiment = three_arm()
    data = form_data(experiment, variants=[("control", V14, 50, True), ("treatment", V15, 50, False)])
    assert data["variants-TOTAL_FORMS"] == "2" and data["variants-INITIAL_FORMS"] == "3"
    response = admin_client.post(change_url(experiment), data)
    assert "Variant(s) third missing from the submitted set" in errors_of(response)
    assert sorted(experiment.variants.values_list("key", flat=True)) == ["control", "third", "treatment"]
    assert Experiment.objects.get(pk=experiment.pk).phase == 1
    assert not AuditEntry.objects.filter(action="update").exclude(actor="pm").exists()


def test_an_explicit_delete_removes_a_variant(admin_client, catalogue):
    experiment = three_arm()
    data = form_data(experiment, variants=[*THREE[:2], ("third", V2, 0, False)])
    data.update(
        {"variants-0-weight_percent": "50", "variants-1-weight_percent": "50", "variants-2-DELETE": "on"}
    )
    response = admin_client.post(change_url(experiment), data)
    assert response.status_code == 302, errors_of(response)
    assert sorted(experiment.variants.values_list("key", flat=True)) == ["control", "treatment"]
    assert (
        "third" in AuditEntry.objects.exclude(actor="pm").get(action="update").changes["variants"]["removed"]
    )


def test_a_stale_edit_is_refused_and_the_newer_weights_stay(admin_client, client, admin_user, catalogue):
    experiment = three_arm()
    pm1_form = form_data(experiment, variants=THREE)  # PM1 opens the page (version v)
    pm2 = form_data(
        experiment,
        variants=[("control", V14, 50, True), ("treatment", V15, 25, False), ("third", V2, 25, False)],
    )
    assert admin_client.post(change_url(experiment), pm2).status_code == 302  # PM2 saves 50/25/25
    pm1_form["hypothesis"] = "only the hypothesis"
    response = admin_client.post(change_url(experiment), pm1_form)
    message = errors_of(response)
    assert (
        "changed since this edit began" in message
        and f"now version {experiment.version + 1}, last changed by admin" in message
    )
    after = Experiment.objects.get(pk=experiment.pk)
    assert dict(after.variants.values_list("key", "weight")) == {
        "control": 0.5,
        "treatment": 0.25,
        "third": 0.25,
    }
    assert after.hypothesis == "" and after.phase == 2
    assert AuditEntry.objects.filter(action="update").exclude(actor="pm").count() == 1


def test_a_save_that_opens_a_phase_lists_the_changes_and_asks_to_confirm(admin_client, catalogue):
    experiment = make_experiment()
    data = form_data(
        experiment, variants=[("control", V14, 20, True), ("treatment", V15, 80, False)], coverage="50"
    )
    del data["confirm_new_phase"]
    response = admin_client.post(change_url(experiment), data)
    errors = errors_of(response)
    assert "closes phase 1 and starts phase 2" in errors
    assert "coverage: 100 % → 50 %" in errors
    assert "variant treatment weight: 50 % → 80 %" in errors
    assert 'name="confirm_new_phase"' in response.content.decode()
    assert Experiment.objects.get(pk=experiment.pk).phase == 1  # nothing saved
    data["confirm_new_phase"] = "on"
    assert admin_client.post(change_url(experiment), data).status_code == 302
    assert Experiment.objects.get(pk=experiment.pk).phase == 2


def test_a_descriptive_edit_of_a_running_experiment_needs_no_confirmation(admin_client, catalogue):
    experiment = make_experiment()
    data = form_data(experiment, hypothesis="better")
    del data["confirm_new_phase"]
    assert admin_client.post(change_url(experiment), data).status_code == 302
    assert Experiment.objects.get(pk=experiment.pk).phase == 1


@pytest.mark.parametrize("field", ["primary_metric", "guardrail_metrics"])
def test_an_unknown_metric_name_is_a_form_error(admin_client, catalogue, field):
    response = admin_client.post(
        reverse("admin:muse_experiments_experiment_add"), form_data(**{field: "nope_metric"})
    )
    assert "Unknown metric &#x27;nope_metric&#x27;" in errors_of(
        response
    ) or "Unknown metric 'nope_metric'" in errors_of(response)
    assert not Experiment.objects.exists()


def test_the_experiment_page_links_to_its_results_and_preview_and_shows_percent(admin_client, catalogue):
    experiment = make_experiment(key="linked")
    page = admin_client.get(change_url(experiment)).content.decode()
    assert f'href="{reverse("results-page", args=["linked"])}"' in page
    assert reverse("admin:muse_experiments_experiment_preview", args=[experiment.pk]) in page
    assert 'name="coverage" value="100.0"' in page and "Coverage (%)" in page
    assert "<td>control 50 %, treatment 50 %</td>" in page  # the phase table, in percent
    assert f'name="base_version" value="{experiment.version}"' in page


def test_exposures_and_audit_entries_cannot_be_deleted_in_the_admin(admin_client, catalogue):
    for model in ("exposure", "auditentry", "experimentphase"):
        url = reverse(f"admin:muse_experiments_{model}_changelist")
        page = admin_client.get(url).content.decode()
        assert 'value="delete_selected"' not in page
        assert admin_client.get(reverse(f"admin:muse_experiments_{model}_add")).status_code == 403


def test_an_api_key_is_created_in_the_admin_and_shown_once(admin_client, catalogue):
    from muse_experiments.api.auth import digest_key
    from muse_experiments.experiments.models import ApiKey

    url = reverse("admin:muse_experiments_apikey_add")
    assert admin_client.get(url).status_code == 200
    response = admin_client.post(
        url, {"name": "ci", "scopes": ["events", "analytics:read"], "rate_limit_per_minute": "60"}
    )
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    key = ApiKey.objects.get(name="ci")
    raw = page.split('class="raw-api-key"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    assert raw.startswith(f"muse_{key.prefix}_") and key.digest == digest_key(raw)
    assert key.scopes == ["analytics:read", "events"] and key.rate_limit_per_minute == 60
    assert (
        raw
        not in admin_client.get(
            reverse("admin:muse_experiments_apikey_change", args=[key.pk])
        ).content.decode()
    )


# --- issue 32: history from the audit log, readable phase times ---------------------------------


def test_the_history_link_shows_the_audit_entries(admin_client, catalogue):
    experiment = make_experiment()
    admin_client.post(change_url(experiment), form_data(experiment, hypothesis="faster answers"))
    page = admin_client.get(change_url(experiment)).content.decode()
    assert 'class="historylink"' in page
    history = admin_client.get(reverse("admin:muse_experiments_experiment_history", args=[experiment.pk]))
    body = history.content.decode()
    assert history.status_code == 200
    assert "doesn’t have a change history" not in body
    assert '<li style="list-style:disc">hypothesis: — → faster answers</li>' in body
    assert body.count("<tr>") - 1 == AuditEntry.objects.filter(object_id=str(experiment.pk)).count() >= 3
    layer = Layer.objects.create(key="checkout")
    layer_history = admin_client.get(reverse("admin:muse_experiments_layer_history", args=[layer.pk]))
    assert "No changes recorded in the audit log" in layer_history.content.decode()


def test_records_nobody_edits_have_no_history_link(admin_client, catalogue):
    experiment = make_experiment()
    phase = ExperimentPhase.objects.filter(experiment=experiment).first()
    page = admin_client.get(reverse("admin:muse_experiments_experimentphase_change", args=[phase.pk]))
    assert page.status_code == 200 and 'class="historylink"' not in page.content.decode()


def test_the_phases_table_prints_times_not_python_datetimes(admin_client, catalogue):
    experiment = make_experiment()
    page = admin_client.get(change_url(experiment)).content.decode()
    phases = page[page.index("<th>started</th>") :]
    phases = phases[: phases.index("</table>")]
    started = ExperimentPhase.objects.get(experiment=experiment, number=experiment.phase).started_at
    assert f"<td>{started.astimezone(UTC):%Y-%m-%d %H:%M} UTC</td>" in phases
    assert "+00:00" not in phases and "datetime" not in phases
