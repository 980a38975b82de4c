"""A job's state between processes, in Redis: what the web side and the worker both read and write.

* :mod:`~routing.state.claims` — the intent record of a job (published, claimed, done, lost),
  worker heartbeats, attempt notes;
* :mod:`~routing.state.handoff` — a finished job's final state, handed to the waiting request;
* :mod:`~routing.state.events` — a job's event log (streamed calls) and its cancel flag.

The lowest layer of routing besides the models: it imports nothing else of routing's.
"""
