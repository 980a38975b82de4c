"""Kill switches: every scope re-routes real calls, the env override, fail-closed, the ops API and
the admin toggle, each change audited."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError

from muse_experiments.experiments.models import AuditEntry, Exposure
from muse_experiments.experiments.services.edits import experiment_create, experiment_update
from muse_experiments.experiments.services.lifecycle import experiment_start
from muse_experiments.experiments.services.variants import VariantInput
from muse_experiments.infra.config_version import invalidate_all
from routing.catalogue import avocado_id
from routing.guards import killswitch
from routing.guards.killswitch import kill_state
from routing.models import CallRecord, KillSwitch, ModelEndpoint
from routing.ops_services import kill_switch_set
from tests.factories import api_key, make_experiment, seed_catalogue
from tests.routing.pipeline.test_router import job, run

pytestmark = pytest.mark.django_db

CONTROL = avocado_id(14)
DEFAULT = avocado_id(15)
AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"


@pytest.fixture
def catalogue(upstreams):
    return seed_catalogue(upstreams.url)


def kill(scope, target="", active=True, reason="incident 42"):
    switch = kill_switch_set(scope=scope, target=target, active=active, reason=reason, actor="oncall@muse")
    invalidate_all()  # the test transaction never commits, so no cross-process version bump fires
    return switch


def outcome(j):
    record = CallRecord.objects.get(job=j)
    return (record.variant_key, record.assigned_endpoint, record.served_endpoint, record.reason)


@pytest.mark.parametrize(
    ("scope", "target", "endpoint", "upstream_model", "reason"),
    [
        ("all_external", "", AZURE, "muse-special", "external_killed"),
        ("all_external", "", CLAUDE, "claude-sonnet-5-5", "external_killed"),
        ("provider", "azure", AZURE, "muse-special", "provider_killed"),
        ("provider", "anthropic", CLAUDE, "claude-sonnet-5-5", "provider_killed"),
        ("endpoint", AZURE, AZURE, "muse-special", "endpoint_killed"),
    ],
)
def test_a_killed_endpoint_is_never_called_and_its_units_are_served_by_control(
    catalogue, upstreams, scope, target, endpoint, upstream_model, reason
):
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", endpoint, 1.0)])
    switch = kill(scope, target)
    j = run(job())
    assert outcome(j) == ("treatment", endpoint, CONTROL, reason)
    assert j.result["kill"] == {
        "scope": scope,
        "target": target,
        "reason": reason,
        "since": switch.active_since.isoformat(),
    }
    assert upstreams.call_count(model=upstream_model) == 0
    assert upstreams.call_count(model="avocado-v14") == 1
    assert [(a.endpoint, a.outcome) for a in CallRecord.objects.get(job=j).attempts.all()] == [
        (endpoint, "killed"),
        (CONTROL, "ok"),
    ]
    exposure = Exposure.objects.get()  # an endpoint kill leaves assignment alone: still treatment
    assert exposure.variant_key == "treatment"


def test_killing_one_provider_leaves_the_others_running(catalogue, upstreams):
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", CLAUDE, 1.0)])
    kill("provider", "azure")
    assert outcome(run(job())) == ("treatment", CLAUDE, CLAUDE, "assigned")


def test_turning_a_switch_off_restores_traffic(catalogue, upstreams):
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])
    kill("endpoint", AZURE)
    assert outcome(run(job(session_id="s-1")))[3] == "endpoint_killed"
    kill("endpoint", AZURE, active=False, reason="recovered")
    assert outcome(run(job(session_id="s-2"))) == ("treatment", AZURE, AZURE, "assigned")
    assert upstreams.call_count(model="muse-special") == 1


def test_killing_an_experiment_sends_its_traffic_to_control_and_enrols_nobody(catalogue, upstreams):
    experiment = make_experiment(arms=[("control", CONTROL, 0.5), ("treatment", avocado_id(2), 0.5)])
    kill("experiment", experiment.key)
    outcomes = {outcome(run(job(session_id=f"s-{i}", user_id=f"u-{i}"))) for i in range(12)}
    assert outcomes == {
        ("control", CONTROL, CONTROL, "experiment_killed"),
        ("treatment", avocado_id(2), CONTROL, "experiment_killed"),
    }
    assert upstreams.call_count(model="avocado-v2") == 0
    assert Exposure.objects.count() == 0


def test_killing_a_variant_sends_only_that_variant_to_control(catalogue, upstreams):
    experiment = make_experiment(
        arms=[("control", CONTROL, 0.34), ("b", avocado_id(2), 0.33), ("c", avocado_id(3), 0.33)]
    )
    kill("variant", f"{experiment.key}/b")
    outcomes = {outcome(run(job(session_id=f"s-{i}", user_id=f"u-{i}"))) for i in range(20)}
    assert outcomes == {
        ("control", CONTROL, CONTROL, "assigned"),
        ("b", avocado_id(2), CONTROL, "variant_killed"),
        ("c", avocado_id(3), avocado_id(3), "assigned"),
    }
    assert upstreams.call_count(model="avocado-v2") == 0
    assert set(Exposure.objects.values_list("variant_key", flat=True)) == {"control", "c"}


def test_a_killed_variant_on_the_control_endpoint_is_served_with_the_control_settings(catalogue, upstreams):
    """Same endpoint, different overrides: the kill must switch the request to control's."""
    endpoint = ModelEndpoint.objects.get(public_id=CONTROL)
    experiment = experiment_create(
        key="prompt",
        name="prompt",
        actor="test",
        variants=[
            VariantInput(key="control", weight=0.0, endpoint=endpoint, is_control=True),
            VariantInput(key="hot", weight=1.0, endpoint=endpoint, overrides={"temperature": 1.5}),
        ],
    )
    experiment_start(experiment=experiment, actor="test")
    run(job(session_id="s-1"))
    assert upstreams.calls(model="avocado-v14")[0]["body"]["temperature"] == 1.5
    kill("variant", "prompt/hot")
    j = run(job(session_id="s-2"))
    assert outcome(j) == ("hot", CONTROL, CONTROL, "variant_killed")
    assert "temperature" not in upstreams.calls(model="avocado-v14")[1]["body"]


