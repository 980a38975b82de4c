"""WSGI entry point (gunicorn ``muse_experiments.wsgi``): Django's application, every request
through ``MIDDLEWARE``, then the process's garbage-collector tuning
(:func:`muse_experiments.infra.runtime.tune_gc`)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")

application = get_wsgi_application()

from muse_experiments.infra.runtime import tune_gc  # noqa: E402 - needs the settings configured above

tune_gc()
