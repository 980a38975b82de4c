"""A shadow test's source experiment variant: it cannot be deleted while a test that is not
stopped uses it, a test starts only on a source that can still get traffic, and stopping the
source experiment stops the tests on it."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from rest_framework.test import APIClient

from muse_experiments.experiments.models import AuditEntry, Experiment, ShadowStatus, ShadowTest
from muse_experiments.experiments.services.lifecycle import (
    experiment_archive,
    experiment_pause,
    experiment_stop,
)
from muse_experiments.experiments.services.shadow import shadow_test_start, shadow_test_stop
from routing.catalogue import avocado_id
from tests.factories import api_key, make_experiment

pytestmark = pytest.mark.django_db
URL = "/api/v1/shadow-tests"
ARMS = [("a", avocado_id(14), 0.5), ("b", avocado_id(13), 0.25), ("c", avocado_id(12), 0.25)]


def client() -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write', 'analytics:read'])}")
    return c


def create(c: APIClient, key: str, *, experiment: str = "exp-p1", variant: str = "b") -> None:
    response = c.post(
        URL,
        {
            "key": key,
            "name": key,
            "candidate": "avocado-v15",
            "source": {"experiment": experiment, "variant": variant},
            "sample_percent": 10,
            "max_usd_per_day": 1,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()


def delete_b(c: APIClient, experiment: str = "exp-p1"):
    version = c.get(f"/api/v1/experiments/{experiment}").json()["version"]
    return c.patch(
        f"/api/v1/experiments/{experiment}",
        {
            "version": version,
            "variants": [
                {"key": "a", "weight": 0.5, "model": avocado_id(14)},
                {"key": "b", "weight": 0.25, "model": avocado_id(13), "delete": True},
                {"key": "c", "weight": 0.5, "model": avocado_id(12)},
            ],
        },
        format="json",
    )


def test_a_variant_a_draft_or_running_shadow_test_uses_cannot_be_deleted(catalogue):
    make_experiment(key="exp-p1", arms=ARMS)
    c = client()
    create(c, "st-draft")
    create(c, "st-running")
    assert c.post(f"{URL}/st-running/start").status_code == 200
    response = delete_b(c)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["fields"] == {
        "variants": [
            "Variant b is the source of shadow test(s) st-draft, st-running: stop them before "
            "deleting it (or renaming its key)."
        ]
    }
    assert sorted(Experiment.objects.get(key="exp-p1").variants.values_list("key", flat=True)) == [
        "a",
        "b",
        "c",
    ]


def test_a_stopped_shadow_tests_variant_may_go_and_the_test_then_cannot_start(catalogue):
    make_experiment(key="exp-p1", arms=ARMS)
    c = client()
    create(c, "st-1")
    assert c.post(f"{URL}/st-1/start").status_code == 200
    assert c.post(f"{URL}/st-1/stop").status_code == 200
    assert delete_b(c).status_code == 200
    assert sorted(Experiment.objects.get(key="exp-p1").variants.values_list("key", flat=True)) == ["a", "c"]
    started = c.post(f"{URL}/st-1/start")
    assert started.status_code == 400
    assert started.json()["error"]["fields"] == {
        "source": ["Experiment 'exp-p1' has no variant 'b' any more: this shadow test cannot get traffic."]
    }
    assert ShadowTest.objects.get(key="st-1").status == ShadowStatus.STOPPED


@pytest.mark.parametrize("end", ["stopped", "archived"])
def test_a_shadow_test_does_not_start_on_a_stopped_or_archived_experiment(catalogue, end):
    experiment = make_experiment(key="exp-p1", arms=ARMS, start=end == "stopped")
    c = client()
    create(c, "st-1")
    if end == "stopped":
        experiment_stop(experiment=experiment, actor="t")
    else:
        experiment_archive(experiment=experiment, actor="t")
    started = c.post(f"{URL}/st-1/start")
    assert started.status_code == 400
    assert started.json()["error"]["fields"] == {
        "source": [
            f"Source experiment 'exp-p1' is {end}, so this shadow test would get no traffic; "
            "a shadow test starts on a draft, running or paused experiment."
        ]
    }
    assert ShadowTest.objects.get(key="st-1").status == ShadowStatus.DRAFT


@pytest.mark.parametrize("state", ["draft", "paused"])
def test_a_shadow_test_starts_on_a_draft_or_paused_experiment(catalogue, state):
    experiment = make_experiment(key="exp-p1", arms=ARMS, start=state == "paused")
    if state == "paused":
        experiment_pause(experiment=experiment, actor="t")
    c = client()
    create(c, "st-1")
    started = c.post(f"{URL}/st-1/start")
    assert started.status_code == 200 and started.json()["status"] == "running"


def test_stopping_the_source_experiment_stops_its_running_shadow_tests(catalogue):
    make_experiment(key="exp-p1", arms=ARMS)
    make_experiment(key="exp-other", arms=ARMS)
    c = client()
    create(c, "st-running")
    create(c, "st-draft")
    create(c, "st-other", experiment="exp-other")
    for key in ("st-running", "st-other"):
        assert c.post(f"{URL}/{key}/start").status_code == 200
    experiment_stop(experiment=Experiment.objects.get(key="exp-p1"), actor="pm")
    status = dict(ShadowTest.objects.values_list("key", "status"))
    assert status == {"st-running": "stopped", "st-draft": "draft", "st-other": "running"}
    entry = AuditEntry.objects.get(action="shadow_test_stop")
    assert (entry.actor, entry.object_id, entry.changes) == (
        "pm",
        str(ShadowTest.objects.get(key="st-running").pk),
        {"status": ["running", "stopped"], "reason": "source experiment exp-p1 stopped"},
    )
    assert Experiment.objects.get(key="exp-other").status == "running"


def test_the_admins_start_action_refuses_a_test_whose_source_is_gone(catalogue, admin_client):
    experiment = make_experiment(key="exp-p1", arms=ARMS)
    c = client()
    create(c, "st-1")
    shadow_test_start(test=ShadowTest.objects.get(key="st-1"), actor="t")
    shadow_test_stop(test=ShadowTest.objects.get(key="st-1"), actor="t")
    experiment_stop(experiment=experiment, actor="t")
    response = admin_client.post(
        reverse("admin:muse_experiments_shadowtest_changelist"),
        {"action": "start_tests", "_selected_action": [ShadowTest.objects.get(key="st-1").pk]},
        follow=True,
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "st-1: Source experiment 'exp-p1' is stopped, so this shadow test would get no traffic; "
        "a shadow test starts on a draft, running or paused experiment."
    ]
    assert ShadowTest.objects.get(key="st-1").status == ShadowStatus.STOPPED


def test_the_admin_refuses_to_delete_a_variant_a_shadow_test_uses(catalogue, admin_client):
    from tests.muse_experiments.experiments.test_admin import change_url, errors_of, form_data

    experiment = make_experiment(key="exp-p1", arms=ARMS)
    create(client(), "st-draft")
    data = form_data(
        experiment, variants=[("a", avocado_id(14), 50, True), ("b", avocado_id(13), 0, False),
                              ("c", avocado_id(12), 50, False)],
    )  # fmt: skip
    b_row = next(k.split("-")[1] for k, v in data.items() if k.endswith("-key") and v == "b")
    data[f"variants-{b_row}-DELETE"] = "on"
    response = admin_client.post(change_url(experiment), data)
    assert (
        "Variant b is the source of shadow test(s) st-draft: stop them before deleting it (or renaming its key)."
        in errors_of(response)
    )
    assert sorted(experiment.variants.values_list("key", flat=True)) == ["a", "b", "c"]
