"""Roles (README "Roles"): each shipped group, a staff user in no group and a superuser, against
every ``/api/v1`` endpoint and method, the drop-ins, the admin pages and actions, and the analyst
pages: the exact status each gets, and whether the write happened.

Users log in for real (a session row and its cookie) and send the CSRF token as a browser does
(``enforce_csrf_checks``); the groups are the ones the migration ``muse_experiments/0007_roles``
created. Each role's request runs in a savepoint rolled back afterwards, so every role starts
from the same state.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps as global_apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection, transaction
from django.forms.models import model_to_dict
from django.test import TestCase
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from analytics.models import OutcomeEvent, ResultSnapshot
from analytics.services import results_compute
from muse_experiments.api.auth import SESSION_PERMISSIONS
from muse_experiments.celery import app as celery_app
from muse_experiments.experiments.models import Experiment, PlatformConfig, Rollout
from muse_experiments.experiments.services.rollouts import rollout_create, rollout_start
from muse_experiments.infra.config_version import invalidate_all
from routing import reasoning_store
from routing.jobs import completion_job_create
from routing.models import CompletionJob, KillSwitch, ModelEndpoint
from routing.providers.types import ReasoningState
from routing.transcripts.models import TrainingOptOut, TrainingRecord, Transcript, TranscriptTurn
from routing.transcripts.services import training_opt_out
from tests.factories import make_experiment
from tests.muse_experiments.conftest import V14, V15
from tests.muse_experiments.experiments.test_admin import form_data
from tests.transcripts.conftest import AVOCADO, record_turn
from tests.transcripts.test_gate import record

pytestmark = pytest.mark.django_db

#: The columns of every row below.
ROLES = ("analyst", "pm", "operator", "catalogue", "steward", "staff", "superuser")
GROUPS = {
    "analyst": "Analyst",
    "pm": "Product manager",
    "operator": "Operator",
    "catalogue": "Catalogue admin",
    "steward": "Training-data steward",
}
#: A session started without an API key: the one kind a signed-in user may end (routing.reasoning_store).
KEYLESS_SESSION = reasoning_store.OwnedSession(owner=reasoning_store.KEYLESS_OWNER, session_id="s-end")
REASONING = ReasoningState(
    "fp", "azure_openai", "responses", ({"type": "reasoning", "encrypted_content": "x"},)
)


def _session(role: str) -> APIClient:
    """A client logged in as a new staff user of ``role``, sending the CSRF token it was given."""
    users = get_user_model().objects
    if role == "superuser":
        user = users.create_superuser(role, f"{role}@example.com", None)
    else:
        user = users.create_user(role, f"{role}@example.com", None, is_staff=True)
        if role in GROUPS:
            user.groups.add(Group.objects.get(name=GROUPS[role]))
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/admin/").status_code == 200  # the page sets the CSRF cookie
    client.defaults["HTTP_X_CSRFTOKEN"] = client.cookies["csrftoken"].value
    return client


@pytest.fixture
def sessions(catalogue, settings, redis_store) -> dict[str, APIClient]:
    """The seeded catalogue, a running experiment ``exp`` and one logged-in client per role (the
    reasoning store emptied: session end is checked there)."""
    settings.DROPIN_WAIT_S = settings.COMPLETION_SYNC_WAIT_S = 0.5  # no worker runs: do not wait
    make_experiment(key="exp")
    return {role: _session(role) for role in ROLES}


def _exp() -> Experiment:
    return Experiment.objects.get(key="exp")


def _tasks_run_here(send: Callable[[], Any]) -> Any:
    """``send()``'s response, with the Celery tasks it queued on commit run in this process."""
    celery_app.conf.task_always_eager = True
    try:
        with TestCase.captureOnCommitCallbacks(execute=True):
            return send()
    finally:
        celery_app.conf.task_always_eager = False


