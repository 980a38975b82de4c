"""Muse Experiments: the Django project and the experiments app."""

from .celery import app as celery_app

__all__ = ["celery_app"]
