"""The demo's adaptive part (``muse_experiments.experiments.demo.adaptive``) against a live server
and a real Celery worker, small: three rounds of 30 bandit and 30 rollout sessions. The schedule's
tasks are the ones beat sends (``analytics.bandit_updates``, ``analytics.check_rollouts``), sent by
the test since no beat runs here, with a bandit schedule minute of 1 s (``BANDIT_MINUTE_S``)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from muse_experiments.celery import app as celery_app
from muse_experiments.experiments.demo import config, setup
from muse_experiments.experiments.demo.adaptive import DECISIONS, adaptive_run, adaptive_start
from muse_experiments.experiments.models import (
    AuditEntry,
    BanditUpdate,
    Experiment,
    ExperimentPhase,
    ShadowTest,
)
from muse_experiments.experiments.services.shadow import shadow_test_create, shadow_test_start
from tests.factories import seed_catalogue


@pytest.fixture
def short_schedule(monkeypatch, settings):
    """A bandit schedule minute of 1 s here and in the worker started after this fixture."""
    monkeypatch.setenv("BANDIT_MINUTE_S", "1")
    settings.BANDIT_MINUTE_S = 1.0


def _schedule_tick() -> None:
    celery_app.send_task("analytics.bandit_updates")
    celery_app.send_task("analytics.check_rollouts")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_demo_bandit_moves_its_weights_and_the_rollout_check_decides(
    short_schedule, live_server, upstreams, celery_worker_process
):
    seed_catalogue(upstreams.url)
    demo = setup.create_experiments(lambda _: None, rollout_step_min_units=5)
    key, _ = setup.api_keys(demo.main.key)
    adaptive_start(bandit=demo.bandit, rollout=demo.rollout)

    out = adaptive_run(
        live_server.url,
        key,
        bandit=demo.bandit,
        rollout=demo.rollout,
        alive=lambda: None,
        rounds=3,
        bandit_sessions=30,
        rollout_sessions=30,
        concurrency=4,
        wait_s=30,
        nudge=_schedule_tick,
    )

    assert out.misrouted == 0  # each stream went to its own experiment, none to the four-arm one
    assert [r["on_time"] for r in out.rounds] == [True] * len(out.rounds)
    # the bandit: every round was seen by an update, and the weights changed at least once
    arms = {k for k, _, _ in config.BANDIT_ARMS}
    assert len(out.bandit_updates) >= len(out.rounds)
    assert out.weight_changes >= 1
    phases = ExperimentPhase.objects.filter(experiment=demo.bandit).order_by("number")
    assert phases[0].weights == {k: pytest.approx(1 / 3, abs=1e-4) for k in arms}
    assert [p.reason for p in phases[1:]] == ["bandit"] * out.weight_changes
    assert any(p.weights != phases[0].weights for p in phases[1:])
    for u in out.bandit_updates:
        assert set(u["weights"]) == set(u["probability_best"]) == arms
        assert sum(u["weights"].values()) == pytest.approx(1.0, abs=1e-6)
        assert sum(u["probability_best"].values()) == pytest.approx(1.0, abs=1e-6)
        assert min(u["weights"].values()) >= config.BANDIT_SETTINGS["min_weight_per_arm"] - 1e-4
    last = BanditUpdate.objects.filter(experiment=demo.bandit).order_by("slot").last()
    assert sum(last.units.values()) == sum(r["sessions"].get("bandit", 0) for r in out.rounds)
    # the rollout: the check decided at least once, and the ramp says where it went
    decisions = out.rollout_decisions
    assert decisions and {d["reason"] for d in decisions} <= set(DECISIONS)
    assert out.rollout["history"][0]["reason"] == "started"
    assert out.rollout["percent"] == decisions[-1]["to_percent"]
    if decisions[-1]["reason"] != "rolled_back_guardrail":
        assert out.rollout["percent"] > config.ROLLOUT_STEPS[0]


@pytest.mark.django_db
def test_a_new_demo_run_rolls_back_the_previous_ramp_and_stops_its_experiments(catalogue):
    lines: list[str] = []
    first = setup.create_experiments(lines.append, stamp="1")
    adaptive_start(bandit=first.bandit, rollout=first.rollout)
    second = setup.create_experiments(lines.append, stamp="2")

    first.rollout.refresh_from_db()
    assert (first.rollout.state, first.rollout.percent) == ("rolled_back", 0.0)
    assert first.rollout.history.last().message == "a new demo run replaced it"
    stopped = {first.main.key, first.bandit.key, first.rollout.experiment.key}
    assert {line.rsplit(" ", 1)[1] for line in lines} == stopped
    assert set(Experiment.objects.filter(status="stopped").values_list("key", flat=True)) == stopped
    # the new run: its targeted drafts come first in routing order, the four-arm one runs
    assert second.bandit.pk < second.rollout.experiment.pk < second.main.pk
    assert second.bandit.condition == {"stream": "bandit"}
    assert Experiment.objects.get(pk=second.rollout.experiment.pk).condition == {"stream": "rollout"}
    assert Experiment.objects.get(pk=second.main.pk).status == "running"


@pytest.mark.django_db
def test_a_new_demo_run_stops_the_previous_runs_shadow_tests(catalogue):
    """Three ``make demo`` runs left the first two's ``shadow-demo-<stamp>`` tests running on
    stopped experiments; a left-over one (an older demo stopped its experiment only) stops too."""
    lines: list[str] = []
    first = setup.create_experiments(lines.append, stamp="1")
    for key, experiment, variant in (
        ("shadow-demo-0", first.bandit, "avocado-v14"),
        ("shadow-demo-1", first.main, "control"),
    ):
        test = shadow_test_create(
            key=key, name=key, candidate="avocado-v12", source={"experiment": experiment.key,
            "variant": variant}, sample_percent=50, judge=None, max_usd_per_day=Decimal(1),
            allow_external=False, actor="demo",
        )  # fmt: skip
        shadow_test_start(test=test, actor="demo")
    Experiment.objects.filter(pk=first.bandit.pk).update(status="stopped")  # as an older demo left it
    setup.create_experiments(lines.append, stamp="2")

    status = dict(ShadowTest.objects.values_list("key", "status"))
    assert status == {"shadow-demo-0": "stopped", "shadow-demo-1": "stopped"}
    assert "stopped the previous demo shadow test shadow-demo-0" in lines
    assert "stopped the previous demo shadow test shadow-demo-1" not in lines  # its experiment's stop did it
    reasons = dict(
        AuditEntry.objects.filter(action="shadow_test_stop").values_list("object_id", "changes__reason")
    )
    assert reasons == {
        str(ShadowTest.objects.get(key="shadow-demo-0").pk): None,
        str(ShadowTest.objects.get(key="shadow-demo-1").pk): f"source experiment {first.main.key} stopped",
    }
