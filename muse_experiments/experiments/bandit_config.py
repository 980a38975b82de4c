"""The settings of a bandit experiment (``Experiment.bandit``): their defaults, checks and schedule.

``{"metric": "<primary metric>", "update_every_minutes": n, "explore_minutes": n,
"min_weight_per_arm": 0.01–0.2, "stop_when_probability_best": 0.95, "max_cost_usd_per_call": null}``:

* ``metric`` -- the metric the bandit optimises; it is the experiment's primary metric, a
  proportion or a mean metric (a ratio or a quantile has no value per unit to draw from: the
  service refuses it, ``services.rules.bandit_metric_problem``);
* ``update_every_minutes`` -- 1 to 10,080 (a week): how often weights are recomputed;
* ``explore_minutes`` -- 0 to 43,200 (30 days) of equal weights after the first start;
* ``min_weight_per_arm`` -- the floor of every arm's weight, 0.01 to 0.2 (times the number of
  arms at most 1);
* ``stop_when_probability_best`` -- 0.5 < p ≤ 0.9999: when an arm's probability of being the
  best reaches it, the arm is declared the winner: from then it gets all new units but the other
  arms' floors, the experiment keeps running and the weights stop changing;
* ``max_cost_usd_per_call`` -- null (no cap) or a cap in USD per call, above 0 and at most
  ``MAX_COST_CAP``: an arm whose mean cost per call is credibly above it (posterior
  P(cost > cap) > 0.95) gets only the floor and cannot win.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

DEFAULTS: Mapping[str, Any] = {
    "update_every_minutes": 60,
    "explore_minutes": 60,
    "min_weight_per_arm": 0.01,
    "stop_when_probability_best": 0.95,
    "max_cost_usd_per_call": None,
}
FIELDS = ("metric", *DEFAULTS)
MIN_FLOOR, MAX_FLOOR = 0.01, 0.2
#: The largest accepted cost cap, USD per call.
MAX_COST_CAP = 100.0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def bandit_config_clean(raw: Any, *, primary_metric: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The settings with defaults filled in (``metric`` defaults to ``primary_metric``), and the
    field errors: ``({...}, {"bandit": ["min_weight_per_arm: must be between 0.01 and 0.2.", …]})``.
    Unknown keys are errors. Never raises."""
    errors: list[str] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return {}, {"bandit": ["Bandit settings must be an object."]}
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        errors.append(f"Unknown setting(s): {', '.join(map(str, unknown))}. Known: {', '.join(FIELDS)}.")
    config = {"metric": primary_metric, **DEFAULTS, **{k: v for k, v in raw.items() if k in FIELDS}}
    if not isinstance(config["metric"], str) or not config["metric"]:
        errors.append("metric: give the name of the primary metric.")
    elif config["metric"] != primary_metric:
        errors.append(
            f"metric: the bandit optimises the primary metric ({primary_metric!r}), not {config['metric']!r}; "
            "make it the primary metric."
        )
    every = config["update_every_minutes"]
    if not _is_int(every) or not 1 <= every <= 10_080:
        errors.append("update_every_minutes: must be a whole number of minutes from 1 to 10080.")
    explore = config["explore_minutes"]
    if not _is_int(explore) or not 0 <= explore <= 43_200:
        errors.append("explore_minutes: must be a whole number of minutes from 0 to 43200.")
    floor = config["min_weight_per_arm"]
    if not _is_number(floor) or not MIN_FLOOR <= floor <= MAX_FLOOR:
        errors.append(f"min_weight_per_arm: must be a number between {MIN_FLOOR} and {MAX_FLOOR}.")
    stop = config["stop_when_probability_best"]
    if not _is_number(stop) or not 0.5 < stop <= 0.9999:
        errors.append("stop_when_probability_best: must be a number above 0.5 and at most 0.9999.")
    cap = config["max_cost_usd_per_call"]
    if cap is not None and (not _is_number(cap) or not 0 < cap <= MAX_COST_CAP):
        errors.append(
            f"max_cost_usd_per_call: must be null (no cap) or a number of USD per call above 0 "
            f"and at most {MAX_COST_CAP:g}."
        )
    elif cap is not None:
        config["max_cost_usd_per_call"] = float(cap)
    if _is_number(floor):
        config["min_weight_per_arm"] = float(floor)
    if _is_number(stop):
        config["stop_when_probability_best"] = float(stop)
    return config, ({"bandit": errors} if errors else {})


def floor_errors(config: Mapping[str, Any], arms: int) -> list[str]:
    """``min_weight_per_arm × arms`` must be at most 1 (else the floors alone exceed 100 %)."""
    floor = config.get("min_weight_per_arm", DEFAULTS["min_weight_per_arm"])
    if _is_number(floor) and floor * arms > 1.0 + 1e-9:
        return [
            f"min_weight_per_arm: {floor} × {arms} arms exceeds 100 %; lower it to at most {1 / arms:.3g}."
        ]
    return []


def equal_weights(keys: list[str]) -> dict[str, float]:
    """Equal weights on the hash's 1e-4 grid, summing to exactly 1 (the first arms get the rest)."""
    k = len(keys)
    base = 10_000 // k
    extra = 10_000 - base * k
    return {key: (base + (1 if i < extra else 0)) / 10_000 for i, key in enumerate(keys)}


def update_slot(*, started_at: datetime, now: datetime, every_minutes: int, minute_s: float = 60.0) -> int:
    """The update interval ``now`` falls in: ``floor(minutes since start / every_minutes)`` (>= 0),
    a minute lasting ``minute_s`` seconds (60; the ``BANDIT_MINUTE_S`` setting shortens it)."""
    elapsed = max((now - started_at).total_seconds(), 0.0)
    return int(elapsed // (every_minutes * minute_s))


def is_exploring(
    *, started_at: datetime, now: datetime, explore_minutes: int, minute_s: float = 60.0
) -> bool:
    """True while the exploration time after the first start lasts (minutes of ``minute_s`` s)."""
    return (now - started_at).total_seconds() < explore_minutes * minute_s