def _endpoint_form(endpoint: ModelEndpoint, **changes) -> dict[str, str]:
    """POST data of the model endpoint change form: its current values with ``changes``."""
    data = model_to_dict(endpoint, exclude=["id"])
    data.update(changes)
    return {k: ("on" if v is True else str(v)) for k, v in data.items() if v is not False and v is not None}


def _action(url: str, action: str, pk) -> Callable[[APIClient, Any], Any]:
    return lambda c, _: c.post(url, {"action": action, "_selected_action": [pk() if callable(pk) else pk]})


@dataclass(frozen=True)
class Case:
    """One request, and what each role gets.

    ``statuses``: the exact status per role, in :data:`ROLES` order. ``arrange()`` runs first
    (in the role's savepoint) and returns what ``act`` and ``written`` receive. ``written``
    (writes only) says whether the write happened: it must have for a role answered ``ok``,
    and must not have for any other.
    """

    name: str
    statuses: str
    act: Callable[[APIClient, Any], Any]
    arrange: Callable[[], Any] = lambda: None
    written: Callable[[Any], bool] | None = None
    ok: int | None = None


def _opt_out(user_id: str) -> Callable[[], Any]:
    return lambda: training_opt_out(user_id=user_id, actor="test")[0]


API = "/api/v1"
COMPLETION = {"session_id": "s-1", "user_id": "u-1", "messages": [{"role": "user", "content": "hi"}]}
KILL_ALL = {"scope": "all_external", "active": True, "reason": "x"}
CHAT = {"model": "muse-default", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "muse-default", "input": "hi"}
MESSAGES = {"model": "muse-default", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
EXP_CHANGELIST = "/admin/muse_experiments/experiment/"


def _patch_weights(c: APIClient, _) -> Any:
    body = {
        "version": _exp().version,
        "variants": [
            {"key": "control", "weight": 0.3, "model": V14},
            {"key": "treatment", "weight": 0.7, "model": V15},
        ],
    }
    return c.patch(f"{API}/experiments/exp", body, format="json")


ROLLOUT_BODY = {
    "key": "ramp",
    "model": V15,
    "replaces": V14,
    "steps": [10, 100],
    "guardrails": ["error_rate"],
}


def _rollout(*, start: bool = False) -> Rollout:
    """A draft rollout ``ramp`` of Avocado v15 replacing v14 (running with ``start``)."""
    endpoints = {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=[V14, V15])}
    rollout = rollout_create(
        key="ramp",
        candidate=endpoints[V15],
        current=endpoints[V14],
        steps=[10, 100],
        step_min_minutes=0,
        step_min_units=1,
        guardrails=["error_rate"],
        actor="test",
    )
    return rollout_start(rollout=rollout, actor="test") if start else rollout


def _rollout_state(rollout: Rollout) -> str:
    return Rollout.objects.get(pk=rollout.pk).state


def _export(c: APIClient, _) -> Any:
    response = c.post(f"{API}/training/export", {}, format="json")
    if response.streaming:
        b"".join(response.streaming_content)  # the turns are marked once the stream completes
    return response


