"""The Celery application. Queues are named in :class:`muse_experiments.queues.Queue`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")

app = Celery("muse_experiments")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["routing", "analytics", "muse_experiments"])
