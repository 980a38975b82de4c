"""What runs only in the Celery worker and the drainer process, around the pipeline:

* :mod:`~routing.worker.tasks` — the Celery tasks (``routing.run_completion``, maintenance);
* :mod:`~routing.worker.leases` — the lease keeper thread and the worker's heartbeat;
* :mod:`~routing.worker.reaper` — jobs and attempts lost with a dead worker, tasks lost in the broker;
* :mod:`~routing.worker.drainer` — writing the buffered call records to the database.

The web side and the APIs never import this package (import-linter holds it): they publish
``routing.run_completion`` by name (:mod:`routing.web.dispatch`).
"""
