"""Read-only admin pages for completion jobs and their upstream attempts (issue 11 §5)."""

from __future__ import annotations

import re

import pytest

from routing.catalogue import avocado_id
from routing.models import Attempt, ModelEndpoint
from tests.factories import make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

pytestmark = pytest.mark.django_db


def test_operators_can_read_jobs_and_attempts_but_not_change_them(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", "azure/muse-special", 1.0)])
    upstreams.set_scenario("muse-special", failure="server_error")
    j = run(job(session_id="ops-session"))
    attempt = Attempt.objects.filter(call__job=j).order_by("number").first()

    listing = admin_client.get("/admin/routing/completionjob/", {"q": "ops-session"})
    assert listing.status_code == 200 and str(j.id) in listing.content.decode()
    detail = admin_client.get(f"/admin/routing/completionjob/{j.pk}/change/")
    assert detail.status_code == 200
    assert "succeeded" in detail.content.decode() and 'name="_save"' not in detail.content.decode()

    attempts = admin_client.get("/admin/routing/attempt/", {"outcome": "UpstreamUnavailable"})
    body = attempts.content.decode()
    assert attempts.status_code == 200 and "azure/muse-special" in body and "UpstreamUnavailable" in body
    assert admin_client.get(f"/admin/routing/attempt/{attempt.pk}/change/").status_code == 200

    assert admin_client.get("/admin/routing/completionjob/add/").status_code == 403
    assert admin_client.get("/admin/routing/attempt/add/").status_code == 403
    changed = admin_client.post(f"/admin/routing/completionjob/{j.pk}/change/", {"status": "failed"})
    assert changed.status_code == 403
    assert (
        admin_client.post(f"/admin/routing/attempt/{attempt.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    j.refresh_from_db()
    assert j.status == "succeeded" and Attempt.objects.filter(pk=attempt.pk).exists()


def test_model_endpoints_show_both_cache_write_prices(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    claude = ModelEndpoint.objects.get(public_id="anthropic/claude-sonnet-5-5")
    page = admin_client.get(f"/admin/routing/modelendpoint/{claude.pk}/change/").content.decode()
    assert 'name="price_cache_write_per_mtok" value="3.7500"' in page
    assert 'name="price_cache_write_1h_per_mtok" value="6.0000"' in page
    assert "Price cache write (1 h) per mtok" in page and "Price cache write (5 min) per mtok" in page


# --- issue 32: models by label, kill switches picked by name, history from the audit log ----------


def test_a_kill_switch_is_picked_and_confirmed_by_model_label(admin_client):
    from django.contrib.auth import get_user_model  # noqa: F401 (admin_client made the user)

    from muse_experiments.experiments.models import AuditEntry
    from routing.models import KillSwitch

    seed_catalogue()
    form = admin_client.get("/admin/routing/killswitch/add/").content.decode()
    # the target and "control traffic to" are pickers listing models by label
    assert f'<option value="{avocado_id(15)}">avocado-v15</option>' in form
    assert form.index(">avocado-v2<") < form.index(">avocado-v10<")  # natural order
    response = admin_client.post(
        "/admin/routing/killswitch/add/",
        {"scope": "endpoint", "target": "avocado-v15", "active": "on", "reason": "quota"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    switch = KillSwitch.objects.get()
    assert (switch.scope, switch.target) == ("endpoint", avocado_id(15))  # stored by public id
    listing = admin_client.get("/admin/routing/killswitch/").content.decode()
    assert f'<span title="{avocado_id(15)}">avocado-v15</span>' in listing
    assert "One model endpoint (target: public id)" not in listing  # the scope's name, not its help
    history = admin_client.get(f"/admin/routing/killswitch/{switch.pk}/history/").content.decode()
    assert "doesn’t have a change history" not in history
    assert "kill_switch_on" in history and AuditEntry.objects.filter(object_type="KillSwitch").count() == 1


def test_a_control_kill_is_confirmed_by_the_default_models_label():
    from routing.ops_services import kill_switch_set

    seed_catalogue()
    experiment = make_experiment(arms=[("control", avocado_id(14), 0.5), ("treatment", avocado_id(2), 0.5)])
    switch = kill_switch_set(
        scope="variant",
        target=f"{experiment.key}/control",
        active=True,
        reason="broken",
        actor="pm",
        control_traffic_to="avocado-v15",  # the platform default, by label
    )
    assert switch.active


def test_a_kill_switch_names_its_model_in_one_query(django_assert_num_queries):
    from routing.models import KillSwitch
    from routing.ops_services import kill_switch_set

    seed_catalogue()
    kill_switch_set(scope="endpoint", target=avocado_id(15), active=True, reason="x", actor="pm")
    switch = KillSwitch.objects.get()
    with django_assert_num_queries(1):
        assert str(switch) == "kill model avocado-v15 [ON]"
    all_external = kill_switch_set(scope="all_external", active=False, reason="x", actor="pm")
    with django_assert_num_queries(0):
        assert str(all_external) == "kill all external providers [off]"


def test_model_endpoints_are_listed_by_label_in_natural_order(admin_client):
    seed_catalogue()
    body = admin_client.get("/admin/routing/modelendpoint/").content.decode()
    order = [body.index(f">avocado-v{i}<") for i in (1, 2, 9, 10, 15)]
    assert order == sorted(order)  # v1, v2, v9, v10, v15: not text order (v1, v10, v15, v2)
    short = avocado_id(14).split("/")[1]
    assert f'<span title="{avocado_id(14)}">avocado/{short[:4]}…{short[-4:]}</span>' in body
    # the history link shows the catalogue's audit entries
    from routing.models import ModelEndpoint

    pk = ModelEndpoint.objects.get(public_id=avocado_id(14)).pk
    history = admin_client.get(f"/admin/routing/modelendpoint/{pk}/history/").content.decode()
    assert "doesn’t have a change history" not in history and "No changes recorded" in history


def test_call_records_show_and_sort_models_by_label(upstreams, admin_client):
    seed_catalogue(upstreams.url)
    make_experiment(arms=[("control", avocado_id(10), 0.5), ("treatment", avocado_id(9), 0.5)])
    for i in range(6):
        run(job(session_id=f"label-{i}"))
    body = admin_client.get("/admin/routing/callrecord/", {"o": "4"}).content.decode()  # served model ↑
    table = body[body.index('id="result_list"') : body.index("</table>", body.index('id="result_list"'))]
    assert f'<span class="model" title="{avocado_id(9)}">avocado-v9</span>' in table
    assert avocado_id(9) not in re.sub(r"<[^>]*>", "", table)  # the id only on hover
    v9 = [i for i in range(len(table)) if table.startswith(">avocado-v9<", i)]
    v10 = [i for i in range(len(table)) if table.startswith(">avocado-v10<", i)]
    assert v9 and v10 and max(v9) < min(v10)  # v9 before v10 (text order puts v10 first)
    call = Attempt.objects.first().call_id
    assert (
        'class="historylink"'
        not in admin_client.get(f"/admin/routing/callrecord/{call}/change/").content.decode()
    )
