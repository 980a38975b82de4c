"""Muse Experiments, the Django project: settings, URLs, WSGI and the Celery app.

``infra/`` is the shared infrastructure, ``api/`` the REST plumbing every app's API uses and
``experiments/`` the experiments app; ``routing`` and ``analytics`` sit beside this package.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