# statuses per role: analyst pm operator catalogue steward staff superuser
CASES = [
    # --- /api/v1: completions (scope completions; a session needs routing.request_completion)
    Case(
        "api POST completions",
        "403 403 403 403 403 403 202",
        lambda c, _: c.post(f"{API}/completions", {**COMPLETION, "async": True}, format="json"),
        written=lambda _: CompletionJob.objects.filter(session_id="s-1").exists(),
        ok=202,
    ),
    Case(
        "api GET completion job",
        "403 403 403 403 403 403 200",
        lambda c, job: c.get(f"{API}/completions/{job.id}"),
        arrange=lambda: completion_job_create(
            api_key=None, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []}
        )[0],
    ),
    Case(
        "api POST session end",
        "403 403 403 403 403 403 200",
        lambda c, _: c.post(f"{API}/sessions/s-end/end"),
        arrange=lambda: reasoning_store.reasoning_save(
            session=KEYLESS_SESSION, state=REASONING, endpoint_id="azure/muse-special"
        ),
        written=lambda _: reasoning_store.session_end(session=KEYLESS_SESSION) == 0,
        ok=200,
    ),
    # --- the drop-ins: API keys only, whatever the session's permissions (a session is not a login there)
    Case(
        "v1 POST chat completions",
        "401 401 401 401 401 401 401",
        lambda c, _: c.post("/v1/chat/completions", CHAT, format="json"),
        written=lambda _: CompletionJob.objects.exists(),
    ),
    Case(
        "v1 POST responses",
        "401 401 401 401 401 401 401",
        lambda c, _: c.post("/v1/responses", RESPONSES, format="json"),
        written=lambda _: CompletionJob.objects.exists(),
    ),
    Case(
        "v1 POST messages",
        "401 401 401 401 401 401 401",
        lambda c, _: c.post("/v1/messages", MESSAGES, format="json"),
        written=lambda _: CompletionJob.objects.exists(),
    ),
    # --- events (analytics.add_outcomeevent: no shipped role; services send events with keys)
    Case(
        "api POST events",
        "403 403 403 403 403 403 201",
        lambda c, _: c.post(
            f"{API}/events",
            {"event_id": "e-1", "name": "task_success", "session_id": "s", "value": 1},
            format="json",
        ),
        written=lambda _: OutcomeEvent.objects.filter(event_id="e-1").exists(),
        ok=201,
    ),
    # --- experiments and results (scope analytics:read / experiments:write)
    Case("api GET experiments", "200 200 200 403 403 403 200", lambda c, _: c.get(f"{API}/experiments")),
    Case("api GET experiment", "200 200 200 403 403 403 200", lambda c, _: c.get(f"{API}/experiments/exp")),
    Case(
        "api PATCH experiment",
        "403 200 403 403 403 403 200",
        _patch_weights,
        written=lambda _: _exp().phase == 2,
        ok=200,
    ),
    Case(
        "api POST assignment preview",
        "200 200 200 403 403 403 200",
        lambda c, _: c.post(f"{API}/experiments/preview-assignment", {"session_id": "s-1"}, format="json"),
    ),
    Case(
        "api GET results",
        "200 200 200 403 403 403 200",
        lambda c, _: c.get(f"{API}/experiments/exp/results"),
        arrange=lambda: results_compute(experiment=_exp()),
    ),
    Case(
        "api GET results?refresh=1",
        "403 200 403 403 403 403 200",
        lambda c, _: c.get(f"{API}/experiments/exp/results", {"refresh": "1"}),
        written=lambda _: ResultSnapshot.objects.exists(),
        ok=200,
    ),
    Case(
        "api POST results compute",
        "403 202 403 403 403 403 202",
        lambda c, _: _tasks_run_here(
            lambda: c.post(f"{API}/experiments/exp/results/compute", {}, format="json")
        ),
        written=lambda _: ResultSnapshot.objects.exists(),
        ok=202,
    ),
    # --- rollouts: read with the experiment (analytics:read), driven as its edit (experiments:write)
    Case(
        "api GET rollout",
        "200 200 200 403 403 403 200",
        lambda c, _: c.get(f"{API}/rollouts/ramp"),
        arrange=_rollout,
    ),
    Case(
        "api POST rollouts",
        "403 201 403 403 403 403 201",
        lambda c, _: c.post(f"{API}/rollouts", ROLLOUT_BODY, format="json"),
        written=lambda _: Rollout.objects.filter(key="ramp").exists(),
        ok=201,
    ),
    Case(
        "api POST rollout start",
        "403 200 403 403 403 403 200",
        lambda c, _: c.post(f"{API}/rollouts/ramp/start"),
        arrange=_rollout,
        written=lambda r: _rollout_state(r) == "running",
        ok=200,
    ),
    Case(
        "api POST rollout pause",
        "403 200 403 403 403 403 200",
        lambda c, _: c.post(f"{API}/rollouts/ramp/pause"),
        arrange=lambda: _rollout(start=True),
        written=lambda r: _rollout_state(r) == "paused",
        ok=200,
    ),
    Case(
        "api POST rollout rollback",
        "403 200 403 403 403 403 200",
        lambda c, _: c.post(f"{API}/rollouts/ramp/rollback"),
        arrange=lambda: _rollout(start=True),
        written=lambda r: _rollout_state(r) == "rolled_back",
        ok=200,
    ),
    # --- kill switches (scope ops)
    Case(
        "api GET kill switches", "200 200 200 403 403 403 200", lambda c, _: c.get(f"{API}/ops/kill-switches")
    ),
    Case(
        "api POST kill switch",
        "403 403 200 403 403 403 200",
        lambda c, _: c.post(f"{API}/ops/kill-switches", KILL_ALL, format="json"),
        written=lambda _: KillSwitch.objects.filter(active=True).exists(),
        ok=200,
    ),
    # --- training data (scopes training, training:export, training:ingest)
    Case(
        "api GET training opt-out",
        "403 403 403 403 200 403 200",
        lambda c, _: c.get(f"{API}/users/u-1/training-opt-out"),
    ),
    Case(
        "api POST training opt-out",
        "403 403 403 403 200 403 200",
        lambda c, _: c.post(f"{API}/users/u-1/training-opt-out"),
        written=lambda _: TrainingOptOut.objects.filter(user_id="u-1").exists(),
        ok=200,
    ),
    Case(
        "api DELETE training opt-out",
        "403 403 403 403 200 403 200",
        lambda c, _: c.delete(f"{API}/users/u-1/training-opt-out"),
        arrange=_opt_out("u-1"),
        written=lambda _: not TrainingOptOut.objects.filter(user_id="u-1").exists(),
        ok=200,
    ),
    Case(
        "api POST training export",
        "403 403 403 403 200 403 200",
        _export,
        arrange=lambda: record_turn("s-x", "u-x", AVOCADO),
        written=lambda _: TranscriptTurn.objects.filter(exported_at__isnull=False).exists(),
        ok=200,
    ),
    Case(
        "api POST training ingest",
        "403 403 403 403 200 403 200",
        lambda c, _: c.post(f"{API}/training/ingest", {"records": [record(1)]}, format="json"),
        written=lambda _: TrainingRecord.objects.exists(),
        ok=200,
    ),
    # --- admin: experiments
    Case("admin experiments list", "200 200 200 403 403 403 200", lambda c, _: c.get(EXP_CHANGELIST)),
    Case(
        "admin experiment add page",
        "403 200 403 403 403 403 200",
        lambda c, _: c.get(f"{EXP_CHANGELIST}add/"),
    ),
    Case(
        "admin experiment change (weights)",
        "403 302 403 403 403 403 302",
        lambda c, _: c.post(
            f"{EXP_CHANGELIST}{_exp().pk}/change/",
            form_data(_exp(), variants=[("control", V14, 30, True), ("treatment", V15, 70, False)]),
        ),
        written=lambda _: _exp().phase == 2,
        ok=302,
    ),
    Case(
        "admin experiments action pause",  # no action offered to a viewer: the list again
        "200 302 200 403 403 403 302",
        _action(EXP_CHANGELIST, "pause", lambda: _exp().pk),
        written=lambda _: _exp().status == "paused",
        ok=302,
    ),
    Case(
        "admin experiment pause button",
        "403 302 403 403 403 403 302",
        lambda c, _: c.post(
            reverse("admin:muse_experiments_experiment_lifecycle", args=[_exp().pk, "pause"])
        ),
        written=lambda _: _exp().status == "paused",
        ok=302,
    ),
    Case(
        "admin experiment preview",
        "200 200 200 403 403 403 200",
        lambda c, _: c.get(reverse("admin:muse_experiments_experiment_preview", args=[_exp().pk])),
    ),
    Case(
        "admin platform holdout add",  # the singleton: addable only when missing, by add permission
        "403 403 403 403 403 403 302",
        lambda c, _: c.post(
            "/admin/muse_experiments/platformconfig/add/", {"holdout_share": "5", "holdout_seed": "s"}
        ),
        arrange=lambda: PlatformConfig.objects.all().delete(),
        written=lambda _: PlatformConfig.objects.filter(holdout_share=0.05).exists(),
        ok=302,
    ),
    Case(
        "admin rollouts list",  # read-only: rollouts change through the API and the check
        "200 200 200 403 403 403 200",
        lambda c, _: c.get("/admin/muse_experiments/rollout/"),
        arrange=_rollout,
    ),
    Case(
        "admin rollout page (ramp history)",
        "200 200 200 403 403 403 200",
        lambda c, r: c.get(f"/admin/muse_experiments/rollout/{r.pk}/change/"),
        arrange=lambda: _rollout(start=True),
    ),
    Case(
        "admin api keys list",
        "403 403 403 403 403 403 200",
        lambda c, _: c.get("/admin/muse_experiments/apikey/"),
    ),
    # --- admin: analytics
    Case(
        "admin metric add page",
        "403 200 403 403 403 403 200",
        lambda c, _: c.get("/admin/analytics/metricdefinition/add/"),
    ),
    Case(
        "admin result snapshots list",
        "200 200 200 403 403 403 200",
        lambda c, _: c.get("/admin/analytics/resultsnapshot/"),
    ),
    # --- admin: routing
    Case(
        "admin kill switch add",
        "403 403 302 403 403 403 302",
        lambda c, _: c.post(
            "/admin/routing/killswitch/add/", {"scope": "all_external", "active": "on", "reason": "x"}
        ),
        written=lambda _: KillSwitch.objects.filter(active=True).exists(),
        ok=302,
    ),
    Case(
        "admin providers list", "200 200 200 200 403 403 200", lambda c, _: c.get("/admin/routing/provider/")
    ),
    Case(
        "admin model endpoint change",
        "403 403 403 302 403 403 302",
        lambda c, e: c.post(f"/admin/routing/modelendpoint/{e.pk}/change/", _endpoint_form(e, timeout_s=33)),
        arrange=lambda: ModelEndpoint.objects.get(public_id=V14),
        written=lambda e: ModelEndpoint.objects.get(pk=e.pk).timeout_s == 33,
        ok=302,
    ),
    Case(
        "admin completion jobs list",  # jobs hold users' prompts: operators only
        "403 403 200 403 403 403 200",
        lambda c, _: c.get("/admin/routing/completionjob/"),
    ),
    # --- admin: transcripts and training data
    Case(
        "admin transcripts list",
        "403 403 403 403 200 403 200",
        lambda c, _: c.get("/admin/transcripts/transcript/"),
    ),
    Case(
        "admin transcripts action opt out",
        "403 403 403 403 302 403 302",
        _action("/admin/transcripts/transcript/", "opt_users_out", lambda: Transcript.objects.get().pk),
        arrange=lambda: record_turn("s-a", "u-a", AVOCADO),
        written=lambda _: TrainingOptOut.objects.filter(user_id="u-a").exists(),
        ok=302,
    ),
    Case(
        "admin opt-out add",
        "403 403 403 403 302 403 302",
        lambda c, _: c.post("/admin/transcripts/trainingoptout/add/", {"user_id": "u-b"}),
        written=lambda _: TrainingOptOut.objects.filter(user_id="u-b").exists(),
        ok=302,
    ),
    Case(
        "admin opt-outs action opt back in",
        "403 403 403 403 302 403 302",
        lambda c, o: _action("/admin/transcripts/trainingoptout/", "opt_back_in", o.pk)(c, o),
        arrange=_opt_out("u-c"),
        written=lambda _: not TrainingOptOut.objects.filter(user_id="u-c").exists(),
        ok=302,
    ),
    # --- analyst pages
    Case("page results list", "200 200 200 403 403 403 200", lambda c, _: c.get("/results/")),
    Case("page results", "200 200 200 403 403 403 200", lambda c, _: c.get("/results/exp/")),
    Case(
        "page results recompute",
        "403 302 403 403 403 403 302",
        lambda c, _: _tasks_run_here(lambda: c.post("/results/exp/recompute")),
        written=lambda _: ResultSnapshot.objects.exists(),
        ok=302,
    ),
    Case("page routing health", "200 200 200 403 403 403 200", lambda c, _: c.get("/routing/health/")),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_role_gets_exactly_what_its_permissions_allow(case: Case, sessions):
    observed, expected = {}, {}
    for role, status in zip(ROLES, case.statuses.split(), strict=True):
        savepoint = transaction.savepoint()
        try:
            context = case.arrange()
            response = case.act(sessions[role], context)
            written = case.written(context) if case.written else None
        finally:
            transaction.savepoint_rollback(savepoint)
            invalidate_all()
        observed[role] = (response.status_code, written)
        expected[role] = (int(status), int(status) == case.ok if case.written else None)
    assert observed == expected