def test_killing_a_control_variant_is_refused_unless_confirmed_naming_where_its_traffic_goes(
    catalogue, upstreams
):
    experiment = make_experiment(arms=[("control", CONTROL, 1.0), ("treatment", avocado_id(2), 0.0)])
    target = f"{experiment.key}/control"
    with pytest.raises(ValidationError) as exc:
        kill("variant", target)
    assert DEFAULT in exc.value.message_dict["control_traffic_to"][0]
    with pytest.raises(ValidationError):
        kill_switch_set(
            scope="variant", target=target, active=True, reason="x", actor="a", control_traffic_to=AZURE
        )
    assert KillSwitch.objects.count() == 0
    switch = kill_switch_set(
        scope="variant", target=target, active=True, reason="x", actor="a", control_traffic_to=DEFAULT
    )
    invalidate_all()
    assert switch.active
    assert outcome(run(job())) == ("control", CONTROL, DEFAULT, "variant_killed")
    assert upstreams.call_count(model="avocado-v14") == 0
    kill("variant", target, active=False, reason="over")  # turning it off needs no confirmation


def test_a_control_kill_is_refused_while_the_platform_default_is_itself_killed(catalogue, upstreams):
    experiment = make_experiment(arms=[("control", CONTROL, 1.0), ("treatment", avocado_id(2), 0.0)])
    kill("endpoint", DEFAULT)
    with pytest.raises(ValidationError) as exc:
        kill_switch_set(
            scope="variant",
            target=f"{experiment.key}/control",
            active=True,
            reason="x",
            actor="a",
            control_traffic_to=DEFAULT,
        )
    assert "is itself killed" in exc.value.message_dict["control_traffic_to"][0]
    assert KillSwitch.objects.filter(scope="variant").count() == 0


