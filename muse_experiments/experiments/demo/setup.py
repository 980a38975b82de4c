"""What the demo creates before any traffic: the experiments (through the services, as the admin
does), the API keys and the ``admin`` user.

Routing order decides which running experiment serves a unit: the oldest (lowest id) that
includes it. The bandit and the rollout target their own streams (:mod:`.config`), so they are
created first, as drafts, and the untargeted four-arm experiment after them takes every other
session; the adaptive part starts the drafts when its traffic begins
(:func:`.adaptive.adaptive_start`).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model

from muse_experiments.api.auth import api_key_create

from ..models import Experiment, ExperimentStatus, Rollout, ShadowStatus, ShadowTest
from ..services.edits import experiment_create, experiment_update
from ..services.lifecycle import experiment_start, experiment_stop
from ..services.rollouts import CHECKED_STATES, rollout_create, rollout_roll_back
from ..services.shadow import shadow_test_stop
from ..services.variants import VariantInput
from . import config

ACTOR = OWNER = "demo"


@dataclass(frozen=True)
class DemoExperiments:
    """The experiments of one demo run: the running four-arm one, and the bandit and the rollout
    (drafts until the adaptive part starts them)."""

    main: Experiment
    bandit: Experiment
    rollout: Rollout


def _endpoints(public_ids) -> dict:
    from routing.models import ModelEndpoint

    return {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=list(public_ids))}


def stop_previous_demos(write: Callable[[str], None]) -> None:
    """Stop what earlier demo runs left running (owner ``demo``): the oldest running experiment
    that includes a unit decides its model, so an old demo would take the new one's traffic. A
    rollout still ramping is rolled back first (else its check would keep moving its weights).
    Stopping an experiment stops the shadow tests on it; a shadow test still running on an
    experiment an older version of the demo stopped (``shadow-demo-<stamp>``) is stopped too."""
    for rollout in Rollout.objects.filter(experiment__owner=OWNER, state__in=CHECKED_STATES):
        rollout_roll_back(rollout=rollout, actor=ACTOR, message="a new demo run replaced it")
    for old in Experiment.objects.filter(owner=OWNER, status=ExperimentStatus.RUNNING):
        experiment_stop(experiment=old, actor=ACTOR)
        write(f"stopped the previous demo experiment {old.key}")
    for test in ShadowTest.objects.filter(source_experiment__owner=OWNER, status=ShadowStatus.RUNNING):
        shadow_test_stop(test=test, actor=ACTOR)
        write(f"stopped the previous demo shadow test {test.key}")


def create_experiments(
    write: Callable[[str], None],
    *,
    rollout_step_min_units: int = config.ROLLOUT_STEP_MIN_UNITS,
    stamp: str | None = None,
) -> DemoExperiments:
    """Stop earlier demos; create the bandit and the rollout (drafts) and the four-arm experiment
    (started), keyed ``demo-bandit-<stamp>``, ``demo-rollout-<stamp>`` and ``demo-<stamp>``
    (``stamp``: the local time, ``%Y%m%d-%H%M%S``, by default). ``rollout_step_min_units``:
    candidate units a rollout step needs (tests use fewer sessions). Raises ValidationError for a
    key already taken or a model missing from the catalogue."""
    stop_previous_demos(write)
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    endpoints = _endpoints(
        [a[1] for a in config.ARMS]
        + [a[1] for a in config.BANDIT_ARMS]
        + [config.ROLLOUT_CANDIDATE, config.ROLLOUT_CURRENT]
    )
    bandit = experiment_create(
        key=f"demo-bandit-{stamp}",
        name="Bandit: Avocado v13, v14 and v15",
        hypothesis="Thompson sampling moves the bandit stream's traffic to the version that succeeds most.",
        owner=OWNER,
        actor=ACTOR,
        type="bandit",
        bandit=config.BANDIT_SETTINGS,
        condition={"stream": config.BANDIT_STREAM},
        primary_metric="task_success",
        variants=[
            VariantInput(key=k, weight=1 / len(config.BANDIT_ARMS), endpoint=endpoints[pid], is_control=c)
            for k, pid, c in config.BANDIT_ARMS
        ],
    )
    rollout = rollout_create(
        key=f"demo-rollout-{stamp}",
        candidate=endpoints[config.ROLLOUT_CANDIDATE],
        current=endpoints[config.ROLLOUT_CURRENT],
        steps=config.ROLLOUT_STEPS,
        step_min_minutes=0,
        step_min_units=rollout_step_min_units,
        guardrails=config.ROLLOUT_GUARDRAILS,
        actor=ACTOR,
    )
    # the rollout's experiment serves the rollout stream only, and is the demo's (stopped by the next run)
    experiment_update(
        experiment=rollout.experiment,
        actor=ACTOR,
        condition={"stream": config.ROLLOUT_STREAM},
        owner=OWNER,
    )
    main = experiment_create(
        key=f"demo-{stamp}",
        name="Avocado v15 and external models vs Avocado v14",
        hypothesis="Newer or external models raise the share of subagent sessions that succeed.",
        owner=OWNER,
        actor=ACTOR,
        primary_metric="task_success",
        guardrail_metrics=["latency_ms", "cost_usd"],
        variants=[
            VariantInput(key=k, weight=w, endpoint=endpoints[pid], is_control=c)
            for k, pid, w, c in config.ARMS
        ],
    )
    main = experiment_start(experiment=main, actor=ACTOR)
    return DemoExperiments(main=main, bandit=bandit, rollout=Rollout.objects.get(pk=rollout.pk))


def api_keys(experiment_key: str) -> tuple[str, str]:
    """``(client key, writer key)``: the client's scopes are completions, events and
    analytics:read (what an agent and a dashboard need); the writer's experiments:write."""
    _, client = api_key_create(
        name=f"demo {experiment_key}", scopes=["completions", "events", "analytics:read"]
    )
    _, writer = api_key_create(name=f"demo {experiment_key} writer", scopes=["experiments:write"])
    return client, writer


def ensure_admin() -> str:
    """The ``admin`` superuser, with a fresh password each run (``DEMO_ADMIN_PASSWORD`` fixes it)."""
    user_model = get_user_model()
    password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
    user = user_model.objects.filter(username="admin").first()
    if user is None:
        user_model.objects.create_superuser("admin", "admin@example.com", password)
    else:
        user.set_password(password)
        user.save(update_fields=["password"])
    return password