def _api_routes() -> list[tuple[str, type]]:
    """``(URL name, view class)`` of every route under ``/api/v1/`` and ``/v1/``."""
    routes = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and prefix.startswith(("api/v1/", "v1/")):
                routes.append((p.name, p.callback.cls))

    walk(get_resolver().url_patterns, "")
    return routes


def test_the_session_table_decides_every_api_route_and_method():
    methods = ("get", "post", "put", "patch", "delete")
    operations = {(name, m.upper()) for name, view in _api_routes() for m in methods if hasattr(view, m)}
    assert len(operations) == 32  # 20 + POST experiments, five rollout and six shadow-test operations
    assert operations == set(SESSION_PERMISSIONS)


def test_a_method_the_view_lacks_is_a_405_and_head_or_options_need_what_get_needs(sessions):
    analyst, staff = sessions["analyst"], sessions["staff"]
    assert analyst.put(f"{API}/experiments/exp", {}, format="json").status_code == 405
    assert staff.put(f"{API}/experiments/exp", {}, format="json").status_code == 405
    assert analyst.head(f"{API}/experiments/exp").status_code == 200
    assert analyst.options(f"{API}/experiments/exp").status_code == 200
    assert staff.options(f"{API}/experiments/exp").status_code == 403
    assert analyst.options(f"{API}/completions").status_code == 403  # no GET there: keys only