def test_the_environment_override_turns_external_providers_off_without_any_row(
    catalogue, upstreams, settings
):
    settings.MUSE_KILL_EXTERNAL = True
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])
    assert KillSwitch.objects.count() == 0
    state = kill_state()
    assert state.forced_by_env and state.external_off
    assert outcome(run(job())) == ("treatment", AZURE, CONTROL, "external_killed")
    assert upstreams.call_count(model="muse-special") == 0


def test_when_the_switch_state_cannot_be_read_external_providers_are_off(catalogue, upstreams, monkeypatch):
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])

    def database_down():
        raise DatabaseError("could not connect to server")

    monkeypatch.setattr(killswitch, "build_kill_state", database_down)
    state = kill_state()
    assert state.unreadable
    assert state.endpoint_killed(public_id=AZURE, provider_key="azure", is_external=True)
    assert not state.endpoint_killed(public_id=CONTROL, provider_key="avocado", is_external=False)
    assert outcome(run(job())) == ("treatment", AZURE, CONTROL, "external_killed")
    assert upstreams.call_count(model="muse-special") == 0


def test_a_failed_refresh_fails_closed_even_with_a_good_snapshot_cached(catalogue, settings, monkeypatch):
    from muse_experiments.infra import config_version

    settings.CONFIG_REFRESH_INTERVAL_S = 0
    assert not kill_state().unreadable  # a good snapshot is cached

    def version_unreadable():
        raise DatabaseError("server closed the connection unexpectedly")

    monkeypatch.setattr(config_version, "current", version_unreadable)
    assert kill_state().unreadable


def test_a_queued_job_obeys_a_switch_flipped_after_it_was_enqueued(catalogue, upstreams):
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", AZURE, 1.0)])
    queued = job()
    assert not kill_state().external_off  # this process has a warm, switch-free snapshot
    kill("all_external")
    assert outcome(run(queued)) == ("treatment", AZURE, CONTROL, "external_killed")


# --- the service ---------------------------------------------------------------------------


def test_every_change_is_audited_with_who_and_why(catalogue):
    kill("provider", "azure", reason="5xx storm")
    kill("provider", "azure", active=False, reason="recovered")
    entries = list(AuditEntry.objects.filter(object_type="KillSwitch").order_by("at", "pk"))
    assert [(e.actor, e.action, e.changes["reason"], e.changes["active"]) for e in entries] == [
        ("oncall@muse", "kill_switch_on", "5xx storm", [None, True]),
        ("oncall@muse", "kill_switch_off", "recovered", [True, False]),
    ]
    assert KillSwitch.objects.get().updated_by == "oncall@muse"


@pytest.mark.parametrize(
    ("scope", "target", "reason", "field"),
    [
        ("galaxy", "", "x", "scope"),
        ("all_external", "azure", "x", "target"),
        ("provider", "", "x", "target"),
        ("provider", "nope", "x", "target"),
        ("endpoint", "azure/nope", "x", "target"),
        ("experiment", "nope", "x", "target"),
        ("variant", "exp", "x", "target"),
        ("provider", "azure", "  ", "reason"),
    ],
)
def test_bad_input_is_refused_with_a_field_error_and_nothing_is_written(
    catalogue, scope, target, reason, field
):
    with pytest.raises(ValidationError) as exc:
        kill_switch_set(scope=scope, target=target, active=True, reason=reason, actor="x")
    assert field in exc.value.message_dict
    assert KillSwitch.objects.count() == 0
    assert not AuditEntry.objects.filter(object_type="KillSwitch").exists()


# --- the ops API -----------------------------------------------------------------------------


