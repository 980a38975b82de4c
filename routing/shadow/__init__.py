"""Shadow tests: a candidate model answers a sample of live sessions' calls beside the model that
served them, off the caller's path, and the two are compared (issue 33).

The steps, one module each:

* :mod:`.sampling` -- which running tests shadow a finished call (the session hashed with the
  test's key) and the hand-off to the ``shadow`` queue, with a bounded backlog (a listener of
  :mod:`routing.pipeline.recorded`, registered by :mod:`routing.apps`: the records drainer offers
  each call once its records are written);
* :mod:`.budget` -- each test's daily spend in Redis: a call is admitted only while the spend
  stays within one call's cost of ``max_usd_per_day`` (judge calls included);
* :mod:`.judge` -- the pairwise judge prompt and its strict verdict parser;
* :mod:`.run` -- one shadow call (and its judge call) for one primary call, recorded as a
  :class:`~muse_experiments.experiments.models.ShadowPair`;
* :mod:`.tasks` -- the Celery task on the ``shadow`` queue (its worker at ``SCHED_IDLE``:
  ``WORKER_IDLE_PRIORITY``; each call waits for idle CPU: ``SHADOW_MIN_IDLE_CPU``);
* :mod:`.apis` / :mod:`.results` -- the REST API and the comparison it reports.
"""