def test_a_session_without_its_csrf_token_changes_nothing(sessions):
    client = sessions["superuser"]
    del client.defaults["HTTP_X_CSRFTOKEN"]
    response = client.post(f"{API}/ops/kill-switches", KILL_ALL, format="json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert not KillSwitch.objects.exists()


def test_viewing_transcripts_and_opt_outs_does_not_allow_their_actions(catalogue):
    """The transcript and opt-out actions write opt-outs: a viewer is not offered them."""
    user = get_user_model().objects.create_user("viewer", "v@example.com", None, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="transcripts", codename__in=["view_transcript", "view_trainingoptout"]
        )
    )
    client = APIClient()
    client.force_login(user)
    record_turn("s-v", "u-v", AVOCADO)
    transcript = Transcript.objects.get()
    page = client.post(
        "/admin/transcripts/transcript/", {"action": "opt_users_out", "_selected_action": [transcript.pk]}
    )
    assert page.status_code == 200 and not TrainingOptOut.objects.exists()
    opt_out = _opt_out("u-w")()
    page = client.post(
        "/admin/transcripts/trainingoptout/", {"action": "opt_back_in", "_selected_action": [opt_out.pk]}
    )
    assert page.status_code == 200 and TrainingOptOut.objects.filter(user_id="u-w").exists()


