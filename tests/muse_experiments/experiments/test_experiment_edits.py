"""Editing experiments through the API, and concurrent edits from the admin and the API: one
optimistic-concurrency mechanism (``Experiment.version``), no lost update."""

from __future__ import annotations

import threading

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from muse_experiments.experiments.models import AuditEntry, Experiment
from tests.factories import api_key, make_experiment
from tests.muse_experiments.conftest import V2, V14, V15

URL = "/api/v1/experiments/{}"


def writer() -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['analytics:read', 'experiments:write'])}")
    return c


ARMS = [
    {"key": "control", "weight": 0.5, "model": V14, "is_control": True},
    {"key": "treatment", "weight": 0.5, "model": V15},
]


@pytest.mark.django_db
def test_an_edit_with_the_current_version_applies_and_bumps_it(catalogue):
    experiment = make_experiment(key="api-edit")
    c = writer()
    version = c.get(URL.format("api-edit")).json()["version"]
    response = c.patch(URL.format("api-edit"), {"version": version, "hypothesis": "h1"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == version + 1
    assert Experiment.objects.get(pk=experiment.pk).hypothesis == "h1"
    assert AuditEntry.objects.get(action="update").actor.startswith("api-key:test (")


@pytest.mark.django_db
def test_a_stale_api_edit_is_a_409_and_saves_nothing(catalogue):
    make_experiment(key="stale")
    c = writer()
    version = c.get(URL.format("stale")).json()["version"]
    assert (
        c.patch(URL.format("stale"), {"version": version, "coverage": 0.5}, format="json").status_code == 200
    )
    response = c.patch(URL.format("stale"), {"version": version, "hypothesis": "late"}, format="json")
    assert response.status_code == 409
    assert (
        response.json()["error"]["code"] == "conflict"
        and response.json()["error"]["current_version"] == version + 1
    )
    assert Experiment.objects.get(key="stale").hypothesis == ""


@pytest.mark.django_db
def test_an_api_edit_deletes_a_variant_only_when_told(catalogue):
    experiment = make_experiment(key="arms")
    c = writer()
    version = experiment.version
    three = [*ARMS[:1], {**ARMS[1], "weight": 0.25}, {"key": "third", "weight": 0.25, "model": V2}]
    response = c.patch(URL.format("arms"), {"version": version, "variants": three}, format="json")
    assert response.status_code == 200, response.json()
    version = response.json()["version"]
    response = c.patch(URL.format("arms"), {"version": version, "variants": ARMS}, format="json")
    assert response.status_code == 400
    assert "third missing from the submitted set" in str(response.json()["error"]["fields"])
    response = c.patch(
        URL.format("arms"),
        {"version": version, "variants": [*ARMS, {"key": "third", "weight": 0, "model": V2, "delete": True}]},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert [v["key"] for v in response.json()["variants"]] == ["control", "treatment"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, field",
    [
        ({"primary_metric": "nope_metric"}, "primary_metric"),
        ({"guardrail_metrics": ["latency_ms", "nope_metric"]}, "guardrail_metrics"),
        ({"coverage": 1.5}, "coverage"),
        ({"colour": "red"}, "colour"),
        ({"variants": [{**ARMS[0], "model": "nope/x"}, ARMS[1]]}, "variants"),
        ({"variants": [ARMS[0], {**ARMS[1], "key": ARMS[0]["key"]}]}, "variants"),
        ({"version": 10**23}, "version"),
    ],
)
def test_bad_edits_are_400_with_field_errors(catalogue, body, field):
    experiment = make_experiment(key="bad")
    response = writer().patch(URL.format("bad"), {"version": experiment.version, **body}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    if "variants" in body and body["variants"][0]["key"] == body["variants"][1]["key"]:
        assert "more than once" in response.json()["error"]["fields"]["variants"][0]


@pytest.mark.django_db
def test_guardrail_metrics_of_the_wrong_type_or_repeated_are_400_and_change_nothing(catalogue):
    c = writer()
    created = c.post(
        "/api/v1/experiments",
        {"key": "dup", "name": "dup", "guardrail_metrics": ["error_rate", "error_rate"], "variants": ARMS},
        format="json",
    )
    assert created.status_code == 400, created.json()
    assert created.json()["error"]["fields"] == {
        "guardrail_metrics": ["error_rate is listed more than once: name each guardrail once."]
    }
    assert not Experiment.objects.filter(key="dup").exists()
    experiment = make_experiment(key="guarded", guardrail_metrics=["latency_ms"])
    for body, errors in (
        (
            {"guardrail_metrics": ["error_rate", "latency_ms", "error_rate"]},
            ["error_rate is listed more than once: name each guardrail once."],
        ),
        ({"guardrail_metrics": ["error_rate", 7]}, {"1": ["Must be a JSON string."]}),
        ({"guardrail_metrics": [True]}, {"0": ["Must be a JSON string."]}),
    ):
        response = c.patch(URL.format("guarded"), {"version": experiment.version, **body}, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["fields"] == {"guardrail_metrics": errors}
    stored = Experiment.objects.get(key="guarded")
    assert (stored.guardrail_metrics, stored.version) == (["latency_ms"], experiment.version)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("variants", "message"),
    [
        (
            [*ARMS, {"key": "zz", "weight": 0, "model": V2, "delete": True}],
            "Variant zz cannot be deleted: this experiment has no variant zz.",
        ),
        (
            [*ARMS, {**ARMS[1], "delete": True}],
            'Variant treatment is both kept and deleted: send it once, with "delete": true to remove it.',
        ),
        (
            [
                ARMS[0],
                {"key": "third", "weight": 0.5, "model": V2},
                {**ARMS[1], "weight": 0, "delete": True},
                {**ARMS[1], "weight": 0, "delete": True},
            ],
            "Variant treatment is deleted more than once: send it once.",
        ),
    ],
)
def test_a_delete_of_an_unknown_or_kept_variant_is_400_and_changes_nothing(catalogue, variants, message):
    """Only an explicit delete removes a variant, so a delete must name exactly one stored variant
    the edit does not also keep (these were silent no-ops answered 200)."""
    experiment = make_experiment(key="arms", start=False)
    response = writer().patch(
        URL.format("arms"), {"version": experiment.version, "variants": variants}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["fields"] == {"variants": [message]}
    stored = Experiment.objects.get(key="arms")
    assert stored.version == experiment.version
    assert [(v.key, v.weight) for v in stored.variants.order_by("position", "id")] == [
        ("control", 0.5),
        ("treatment", 0.5),
    ]
    assert not AuditEntry.objects.filter(action="update").exists()


@pytest.mark.django_db
def test_editing_needs_the_write_scope(catalogue):
    experiment = make_experiment(key="scoped")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(['analytics:read'])}")
    assert c.get(URL.format("scoped")).status_code == 200
    assert c.patch(URL.format("scoped"), {"version": experiment.version}, format="json").status_code == 403


# --------------------------------------------------------------------------- real concurrency


def _admin_post(base: str, session: str, experiment: Experiment, fields: dict, barrier) -> int:
    """An admin save over HTTP (session cookie, CSRF token), after the barrier."""

    with httpx.Client(base_url=base, cookies={"sessionid": session}) as http:
        url = f"/admin/muse_experiments/experiment/{experiment.pk}/change/"
        http.get(url)
        data = {**fields, "csrfmiddlewaretoken": http.cookies["csrftoken"]}
        barrier.wait()
        response = http.post(url, data=data, headers={"Referer": base + url})
        if response.status_code == 200:
            assert "changed since this edit began" in response.text
        return response.status_code


def _api_patch(base: str, key: str, body: dict, barrier) -> int:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        barrier.wait()
        return http.patch(URL.format("race"), json=body).status_code


@pytest.mark.django_db(transaction=True)
def test_concurrent_admin_and_api_edits_lose_no_update(postgres, live_server, catalogue):
    """Two admin sessions and two API clients save edits based on the same version at the same
    moment, over HTTP to a threaded server on PostgreSQL: exactly one wins, the others are told
    (admin form error, API 409), and the stored experiment is the winner's edit alone."""
    from tests.muse_experiments.experiments.test_admin import form_data

    experiment = make_experiment(key="race")
    user = get_user_model().objects.create_superuser("pm-race", "pm@example.com", "x")
    browser = Client()
    browser.force_login(user)
    session = browser.cookies["sessionid"].value
    key = api_key(["analytics:read", "experiments:write"])
    base = live_server.url
    barrier = threading.Barrier(4)
    results: dict[str, int] = {}
    edits = {
        "admin-1": ("admin", form_data(experiment, hypothesis="admin-1")),
        "admin-2": ("admin", form_data(experiment, owner="admin-2")),
        "api-1": ("api", {"version": experiment.version, "hypothesis": "api-1"}),
        "api-2": ("api", {"version": experiment.version, "coverage": 0.5}),
    }

    def run(name: str) -> None:
        kind, body = edits[name]
        if kind == "admin":
            results[name] = _admin_post(base, session, experiment, body, barrier)
        else:
            results[name] = _api_patch(base, key, body, barrier)

    threads = [threading.Thread(target=run, args=(name,)) for name in edits]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [
        n for n, code in results.items() if code in (200, 302) and not (n.startswith("admin") and code == 200)
    ]
    assert len(results) == 4 and len(winners) == 1, results
    losers = {n: code for n, code in results.items() if n not in winners}
    assert all(code == (200 if n.startswith("admin") else 409) for n, code in losers.items()), results
    after = Experiment.objects.get(pk=experiment.pk)
    assert after.version == experiment.version + 1
    assert AuditEntry.objects.filter(object_id=str(experiment.pk), action="update").count() == 1
    state = (after.hypothesis, after.owner, after.coverage)
    expected = {
        "admin-1": ("admin-1", "", 1.0),
        "admin-2": ("", "admin-2", 1.0),
        "api-1": ("api-1", "", 1.0),
        "api-2": ("", "", 0.5),
    }
    assert state == expected[winners[0]]


@pytest.mark.django_db
def test_an_edit_that_omits_a_variants_name_control_flag_or_overrides_keeps_them(catalogue):
    experiment = make_experiment(key="keep")
    control = experiment.variants.get(is_control=True)
    control.name, control.overrides = "Baseline", {"reasoning_effort": "low"}
    control.save()
    c = writer()
    arms = [
        {"key": v.key, "weight": 0.5, "model": v.endpoint.public_id}
        for v in experiment.variants.order_by("position")
    ]
    response = c.patch(URL.format("keep"), {"version": experiment.version, "variants": arms}, format="json")
    assert response.status_code == 200, response.json()
    stored = Experiment.objects.get(pk=experiment.pk).variants.get(key=control.key)
    assert (stored.is_control, stored.name, stored.overrides) == (
        True,
        "Baseline",
        {"reasoning_effort": "low"},
    )
