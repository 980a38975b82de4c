"""The analytics admin (issue 32): result snapshots are computed, never typed."""

from __future__ import annotations

import pytest

from analytics.models import ResultSnapshot
from tests.factories import make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db


@pytest.fixture
def snapshot():
    seed_catalogue()
    experiment = make_experiment(key="snap")
    return ResultSnapshot.objects.create(
        experiment=experiment,
        phase=experiment.phase,
        inputs={"task_success": {"control": {"n": 10, "sum": 6}, "treatment": {"n": 10, "sum": 7}}},
        results={"srm": {"p_value": 0.9}, "metrics": [{"name": "task_success", "lift": 0.16}]},
    )


def test_snapshots_cannot_be_added_changed_or_deleted(admin_client, snapshot):
    listing = admin_client.get("/admin/analytics/resultsnapshot/").content.decode()
    assert "/admin/analytics/resultsnapshot/add/" not in listing
    assert 'value="delete_selected"' not in listing
    assert admin_client.get("/admin/analytics/resultsnapshot/add/").status_code == 403
    # the 500 of issue 32: the add form posted without a phase
    added = admin_client.post("/admin/analytics/resultsnapshot/add/", {"trigger": "manual", "inputs": "{}"})
    assert added.status_code == 403 and ResultSnapshot.objects.count() == 1
    url = f"/admin/analytics/resultsnapshot/{snapshot.pk}/"
    assert admin_client.post(f"{url}change/", {"phase": 9}).status_code == 403
    assert admin_client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    snapshot.refresh_from_db()
    assert snapshot.phase == 1


def test_a_snapshot_shows_its_json_formatted_and_collapsed(admin_client, snapshot):
    body = admin_client.get(f"/admin/analytics/resultsnapshot/{snapshot.pk}/change/").content.decode()
    assert 'name="_save"' not in body and 'class="historylink"' not in body
    assert body.count('<details class="json">') == 2
    assert "<summary>{srm, metrics}" in body
    assert "&quot;task_success&quot;: {\n    &quot;control&quot;: {\n      &quot;n&quot;: 10," in body
