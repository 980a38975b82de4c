"""Guards an upstream call passes first, each with its own shared state (Redis, in process):

* :mod:`~routing.guards.killswitch` — operators' kill switches (experiment, variant, endpoint,
  provider, all external);
* :mod:`~routing.guards.circuit` — one circuit breaker per endpoint;
* :mod:`~routing.guards.concurrency` — ``max_concurrency`` slots per endpoint;
* :mod:`~routing.guards.cooling` — an endpoint cooling after a long ``retry-after``;
* :mod:`~routing.guards.credentials` — provider credentials bound to their hosts;
* :mod:`~routing.guards.roundtrip` — the one Redis round trip the guards share.

They run in the worker (:mod:`routing.pipeline.attempts`) and are read by the APIs and the
dashboards; they import nothing of the pipeline, the web side or the worker.
"""
