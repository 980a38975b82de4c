"""Pure assignment engine (GrowthBook-compatible hashing, targeting and bucketing).

Imports only the standard library and numpy -- never Django -- so it is safe to use from the
routing proxy, Celery workers and offline analysis.

* :mod:`.specs` -- the configuration evaluated (experiments, variants, layers, holdout) and the
  :class:`~.specs.Decision` returned, with its reason codes;
* :mod:`.engine` -- one unit's decisions: :func:`~.engine.route`, :func:`~.engine.assign`,
  :func:`~.engine.bucket`;
* :mod:`.vectorised` -- :func:`~.vectorised.assign_many`, the hash-only assignment of many ids;
* :mod:`.growthbook` -- the GrowthBook SDK primitives they are built on.
"""
