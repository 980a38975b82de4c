"""Bandit experiments: the scheduled Thompson-sampling update and the bandit results.

A *period* is a phase of the current seed run (a bandit update that changes the weights opens
one). A unit belongs to the period of its first exposure (its exposure there is not ``sticky``)
with all its outcomes since, calls of later phases included (``queries.aggregate`` with
``first_exposures_only`` and ``calls_through_phase``): within a period units were hashed with the
period's fixed weights, so each period is a randomised comparison, and the lift is the
period-stratified one of :func:`analytics.stats.bandit.stratified_lift` (GrowthBook weights
periods the same way). The SRM check compares each period's new units with its weights.

When an arm's P(best) reaches ``stop_when_probability_best`` it is declared the winner: a new
period gives it all but the other arms' floors (:func:`analytics.stats.bandit.winner_weights`),
the experiment keeps running and the updates stop. With ``max_cost_usd_per_call`` set, an arm
whose cost per call (``Σ cost_usd / Σ calls`` of its units) is credibly above the cap
(:func:`analytics.stats.bandit.cost_over_cap`) gets the floor only and cannot win.

One SQL statement per period: an update of an experiment with P periods runs P statements.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.utils import timezone

from muse_experiments.experiments.bandit_config import is_exploring
from muse_experiments.experiments.models import BanditUpdate, Experiment, ExperimentPhase, ExperimentType
from muse_experiments.experiments.selectors import sticky_scope
from muse_experiments.experiments.services.bandit import bandit_slot_due, bandit_update_record

from .analysis import MetricSpec, statistic_for
from .builtin_metrics import BUILTIN_METRICS, seed_builtin_metrics
from .models import MetricDefinition
from .queries import aggregate
from .selectors import MetricPlan, analysis_settings_for, metric_plan
from .stats import MeanStatistic, ProportionStatistic, json_safe
from .stats.bandit import (
    CostCheck,
    bandit_decide,
    cost_over_cap,
    period_srm,
    rounded_weights,
    stratified_lift,
    weights_moved,
    winner_weights,
)
from .stats.statistics import CovariateStatistic, RatioStatistic

log = logging.getLogger(__name__)


class BanditDataError(ValueError):
    """The primary metric cannot drive a bandit (undefined, a ratio or a quantile)."""


#: The metric types a bandit can optimise: its Thompson draws need one value per unit, a yes/no
#: (Beta posterior) or a number (normal posterior). A ratio or a quantile has no per-unit value.
BANDIT_METRIC_TYPES = ("proportion", "mean")


def bandit_metric_refusal(name: str, metric_type: str) -> str | None:
    """Why a bandit cannot optimise metric ``name`` of type ``metric_type``, else None."""
    if metric_type in BANDIT_METRIC_TYPES:
        return None
    return (
        f"metric: {name!r} is a {metric_type} metric; a bandit can optimise only a proportion "
        "(yes/no per unit, e.g. task_success) or a mean metric (e.g. latency_ms, cost_usd): "
        "make one of those the primary metric."
    )


def bandit_metric_problem(name: str) -> str | None:
    """Why a bandit cannot optimise the metric named ``name`` (a ratio or a quantile metric), else
    None; None too for a name that is no metric (the experiments app reports unknown names
    itself). The experiments app checks a bandit's metric with it, at creation and at every edit
    (``settings.BANDIT_METRIC_CHECK``). Reads only: writes nothing."""
    metric_type = MetricDefinition.objects.filter(name=name).values_list("metric_type", flat=True).first()
    if metric_type is None:
        metric_type = next((m["metric_type"] for m in BUILTIN_METRICS if m["name"] == name), None)
    return None if metric_type is None else bandit_metric_refusal(name, metric_type)


@dataclass(frozen=True)
class Period:
    """One period: its phase, weights in force and per-arm statistics of its new units."""

    phase: int
    started_at: datetime
    ended_at: datetime | None
    weights: dict[str, float]
    stats: dict[str, ProportionStatistic | MeanStatistic]
    cost: dict[str, RatioStatistic]  # per arm, only with a cost cap (else empty)

    @property
    def units(self) -> int:
        return sum(s.n for s in self.stats.values())


def _arm_statistic(metric: MetricSpec, stats) -> ProportionStatistic | MeanStatistic:
    stat = statistic_for(metric, stats)
    if isinstance(stat, CovariateStatistic):  # the bandit uses the unadjusted outcome
        stat = stat.y
    if metric.metric_type == "proportion" and isinstance(stat, MeanStatistic):
        stat = ProportionStatistic(n=stat.n, sum=min(max(stat.sum, 0.0), stat.n))
    return stat


#: The built-in per-unit sums whose ratio is the cost per call.
COST_METRICS = ("cost_usd", "calls")


def _primary_metric(experiment: Experiment):
    """The primary metric's spec and its plan; with a cost cap the plan also sums each unit's
    cost and calls (with their cross product, for the cost per call's delta-method variance)."""
    seed_builtin_metrics(MetricDefinition)
    name = experiment.bandit.get("metric") or experiment.primary_metric
    capped = experiment.bandit.get("max_cost_usd_per_call") is not None
    plan = metric_plan(names=[(name, "primary"), *((m, "cost") for m in COST_METRICS if capped)])
    spec = plan.specs[0]
    if spec.undefined:
        raise BanditDataError(f"no metric named {name!r}: define it in the admin")
    refusal = bandit_metric_refusal(name, spec.metric_type)
    if refusal:  # stored before such metrics were refused, or the definition's type changed since
        raise BanditDataError(refusal)
    if capped:
        pair = (plan.specs[1].keys[0], plan.specs[2].keys[0])
        plan = MetricPlan(plan.specs, plan.components, [*plan.cross_products, pair])
    return spec, plan


def _cost_statistic(plan: MetricPlan, stats) -> RatioStatistic:
    cost, calls = plan.specs[1].keys[0], plan.specs[2].keys[0]
    n = stats.units if stats else 0
    num = stats.components.get(cost) if stats else None
    den = stats.components.get(calls) if stats else None
    return RatioStatistic(
        n=n,
        m=MeanStatistic(n, num.sum if num else 0.0, num.sum_squares if num else 0.0),
        d=MeanStatistic(n, den.sum if den else 0.0, den.sum_squares if den else 0.0),
        sum_of_products=stats.cross.get((cost, calls), 0.0) if stats else 0.0,
    )


def bandit_periods(*, experiment: Experiment) -> list[Period]:
    """The periods of the current seed run, oldest first, with each arm's primary-metric
    statistic over the units first exposed in the period (intent-to-treat; QA-forced units out).

    Raises:
        BanditDataError: the primary metric is undefined, a ratio or a quantile.
    """
    spec, plan = _primary_metric(experiment)
    settings = analysis_settings_for(experiment=experiment)
    variants = list(experiment.variants.select_related("endpoint").order_by("position", "id"))
    first, current = sticky_scope(experiment)
    phases = ExperimentPhase.objects.filter(experiment=experiment, number__gte=first, number__lte=current)
    out = []
    for phase in phases.order_by("number"):
        aggregates = aggregate(
            experiment_id=experiment.id,
            phase=phase.number,
            unit_type=experiment.unit_type,
            variant_endpoints={v.key: v.endpoint.public_id for v in variants},
            components=plan.components,
            cross_products=plan.cross_products,
            include_multiple=settings.include_multiple_exposures,
            first_exposures_only=True,
            calls_through_phase=current,
        )
        population = aggregates.population(
            include_multiple=settings.include_multiple_exposures, served_only=False
        )
        out.append(
            Period(
                phase=phase.number,
                started_at=phase.started_at,
                ended_at=phase.ended_at,
                weights={v.key: float(phase.weights.get(v.key, 0.0)) for v in variants},
                stats={v.key: _arm_statistic(spec, population.get(v.key)) for v in variants},
                cost={v.key: _cost_statistic(plan, population.get(v.key)) for v in variants}
                if len(plan.specs) > 1
                else {},
            )
        )
    return out


def _pooled(periods: list[Period], key: str, proportion: bool):
    n = sum(p.stats[key].n for p in periods)
    total = sum(p.stats[key].sum for p in periods)
    if proportion:
        return ProportionStatistic(n=n, sum=total)
    squares = sum(p.stats[key].sum_squares for p in periods)  # type: ignore[union-attr]
    return MeanStatistic(n, total, squares)


def _pooled_cost(periods: list[Period], key: str) -> RatioStatistic:
    """An arm's cost per call over all its units (every period)."""
    parts = [p.cost[key] for p in periods]
    n = sum(c.n for c in parts)
    return RatioStatistic(
        n=n,
        m=MeanStatistic(n, sum(c.m.sum for c in parts), sum(c.m.sum_squares for c in parts)),
        d=MeanStatistic(n, sum(c.d.sum for c in parts), sum(c.d.sum_squares for c in parts)),
        sum_of_products=sum(c.sum_of_products for c in parts),
    )


def cost_checks(*, periods: list[Period], cap: float | None) -> dict[str, CostCheck]:
    """Each arm's cost per call against ``cap`` (USD; None: no cap, no check): ``{arm: CostCheck}``."""
    if cap is None or not periods or not periods[-1].cost:
        return {}
    return {key: cost_over_cap(_pooled_cost(periods, key), cap) for key in periods[-1].weights}


def _cost_audit(checks: dict[str, CostCheck], cap: float) -> dict[str, Any]:
    return {
        "cap_usd_per_call": cap,
        "arms": {
            k: {
                "cost_per_call": c.cost_per_call,
                "probability_over": c.probability_over,
                "over_cap": c.over_cap,
            }
            for k, c in checks.items()
        },
    }


def bandit_update(*, experiment: Experiment, now: datetime | None = None) -> BanditUpdate | None:
    """The scheduled update of one bandit: when its current slot has no update yet, P(best) of
    every arm from all its units so far, the new weights (equal while exploring, Thompson weights
    with the floor after; arms credibly over ``max_cost_usd_per_call`` at the floor) and the
    winner once P(best) reaches the threshold, which gets
    :func:`~analytics.stats.bandit.winner_weights`. Weights that move no arm by more than
    :data:`~analytics.stats.bandit.WEIGHT_CHANGE_TOLERANCE` are not applied: the update is recorded
    (P(best), units) with the weights in force, decision ``unchanged``, and no phase opens. Written through
    :func:`muse_experiments.experiments.services.bandit.bandit_update_record`.

    Safe to run twice or late: one update per slot (a late run makes the update of the slot it
    runs in; missed slots are not replayed, the data since is all used). The Monte Carlo seed is
    ``experiment id × 100003 + slot``, so a re-run decides the same. Returns the update, or None
    when nothing was due (a winner was declared, or the slot is done) or the metric cannot drive
    a bandit (logged).
    """
    now = now or timezone.now()
    slot = bandit_slot_due(experiment=experiment, now=now)
    if slot is None:
        return None
    config = experiment.bandit
    try:
        spec, _ = _primary_metric(experiment)
        periods = bandit_periods(experiment=experiment)
    except BanditDataError as exc:
        log.warning("bandit %s: no update: %s", experiment.key, exc)
        return None
    keys = list(periods[-1].weights) if periods else [v.key for v in experiment.variants.all()]
    proportion = spec.metric_type == "proportion"
    arms = [_pooled(periods, k, proportion) for k in keys]
    exploring = is_exploring(
        started_at=experiment.started_at,
        now=now,
        explore_minutes=config["explore_minutes"],
        minute_s=django_settings.BANDIT_MINUTE_S,
    )
    cap = config.get("max_cost_usd_per_call")
    checks = cost_checks(periods=periods, cap=cap)
    floor = config["min_weight_per_arm"]
    decision = bandit_decide(
        arms,
        exploring=exploring,
        min_weight=floor,
        stop_when_probability_best=config["stop_when_probability_best"],
        seed=experiment.id * 100_003 + slot,
        higher_is_better=spec.higher_is_better,
        over_cap=[checks[k].over_cap for k in keys] if checks else None,
    )
    raw = decision.weights
    if decision.winner is not None:
        raw = winner_weights(len(keys), decision.winner, min_weight=floor)
    weights = dict(zip(keys, rounded_weights(raw), strict=True))
    p_best = dict(zip(keys, decision.probability_best, strict=True))
    winner = keys[decision.winner] if decision.winner is not None else ""
    current = periods[-1].weights if periods else {}
    noise = (
        not winner
        and set(current) == set(keys)
        and not weights_moved([current[k] for k in keys], [weights[k] for k in keys])
    )
    if noise:  # Monte Carlo noise, not news: the phase and its weights stay
        weights = dict(current)
    label = (
        "winner" if winner else "explore" if exploring else "update" if weights != current else "unchanged"
    )
    parts = []
    if winner:
        parts.append(
            f"{winner} is the best arm with probability {p_best[winner]:.3f} ≥ "
            f"{config['stop_when_probability_best']}: declared the winner; it now gets "
            f"{weights[winner]:.2%} of new units, the others their floor of {floor:.0%}; updates stop."
        )
    held = [k for k in keys if not exploring and checks and checks[k].over_cap]
    if held:
        parts.append(f"Over the cost cap of ${cap:g}/call, held at the floor: {', '.join(held)}.")
    return bandit_update_record(
        experiment=experiment,
        slot=slot,
        now=now,
        decision=label,
        weights=weights,
        probability_best=p_best,
        units={k: a.n for k, a in zip(keys, arms, strict=True)},
        winner=winner,
        message=" ".join(parts),
        cost=_cost_audit(checks, cap) if checks else None,
    )


def running_bandit_ids() -> list[int]:
    """Ids of running bandit experiments (what the schedule visits)."""
    return list(
        Experiment.objects.filter(type=ExperimentType.BANDIT, status="running")
        .order_by("id")
        .values_list("id", flat=True)
    )


def bandit_results(*, experiment: Experiment, alpha: float | None = None) -> dict[str, Any]:
    """What the bandit results page shows: ``{"metric", "periods": [{phase, started_at, ended_at,
    weights, units: {arm: n}, means: {arm: mean}, srm}], "updates": [{slot, at, decision, phase,
    weights, probability_best, units, winner}], "lifts": [{variant, control_mean, treatment_mean,
    absolute_lift, absolute_ci, relative_lift, relative_ci, p_value, periods_used, units}],
    "winner", "winner_update": {slot, at, phase, weights, probability_best, message} or None,
    "cost": None or {"cap_usd_per_call", "arms": {arm: {cost_per_call, probability_over,
    over_cap}}}, "status", "reason"}`` (JSON-safe). ``winner_update`` is the update that declared
    the winner (from its phase on the winner gets all but the floors); ``cost`` is the cost cap
    checked on all units so far. ``status`` is ``ok``, or ``unsupported_metric`` with a
    ``reason``; ``alpha`` defaults to the experiment's analysis settings.
    """
    alpha = alpha if alpha is not None else analysis_settings_for(experiment=experiment).alpha
    updates = [
        {
            "slot": u.slot,
            "at": u.at.isoformat(),
            "decision": u.decision,
            "phase": u.phase,
            "weights": u.weights,
            "probability_best": u.probability_best,
            "units": u.units,
            "winner": u.winner,
            "message": u.message,
        }
        for u in BanditUpdate.objects.filter(experiment=experiment).order_by("slot")
    ]
    declared = next((u for u in reversed(updates) if u["winner"]), None)
    out: dict[str, Any] = {
        "metric": experiment.bandit.get("metric", experiment.primary_metric),
        "updates": updates,
        "winner": declared["winner"] if declared else "",
        "winner_update": declared,
        "cost": None,
        "periods": [],
        "lifts": [],
        "status": "ok",
        "reason": None,
        "alpha": alpha,
    }
    try:
        periods = bandit_periods(experiment=experiment)
    except BanditDataError as exc:
        out.update(status="unsupported_metric", reason=str(exc))
        return json_safe(out)
    keys = list(periods[0].weights) if periods else []
    cap = experiment.bandit.get("max_cost_usd_per_call")
    checks = cost_checks(periods=periods, cap=cap)
    if checks:
        out["cost"] = _cost_audit(checks, cap)
    srms = period_srm(
        [[p.stats[k].n for k in keys] for p in periods], [[p.weights[k] for k in keys] for p in periods]
    )
    for p, srm in zip(periods, srms, strict=True):
        out["periods"].append(
            {
                "phase": p.phase,
                "started_at": p.started_at.isoformat(),
                "ended_at": p.ended_at.isoformat() if p.ended_at else None,
                "weights": p.weights,
                "units": {k: p.stats[k].n for k in keys},
                "means": {k: (p.stats[k].mean if p.stats[k].n else None) for k in keys},
                "srm": srm.to_dict() if any(p.weights.values()) else None,
            }
        )
    control = next((v.key for v in experiment.variants.all() if v.is_control), keys[0] if keys else None)
    units = [p.units for p in periods]
    for key in keys:
        if key == control:
            continue
        lift = stratified_lift(
            [p.stats[control] for p in periods],
            [p.stats[key] for p in periods],
            units,
            alpha=alpha,
        )
        out["lifts"].append(
            {"variant": key, **(_lift_dict(lift) if lift else {"status": "insufficient_data"})}
        )
    return json_safe(out)


def _lift_dict(lift) -> dict[str, Any]:
    return {
        "status": "ok",
        "control_mean": lift.control_mean,
        "treatment_mean": lift.treatment_mean,
        "absolute_lift": lift.absolute_lift,
        "absolute_ci": list(lift.absolute_ci),
        "std_error": lift.std_error,
        "relative_lift": lift.relative_lift,
        "relative_ci": list(lift.relative_ci) if lift.relative_ci else None,
        "p_value": lift.p_value,
        "periods_used": lift.periods_used,
        "units": lift.units,
    }
