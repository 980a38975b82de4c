"""Read-only admin pages for completion jobs and their upstream attempts (issue 11 §5)."""

from __future__ import annotations

import pytest

from routing.catalogue import avocado_id
from routing.models import Attempt, ModelEndpoint
from tests.factories import make_experiment, seed_catalogue
from tests.routing.test_router import job, run

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
