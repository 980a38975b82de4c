"""Shared infrastructure of the Django project, with no knowledge of any app.

Redis (the one client factory, the private server, the Celery broker transport and task publish),
calls deferred to the end of a block, the cluster-wide
configuration version, logs, metrics, health probes, process tuning, the SQLite engine, the gunicorn
configuration and worker, the production-shape supervisor, the admin's read-only base class, and
small storage and export helpers.
Nothing here imports ``muse_experiments.api``, ``muse_experiments.experiments``, ``routing`` or
``analytics`` (``.importlinter``).
"""
