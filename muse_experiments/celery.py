"""The Celery application. Queues are named in :class:`muse_experiments.infra.queues.Queue`.

Signal handlers carry the web request id to the worker and bind the job id while a task runs
(:mod:`muse_experiments.infra.logs`), and time each task's wait in its queue
(:mod:`muse_experiments.infra.metrics`).
"""

import os
import sys

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun, worker_init
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")

app = Celery("muse_experiments", amqp="muse_experiments.infra.broker:AMQP")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes every database connection before and after each task unless
# CELERY_DB_REUSE_MAX is set, whatever CONN_MAX_AGE says: on SQLite every task
# reconnected (connect, SQL functions, four PRAGMAs). Its count is put out of reach and
# Django's own rule decides instead (close_old_connections: CONN_MAX_AGE, errors, autocommit left
# off), before and after each task as around a web request. PostgreSQL (CONN_MAX_AGE 0) still
# closes (or returns to the pool) after every task.
app.conf.CELERY_DB_REUSE_MAX = sys.maxsize // 4
app.autodiscover_tasks(["routing.worker", "analytics", "routing.shadow"])


@worker_init.connect(weak=False)
def _worker_priority(**kwargs):
    """A worker with ``WORKER_IDLE_PRIORITY`` (the Procfile's ``shadow``) runs at ``SCHED_IDLE``
    (:func:`muse_experiments.infra.runtime.run_at_idle_priority`), before its pool's threads start."""
    from django.conf import settings

    from muse_experiments.infra.runtime import run_at_idle_priority

    if settings.WORKER_IDLE_PRIORITY:
        run_at_idle_priority()


@before_task_publish.connect(weak=False)
def _stamp_headers(headers=None, **kwargs):
    from muse_experiments.infra.logs import inject_request_id
    from muse_experiments.infra.metrics import stamp_published_at

    inject_request_id(headers=headers)
    stamp_published_at(headers=headers)


@task_prerun.connect(weak=False)
def _task_started(task_id=None, task=None, **kwargs):
    from muse_experiments.infra.logs import bind_task_context
    from muse_experiments.infra.metrics import observe_task_start

    _close_old_connections(task)
    bind_task_context(task_id=task_id, task=task)
    observe_task_start(task=task)


@task_postrun.connect(weak=False)
def _task_finished(task=None, **kwargs):
    from muse_experiments.infra.logs import clear_task_context

    clear_task_context()
    _close_old_connections(task)


def _close_old_connections(task) -> None:
    """Django's end-of-request rule for this thread's connections, in a worker (an eager task
    runs inside its caller's request or transaction, whose connection is not ours to close)."""
    if not getattr(getattr(task, "request", None), "is_eager", False):
        close_old_connections()