def test_the_ops_api_turns_a_switch_on_and_lists_it(catalogue, client):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key(['ops'])}"}
    response = client.post(
        "/api/v1/ops/kill-switches",
        {"scope": "endpoint", "target": AZURE, "active": True, "reason": "bad outputs"},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 200, response.json()
    assert response.json()["active"] is True
    assert response.json()["updated_by"].startswith("api-key:test")
    invalidate_all()
    listed = client.get("/api/v1/ops/kill-switches", **headers).json()
    assert [(s["scope"], s["target"], s["active"]) for s in listed["switches"]] == [("endpoint", AZURE, True)]
    assert listed["effective"] == {"external_off": False, "forced_by_env": False, "unreadable": False}
    assert AuditEntry.objects.filter(action="kill_switch_on", changes__target=AZURE).exists()


def test_the_ops_api_answers_field_errors_for_bad_input(catalogue, client):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key(['ops'])}"}
    response = client.post(
        "/api/v1/ops/kill-switches",
        {"scope": "provider", "target": "nope", "active": True, "reason": "x"},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 400
    assert "target" in response.json()["error"]["fields"]
    response = client.post(
        "/api/v1/ops/kill-switches",
        {"scope": "planet", "active": "maybe"},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"scope", "active", "reason"}
    assert KillSwitch.objects.count() == 0


def test_the_ops_api_requires_the_ops_scope(catalogue, client):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key(['completions'])}"}
    assert client.get("/api/v1/ops/kill-switches", **headers).status_code == 403
    response = client.post(
        "/api/v1/ops/kill-switches",
        {"scope": "all_external", "active": True, "reason": "x"},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 403
    assert KillSwitch.objects.count() == 0


# --- the admin -------------------------------------------------------------------------------


def test_the_admin_toggles_a_switch_and_audits_the_user(catalogue, admin_client):
    response = admin_client.post(
        "/admin/routing/killswitch/add/",
        {"scope": "provider", "target": "anthropic", "active": "on", "reason": "quota exhausted"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    switch = KillSwitch.objects.get()
    assert (switch.scope, switch.target, switch.active, switch.updated_by) == (
        "provider",
        "anthropic",
        True,
        "admin",
    )
    response = admin_client.post(
        f"/admin/routing/killswitch/{switch.pk}/change/", {"reason": "quota restored"}
    )  # "active" unchecked = off
    assert response.status_code == 302
    switch.refresh_from_db()
    assert (switch.active, switch.reason) == (False, "quota restored")
    assert list(
        AuditEntry.objects.filter(object_type="KillSwitch")
        .order_by("at", "pk")
        .values_list("actor", "action")
    ) == [("admin", "kill_switch_on"), ("admin", "kill_switch_off")]


def test_the_admin_shows_a_form_error_for_an_unknown_target(catalogue, admin_client):
    response = admin_client.post(
        "/admin/routing/killswitch/add/",
        {"scope": "endpoint", "target": "azure/nope", "active": "on", "reason": "x"},
    )
    assert response.status_code == 200
    assert "No endpoint" in response.content.decode()
    assert KillSwitch.objects.count() == 0


# --- issue 11 §3: a kill stops enrolment -------------------------------------------------------


def sessions_hashing_to(variant: str, n: int) -> list[str]:
    """``n`` fresh session ids the engine assigns to ``variant`` (read-only preview, no exposure)."""
    from muse_experiments.experiments.selectors import assignment_preview

    found = []
    for i in range(200):
        sid = f"unit-{i}"
        if assignment_preview(session_id=sid, user_id=f"user-{i}").routing.variant_key == variant:
            found.append(sid)
        if len(found) == n:
            return found
    raise AssertionError(f"no {n} sessions hash to {variant}")


def new_weights(experiment, **weights):
    return [
        VariantInput(key=v.key, weight=weights[v.key], endpoint=v.endpoint, is_control=v.is_control)
        for v in experiment.variants.all()
    ]


@pytest.mark.parametrize(
    ("scope", "target", "reason"),
    [
        ("experiment", "exp-k", "experiment_killed"),
        ("variant", "exp-k/treat", "variant_killed"),
    ],
)
def test_a_kill_enrols_nobody_new_and_keeps_earlier_units_for_analysis(
    catalogue, upstreams, client, scope, target, reason
):
    from muse_experiments.experiments.selectors import sticky_variants
    from routing.guards.killswitch import KillInForce
    from routing.selectors import experiment_kills_in_force

    experiment = make_experiment(key="exp-k", arms=[("control", CONTROL, 0.5), ("treat", avocado_id(2), 0.5)])
    u1, u2 = sessions_hashing_to("treat", 2)
    run(job(session_id=u1, user_id="user-a"))  # u1 exposed (sticky) in treat before the kill
    switch = kill(scope, target)

    j2 = run(job(session_id=u2, user_id="user-b"))
    assert outcome(j2) == ("treat", avocado_id(2), CONTROL, reason)
    assert j2.result["kill"] == {
        "scope": scope,
        "target": target,
        "reason": reason,
        "since": switch.active_since.isoformat(),
    }
    assert not Exposure.objects.filter(unit_id=u2).exists()  # no enrolment, so no sticky write
    assert sticky_variants(experiment_ids=[experiment.pk], session_id=u2, user_id="user-b") == {}

    j1 = run(job(session_id=u1, user_id="user-a"))  # the sticky record is read, but serves nothing killed
    assert outcome(j1) == ("treat", avocado_id(2), CONTROL, reason)
    assert list(Exposure.objects.values_list("unit_id", "phase", "variant_key")) == [(u1, 1, "treat")]

    experiment_update(
        experiment=experiment, actor="pm", variants=new_weights(experiment, control=0.3, treat=0.7)
    )
    invalidate_all()
    assert outcome(run(job(session_id=u1, user_id="user-a")))[3] == reason
    assert list(Exposure.objects.values_list("unit_id", "phase", "variant_key")) == [(u1, 1, "treat")]
    assert upstreams.call_count(model="avocado-v2") == 1  # only u1's call before the kill

    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key(['analytics:read'])}"}
    preview = client.post(
        "/api/v1/experiments/preview-assignment",
        {"session_id": u2, "user_id": "user-b"},
        content_type="application/json",
        **headers,
    ).json()
    assert preview["routing"]["variant"] == "treat"  # what the hash says …
    assert preview["routing_kill"]["reason"] == reason  # … and that a kill is in force on it
    assert (preview["routing_kill"]["scope"], preview["routing_kill"]["target"]) == (scope, target)

    assert experiment_kills_in_force(experiment_key="exp-k") == [
        KillInForce(scope, target, reason, switch.active_since)
    ]
    kill(scope, target, active=False, reason="over")
    assert experiment_kills_in_force(experiment_key="exp-k") == []
    assert KillSwitch.objects.get().active_since is None


def test_kills_in_force_list_the_endpoint_and_provider_kills_of_an_experiments_variants(catalogue):
    from routing.selectors import experiment_kills_in_force

    make_experiment(key="exp-e", arms=[("control", CONTROL, 0.5), ("azure", AZURE, 0.5)])
    make_experiment(key="exp-other", arms=[("control", CONTROL, 0.5), ("claude", CLAUDE, 0.5)])
    first = kill("provider", "azure")
    second = kill("all_external")
    kill("endpoint", CLAUDE)  # not used by exp-e
    assert [
        (k.scope, k.target, k.reason, k.since) for k in experiment_kills_in_force(experiment_key="exp-e")
    ] == [
        ("provider", "azure", "provider_killed", first.active_since),
        ("all_external", "", "external_killed", second.active_since),
    ]
    assert experiment_kills_in_force(experiment_key="nope") == []


def test_a_pinned_model_under_a_kill_fails_model_unavailable_naming_the_kill(catalogue, upstreams):
    switch = kill("all_external")
    j = run(job(model=AZURE))
    assert j.status == "failed"
    assert j.error == (
        f"model_unavailable: The model {AZURE} is unavailable: kill switch all_external is on since "
        f"{switch.active_since.isoformat()} (external_killed)."
    )
    record = CallRecord.objects.get(job=j)
    assert (record.reason, record.error_kind, record.served_endpoint) == (
        "external_killed",
        "model_unavailable",
        "",
    )
    assert upstreams.call_count(model="muse-special") == 0


def test_the_target_help_text_keeps_its_angle_brackets(catalogue, admin_client):
    page = admin_client.get("/admin/routing/killswitch/add/").content.decode()
    assert "&lt;experiment key&gt;/&lt;variant key&gt;" in page