ROLES_MIGRATION = importlib.import_module("muse_experiments.experiments.migrations.0007_roles")
#: Later migrations that add to the roles (run after 0007 to get the shipped roles).
SHADOW_MIGRATION = importlib.import_module("muse_experiments.experiments.migrations.0009_shadow_tests")
ROLLOUT_MIGRATION = importlib.import_module("muse_experiments.experiments.migrations.0011_rollout_roles")


def _roles() -> dict[str, set[str]]:
    return {
        g.name: {
            f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.select_related("content_type")
        }
        for g in Group.objects.filter(name__in=ROLES_MIGRATION.ROLES)
    }


def test_the_roles_migration_is_idempotent_and_reversible(db):
    editor = SimpleNamespace(connection=connection)
    shipped = _roles()
    assert set(shipped) == set(GROUPS.values())
    assert shipped["Catalogue admin"] == {
        f"routing.{a}_{m}" for a in ("view", "add", "change") for m in ("provider", "modelendpoint")
    }
    assert "transcripts.export_training_data" in shipped["Training-data steward"]
    assert not any(
        "export" in p for name, perms in shipped.items() if name != "Training-data steward" for p in perms
    )
    Group.objects.get(name="Analyst").permissions.clear()  # an edited group is reset to its role
    ROLES_MIGRATION.create_roles(global_apps, editor)
    ROLES_MIGRATION.create_roles(global_apps, editor)
    SHADOW_MIGRATION.grant_shadow_permissions(global_apps, editor)
    ROLLOUT_MIGRATION.grant_rollout_permissions(global_apps, editor)
    ROLLOUT_MIGRATION.grant_rollout_permissions(global_apps, editor)
    assert _roles() == shipped
    ROLES_MIGRATION.delete_roles(global_apps, editor)
    assert not Group.objects.filter(name__in=GROUPS.values()).exists()
    ROLES_MIGRATION.create_roles(global_apps, editor)
    SHADOW_MIGRATION.grant_shadow_permissions(global_apps, editor)
    ROLLOUT_MIGRATION.grant_rollout_permissions(global_apps, editor)
    assert _roles() == shipped


