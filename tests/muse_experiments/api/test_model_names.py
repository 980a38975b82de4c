"""Wherever the API names a model (experiments' variants on create and edit, rollouts, shadow
tests, kill-switch targets) it takes a public id or a version label, and refuses white space
around a name with one 400 wording (:class:`muse_experiments.api.base.IdentifierField`) instead of
trimming it in some places and not others; white space inside a name finds no model."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from muse_experiments.api.base import SURROUNDING_SPACE_MESSAGE
from muse_experiments.experiments.models import AuditEntry, Experiment, Rollout, ShadowTest
from routing.catalogue import avocado_id
from routing.models import KillSwitch, ModelEndpoint
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db

V14, V15 = avocado_id(14), avocado_id(15)


@pytest.fixture
def api(upstreams):
    seed_catalogue(upstreams.url)
    scopes = ["experiments:write", "analytics:read", "ops"]
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(scopes)}")


def arms(control: str, treatment: str) -> list[dict]:
    return [
        {"key": "control", "weight": 0.5, "model": control, "is_control": True},
        {"key": "treatment", "weight": 0.5, "model": treatment},
    ]


def create_experiment(api, control: str, treatment: str = "avocado-v15"):
    return api.post(
        "/api/v1/experiments",
        {"key": "named", "name": "n", "variants": arms(control, treatment)},
        format="json",
    )


def edit_experiment(api, control: str, treatment: str = "avocado-v15"):
    make_experiment(key="named")
    version = api.get("/api/v1/experiments/named").json()["version"]
    return api.patch(
        "/api/v1/experiments/named", {"version": version, "variants": arms(control, treatment)}, format="json"
    )


def create_rollout(api, model: str):
    return api.post("/api/v1/rollouts", {"key": "r-1", "model": model, "replaces": V14}, format="json")


def create_shadow_test(api, candidate: str):
    body = {
        "key": "sh-1",
        "name": "sh",
        "candidate": candidate,
        "source": {"model": V14},
        "sample_percent": 10,
        "max_usd_per_day": 1,
    }
    return api.post("/api/v1/shadow-tests", body, format="json")


def kill_endpoint(api, target: str):
    body = {"scope": "endpoint", "target": target, "active": True, "reason": "incident 7"}
    return api.post("/api/v1/ops/kill-switches", body, format="json")


def field_error(response, *path) -> list[str]:
    """The messages at ``path`` of a 400's ``error.fields`` (an index for a list item, which DRF
    reports under its index as a string key)."""
    assert response.status_code == 400, response.content
    node = response.json()["error"]["fields"]
    for step in path:
        node = node[str(step)] if isinstance(node, dict) else node[step]  # list items: {"0": ...}
    return node


# (call, the path of its field in error.fields, what it must not have written)
CALLS = [
    (create_experiment, ("variants", 0, "model"), Experiment),
    (edit_experiment, ("variants", 0, "model"), None),
    (create_rollout, ("model",), Rollout),
    (create_shadow_test, ("candidate",), ShadowTest),
    (kill_endpoint, ("target",), KillSwitch),
]


@pytest.mark.parametrize(("call", "path", "written"), CALLS, ids=lambda c: getattr(c, "__name__", None))
@pytest.mark.parametrize("name", [f" {V14}", f"{V14} ", " avocado-v14", "avocado-v14\t", "\navocado-v14"])
def test_white_space_around_a_model_name_is_refused_with_one_wording(api, call, path, written, name):
    assert field_error(call(api, name), *path) == [SURROUNDING_SPACE_MESSAGE]
    if written is not None:
        assert not written.objects.exists()
    else:  # the edit: nothing saved
        assert not AuditEntry.objects.filter(action="update").exists()


def test_the_experiments_api_takes_version_labels_as_the_kill_switch_api_does(api):
    created = create_experiment(api, "avocado-v14", "avocado-v15")
    assert created.status_code == 201, created.content
    assert [(v["key"], v["model"]) for v in created.json()["variants"]] == [
        ("control", V14),
        ("treatment", V15),
    ]
    version = created.json()["version"]
    edited = api.patch(
        "/api/v1/experiments/named",
        {"version": version, "variants": arms("avocado-v15", "avocado-v14")},
        format="json",
    )
    assert edited.status_code == 200, edited.content
    assert [v["model"] for v in edited.json()["variants"]] == [V15, V14]
    killed = kill_endpoint(api, "avocado-v15")
    assert killed.status_code == 200 and killed.json()["target"] == V15


def test_an_unknown_or_ambiguous_label_is_a_400_naming_it(api):
    unknown = create_experiment(api, "avocado-v99")
    assert field_error(unknown, "variants") == [
        "Unknown model 'avocado-v99' (give a model id or version label)."
    ]
    ModelEndpoint.objects.filter(public_id=V15).update(version_label="avocado-v14")
    ambiguous = create_experiment(api, "avocado-v14", V15)
    assert field_error(ambiguous, "variants") == [
        "Several models are labelled 'avocado-v14': use the model id."
    ]
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(("call", "path", "written"), CALLS, ids=lambda c: getattr(c, "__name__", None))
def test_white_space_inside_a_model_name_finds_no_model(api, call, path, written):
    response = call(api, "avocado -v14")
    assert response.status_code == 400, response.content
    assert "avocado -v14" in str(response.json()["error"]["fields"])
    assert SURROUNDING_SPACE_MESSAGE not in str(response.json()["error"]["fields"])


def test_a_kill_switch_target_is_matched_as_sent_for_every_scope(api):
    for scope, target in (("provider", " azure"), ("experiment", "named "), ("variant", " named/control")):
        body = {"scope": scope, "target": target, "active": True, "reason": "r"}
        response = api.post("/api/v1/ops/kill-switches", body, format="json")
        assert field_error(response, "target") == [SURROUNDING_SPACE_MESSAGE]
    body = {"scope": "provider", "target": "azure", "active": True, "reason": "r"}
    assert api.post("/api/v1/ops/kill-switches", body, format="json").status_code == 200
    assert list(KillSwitch.objects.values_list("target", flat=True)) == ["azure"]
