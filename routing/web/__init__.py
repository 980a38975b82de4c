"""The web side of dispatch, in the web process:

* :mod:`~routing.web.dispatch` — submit a job, publish its task (by name), wait for its final state;
* :mod:`~routing.web.relay` — relay a streamed job's events as Server-Sent Events, and ask the
  worker to stop when the caller goes away.

It never imports :mod:`routing.worker` (import-linter holds it): what it shares with the worker is
below it (:mod:`routing.jobs`, :mod:`routing.state`, :mod:`routing.messages`).
"""