def test_rollouts_are_seen_by_the_roles_that_see_experiments_and_edited_by_product_managers(db):
    rollout = {"muse_experiments.view_rollout", "muse_experiments.view_rolloutevent"}
    edit = {"muse_experiments.add_rollout", "muse_experiments.change_rollout"}
    shipped = _roles()
    assert {name for name, perms in shipped.items() if rollout <= perms} == {
        "Analyst",
        "Product manager",
        "Operator",
    }
    assert {name for name, perms in shipped.items() if perms & edit} == {"Product manager"}
    assert edit <= shipped["Product manager"]
    ROLLOUT_MIGRATION.revoke_rollout_permissions(global_apps, SimpleNamespace(connection=connection))
    assert not any(perms & (rollout | edit) for perms in _roles().values())


def test_a_missing_permission_stops_the_roles_migration(db, monkeypatch):
    monkeypatch.setitem(ROLES_MIGRATION.ROLES, "Analyst", ["routing.view_nothing"])
    with pytest.raises(LookupError, match="routing.view_nothing"):
        ROLES_MIGRATION.create_roles(global_apps, SimpleNamespace(connection=connection))


def test_the_job_api_keeps_a_key_to_its_own_jobs_and_a_session_needs_its_permissions(sessions):
    """Completion jobs: a key reads only its own (404 for another's); a session user needs
    ``routing.request_completion`` and ``routing.view_completionjob``."""
    from muse_experiments.api.auth import api_key_create

    mine, raw = api_key_create(name="mine", scopes=["completions"])
    theirs, _ = api_key_create(name="theirs", scopes=["completions"])
    job = lambda key: completion_job_create(  # noqa: E731
        api_key=key, session_id="s", user_id="u", subagent="", attributes={}, request={"messages": []}
    )[0]
    own, other = job(mine), job(theirs)
    key = APIClient()
    key.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert key.get(f"{API}/completions/{own.id}").status_code == 200
    assert key.get(f"{API}/completions/{other.id}").status_code == 404
    assert sessions["operator"].get(f"{API}/completions/{other.id}").status_code == 403
    assert sessions["superuser"].get(f"{API}/completions/{other.id}").status_code == 200
    assert sessions["superuser"].get(f"{API}/completions/{uuid.uuid4()}").status_code == 404
