"""``manage.py demo``, one module per concern; the command (``management/commands/demo.py``) only
orchestrates them:

* :mod:`.config` -- the simulation's truth: success rate and latency per model, the arms of every
  demo experiment, the adaptive part's schedule;
* :mod:`.platform` -- the processes (simulated upstreams, web, workers, drainer, beat);
* :mod:`.setup` -- catalogue, API keys, the admin user and the demo's experiments;
* :mod:`.traffic` -- sessions through the completions API and their outcome events;
* :mod:`.adaptive` -- the bandit and the progressive rollout, run in rounds on a short schedule;
* :mod:`.shadow` -- the shadow test;
* :mod:`.report` -- the printed tables.
"""
