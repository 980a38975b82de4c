"""REST: create (field errors as 400s), start, stop, detail and list of shadow tests."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from muse_experiments.api.base import SURROUNDING_SPACE_MESSAGE
from muse_experiments.experiments.models import AuditEntry, Experiment, ShadowTest
from routing.catalogue import avocado_id
from routing.shadow.budget import budget_settle
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db
URL = "/api/v1/shadow-tests"


@pytest.fixture
def catalogue(upstreams, redis_store):
    return seed_catalogue(upstreams.url)


def client(scopes=None) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(scopes)}")
    return c


def body(**changes):
    return {
        "key": "av15-vs-14",
        "name": "Avocado 15 against 14",
        "candidate": "avocado-v15",
        "source": {"model": avocado_id(14)},
        "sample_percent": 10,
        "judge": {"model": "avocado-v13", "instructions": "Prefer correct tool use."},
        "max_usd_per_day": 5,
        "allow_external": False,
        **changes,
    }


def test_a_shadow_test_is_created_in_draft_with_models_resolved_by_label(catalogue):
    response = client(["experiments:write"]).post(URL, body(), format="json")
    assert response.status_code == 201, response.json()
    got = response.json()
    assert got["status"] == "draft"
    assert got["candidate"] == avocado_id(15)
    assert got["source"] == {"model": avocado_id(14)}
    assert got["judge"] == {"model": avocado_id(13), "instructions": "Prefer correct tool use."}
    assert (got["sample_percent"], got["max_usd_per_day"], got["spent_usd_today"]) == (10.0, 5.0, 0.0)
    assert AuditEntry.objects.filter(action="shadow_test_create", object_type="ShadowTest").count() == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"candidate": "avocado-v99"}, "candidate"),
        ({"source": {"model": "nope/nope"}}, "source"),
        ({"judge": {"model": "gpt-9"}}, "judge"),
        ({"candidate": avocado_id(14)}, "candidate"),
        ({"candidate": "azure/muse-special"}, "candidate"),
        ({"judge": {"model": "anthropic/claude-sonnet-5-5"}}, "judge"),
        ({"sample_percent": 100.5}, "sample_percent"),
        ({"sample_percent": -1}, "sample_percent"),
        ({"max_usd_per_day": -0.01}, "max_usd_per_day"),
        ({"source": {"experiment": "exp", "variant": "nope"}}, "source"),
        ({"source": {"model": avocado_id(14), "experiment": "exp"}}, "source"),
    ],
)
def test_bad_fields_are_400s_naming_the_field(catalogue, changes, field):
    make_experiment(key="exp")
    response = client(["experiments:write"]).post(URL, body(**changes), format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    assert not ShadowTest.objects.exists()


def test_the_candidate_may_not_be_the_source_variants_model(catalogue):
    make_experiment(key="exp")  # control avocado-v14, treatment avocado-v15
    c = client(["experiments:write"])
    same = c.post(URL, body(source={"experiment": "exp", "variant": "treatment"}), format="json")
    assert same.status_code == 400 and "candidate" in same.json()["error"]["fields"]
    other = c.post(URL, body(source={"experiment": "exp", "variant": "control"}), format="json")
    assert other.status_code == 201, other.json()
    assert other.json()["source"] == {"experiment": "exp", "variant": "control"}


def test_an_external_candidate_and_judge_are_allowed_with_allow_external(catalogue):
    response = client(["experiments:write"]).post(
        URL,
        body(
            candidate="azure/muse-special",
            judge={"model": "anthropic/claude-sonnet-5-5"},
            allow_external=True,
        ),
        format="json",
    )
    assert response.status_code == 201, response.json()


def test_start_stop_detail_and_list(catalogue):
    writer, reader = client(["experiments:write"]), client(["analytics:read"])
    assert writer.post(URL, body(), format="json").status_code == 201
    assert reader.post(URL, body(key="other"), format="json").status_code == 403
    assert writer.post(f"{URL}/av15-vs-14/stop").status_code == 400  # a draft does not stop
    started = writer.post(f"{URL}/av15-vs-14/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    assert writer.post(f"{URL}/av15-vs-14/start").status_code == 400
    budget_settle(test_key="av15-vs-14", cost_usd="0.0125")
    detail = reader.get(f"{URL}/av15-vs-14").json()
    assert (detail["status"], detail["spent_usd_today"]) == ("running", 0.0125)
    stopped = writer.post(f"{URL}/av15-vs-14/stop").json()
    assert stopped["status"] == "stopped" and stopped["stopped_at"] is not None
    assert [t["key"] for t in reader.get(URL).json()] == ["av15-vs-14"]
    assert reader.get(f"{URL}/missing").status_code == 404
    assert reader.post(f"{URL}/av15-vs-14/start").status_code == 403


def test_the_shipped_roles_see_shadow_tests_and_product_managers_run_them():
    from django.contrib.auth.models import Group

    def perms(name):
        return set(
            Group.objects.get(name=name)
            .permissions.filter(codename__contains="shadow")
            .values_list("codename", flat=True)
        )

    assert perms("Analyst") == perms("Operator") == {"view_shadowtest", "view_shadowpair"}
    assert perms("Product manager") == {
        "view_shadowtest",
        "view_shadowpair",
        "add_shadowtest",
        "change_shadowtest",
    }
    assert perms("Catalogue admin") == set()


@pytest.mark.parametrize("key", ["st-nl\n", " st-nl", "st-nl\t"])
def test_a_key_with_white_space_around_it_is_refused_not_trimmed(catalogue, key):
    """``"st-nl\\n"`` was trimmed to ``st-nl`` and created; ids and keys are never trimmed."""
    make_experiment(key="exp")
    c = client(["experiments:write"])
    response = c.post(URL, body(key=key), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"key": [SURROUNDING_SPACE_MESSAGE]}
    source = c.post(URL, body(source={"experiment": "exp\n", "variant": " control"}), format="json")
    assert source.json()["error"]["fields"] == {
        "source": {"experiment": [SURROUNDING_SPACE_MESSAGE], "variant": [SURROUNDING_SPACE_MESSAGE]}
    }
    experiment = c.post(
        "/api/v1/experiments",
        {"key": key, "name": "x", "variants": [
            {"key": "control", "weight": 0.5, "model": avocado_id(14), "is_control": True},
            {"key": "t\n", "weight": 0.5, "model": avocado_id(15)},
        ]},
        format="json",
    )  # fmt: skip
    assert experiment.json()["error"]["fields"] == {
        "key": [SURROUNDING_SPACE_MESSAGE],
        "variants": {"1": {"key": [SURROUNDING_SPACE_MESSAGE]}},
    }
    rollout = c.post(
        "/api/v1/rollouts", {"key": key, "model": "avocado-v15", "replaces": "avocado-v14"}, format="json"
    )
    assert rollout.json()["error"]["fields"] == {"key": [SURROUNDING_SPACE_MESSAGE]}
    assert not ShadowTest.objects.exists()
    assert list(Experiment.objects.values_list("key", flat=True)) == ["exp"]


def test_a_key_is_lowercase_letters_digits_dashes_and_underscores(catalogue):
    response = client(["experiments:write"]).post(URL, body(key="St-1"), format="json")
    assert response.json()["error"]["fields"] == {"key": ["Use lowercase letters, digits, '-' and '_'."]}
