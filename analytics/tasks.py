"""Analytics Celery tasks: thin wrappers over :mod:`analytics.services`."""

from __future__ import annotations

import uuid

from celery import shared_task

from muse_experiments.experiments.models import Experiment
from muse_experiments.infra.queues import Queue

from .bandits import bandit_update, running_bandit_ids
from .handoff import results_publish
from .models import ResultSnapshot, SnapshotTrigger
from .rollups import call_rollup_refresh
from .services import results_compute, running_experiment_ids


@shared_task(
    name="analytics.compute_results",
    queue=Queue.ANALYTICS,
    soft_time_limit=300,
    time_limit=360,
    ignore_result=True,  # waiters read the hand-off (analytics.handoff), never the result backend
)
def compute_results(
    experiment_id: int,
    phase: int | None = None,
    trigger: str = SnapshotTrigger.MANUAL,
    request_id: str | None = None,
) -> int | None:
    """Compute and store a results snapshot; returns its id (None if the experiment is gone or never
    started). Safe to run twice: a request id already answered returns the existing snapshot.
    With a ``request_id``, the request waiting for it is woken (:func:`analytics.handoff.results_publish`)."""
    if request_id:
        done = ResultSnapshot.objects.filter(request_id=request_id).values_list("pk", flat=True).first()
        if done:
            results_publish(request_id=request_id, snapshot_id=done)
            return done
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None or not experiment.phase:
        if request_id:
            results_publish(request_id=request_id, snapshot_id=None)
        return None
    snapshot = results_compute(
        experiment=experiment,
        phase=phase,
        trigger=trigger,
        request_id=uuid.UUID(request_id) if request_id else None,
    )
    if request_id:
        results_publish(request_id=request_id, snapshot_id=snapshot.pk)
    refresh_call_rollup.delay()  # the dashboards' time series, fresh with the snapshot (own task)
    return snapshot.pk


@shared_task(name="analytics.refresh_call_rollup", queue=Queue.ANALYTICS, soft_time_limit=600, time_limit=660)
def refresh_call_rollup() -> int:
    """Bring the hourly call rollup up to date, the hours of rows written late included (a call
    record drained or an exposure recorded after its hour was rolled up:
    :func:`analytics.rollups.call_rollup_refresh` finds them by id); idempotent when run twice or
    late. Returns the rows written."""
    return call_rollup_refresh()


@shared_task(
    name="analytics.compute_running_results", queue=Queue.ANALYTICS, soft_time_limit=60, time_limit=90
)
def compute_running_results() -> int:
    """Fan out: enqueue :func:`compute_results` for every running experiment. Returns how many."""
    refresh_call_rollup.delay()  # routing health reads it even when no experiment runs
    ids = running_experiment_ids()
    for experiment_id in ids:
        compute_results.delay(experiment_id, None, SnapshotTrigger.SCHEDULE)
    return len(ids)


@shared_task(name="analytics.check_rollout", queue=Queue.ANALYTICS, soft_time_limit=120, time_limit=150)
def check_rollout(rollout_id: int) -> str | None:
    """Check one rollout (roll back, advance or hold); returns the action. Safe to run twice or
    late: the check locks the rollout and reads every datum of the step so far."""
    from .rollouts import rollout_check

    decision = rollout_check(rollout_id=rollout_id)
    return decision.action if decision else None


@shared_task(name="analytics.check_rollouts", queue=Queue.ANALYTICS, soft_time_limit=60, time_limit=90)
def check_rollouts() -> int:
    """Fan out (Celery beat, every ``ROLLOUT_CHECK_INTERVAL_S``): one :func:`check_rollout` per
    running or paused rollout. Returns how many."""
    from .rollouts import rollouts_to_check

    ids = rollouts_to_check()
    for rollout_id in ids:
        check_rollout.delay(rollout_id)
    return len(ids)


@shared_task(name="analytics.bandit_update", queue=Queue.ANALYTICS, soft_time_limit=120, time_limit=150)
def update_bandit(experiment_id: int) -> int | None:
    """Run the due update of one bandit (:func:`analytics.bandits.bandit_update`); returns the
    update's id, or None when none was due. Safe to run twice: one update per slot."""
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        return None
    update = bandit_update(experiment=experiment)
    return update.pk if update else None


@shared_task(name="analytics.bandit_updates", queue=Queue.ANALYTICS, soft_time_limit=60, time_limit=90)
def update_bandits() -> int:
    """Fan out (beat, every minute): enqueue :func:`update_bandit` for every running bandit;
    each decides itself whether its slot is due. Returns how many were enqueued."""
    ids = running_bandit_ids()
    for experiment_id in ids:
        update_bandit.delay(experiment_id)
    return len(ids)
