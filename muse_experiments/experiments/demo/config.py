"""The demo's simulated world (its ground truth) and the shapes of its experiments.

Each session served by a model succeeds with that model's :data:`TRUE_SUCCESS` probability (the
demo draws the outcome, seeded by the session id, and posts it as a ``task_success`` event), so
every printed rate and lift can be checked against these numbers. :data:`LATENCY_MS` is what the
simulated upstreams sleep before answering. Models not listed succeed at
:data:`DEFAULT_SUCCESS` and answer after :data:`DEFAULT_LATENCY_MS`.

Traffic is split into *streams* by the request attribute ``stream``: the four-arm experiment takes
the main stream (every session without another stream), the bandit and the rollout each target
their own (``condition`` on the attribute), so the three run side by side without sharing units.
"""

from __future__ import annotations

from routing.catalogue import avocado_id

#: Probability that a session served by each upstream model succeeds (the simulation's truth).
TRUE_SUCCESS = {
    "avocado-v13": 0.50,
    "avocado-v14": 0.60,
    "avocado-v15": 0.64,
    "muse-special": 0.68,
    "claude-sonnet-5-5": 0.66,
}
DEFAULT_SUCCESS = 0.5
#: Simulated upstream latency per model (ms).
LATENCY_MS = {"avocado-v14": 20, "avocado-v15": 25, "muse-special": 60, "claude-sonnet-5-5": 45}
DEFAULT_LATENCY_MS = 20
#: Models whose simulated answers carry reasoning.
REASONING_MODELS = ("muse-special", "claude-sonnet-5-5")
#: Every model the simulated upstreams serve.
SIMULATED_MODELS = [f"avocado-v{i}" for i in range(1, 16)] + [
    "muse-special",
    "claude-sonnet-5-5",
    "claude-haiku-5-5",
]

#: The four-arm experiment: (variant key, endpoint public id, weight, control?).
ARMS = [
    ("control", avocado_id(14), 0.4, True),
    ("avocado-v15", avocado_id(15), 0.2, False),
    ("azure-muse-special", "azure/muse-special", 0.2, False),
    ("claude-sonnet", "anthropic/claude-sonnet-5-5", 0.2, False),
]
SUBAGENTS = ("coder", "researcher", "planner")
TOOLS = [
    {
        "name": "search_docs",
        "description": "Search the documentation.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }
]

# --- the adaptive part (.adaptive) ---------------------------------------------------------------
BANDIT_STREAM, ROLLOUT_STREAM = "bandit", "rollout"
#: The bandit's arms: (variant key, endpoint public id, control?); equal weights at the start.
BANDIT_ARMS = [
    ("avocado-v14", avocado_id(14), True),
    ("avocado-v13", avocado_id(13), False),
    ("avocado-v15", avocado_id(15), False),
]
#: The bandit's settings: an update every schedule minute, no exploration time (the first round
#: runs on the equal start weights), a 5 % floor per arm, a winner at P(best) >= 0.95.
BANDIT_SETTINGS = {
    "update_every_minutes": 1,
    "explore_minutes": 0,
    "min_weight_per_arm": 0.05,
    "stop_when_probability_best": 0.95,
}
#: The rollout: the candidate replaces the current model. Both answer after the same simulated
#: latency and cost the same, and the candidate succeeds more often, so no guardrail should fire
#: (a false rollback stays below alpha over the whole ramp: analytics.rollout_policy).
ROLLOUT_CANDIDATE, ROLLOUT_CURRENT = avocado_id(14), avocado_id(13)
ROLLOUT_STEPS = [20, 50, 100]
ROLLOUT_STEP_MIN_UNITS = 20  # candidate units a step needs before it can advance
ROLLOUT_GUARDRAILS = ["error_rate", "latency_p95_ms", "cost_usd", "task_success"]

#: Seconds in a bandit schedule minute and between beat's bandit and rollout checks, for the
#: platform the demo starts (settings BANDIT_MINUTE_S, BANDIT_CHECK_INTERVAL_S,
#: ROLLOUT_CHECK_INTERVAL_S; production: 60, 60 and 300).
SCHEDULE_S = 4.0
#: Rounds of adaptive traffic and sessions per round in each stream.
ROUNDS = 4
BANDIT_SESSIONS_PER_ROUND = 120
ROLLOUT_SESSIONS_PER_ROUND = 80
#: Longest wait for the schedule after a round (the demo goes on, and says so, past it).
ROUND_WAIT_S = 60.0
