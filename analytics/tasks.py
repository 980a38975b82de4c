"""Analytics Celery tasks: thin wrappers over :mod:`analytics.services`."""

from celery import shared_task

from muse_experiments.models import Experiment
from muse_experiments.queues import Queue

from .services import results_compute


@shared_task(name="analytics.compute_results", queue=Queue.ANALYTICS, soft_time_limit=300, time_limit=360)
def compute_results(experiment_id: int, phase: int | None = None) -> int | None:
    """Compute and store a results snapshot. Returns the snapshot id (None if the experiment is gone)."""
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None or not experiment.phase:
        return None
    return results_compute(experiment=experiment, phase=phase).pk
