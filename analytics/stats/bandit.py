"""Multi-armed bandit statistics: Thompson-sampling weights and the period-stratified lift.

Pure numpy/scipy (no Django). The pieces:

* :func:`probability_best` -- the posterior probability that each arm is the best, by Monte Carlo
  with a seeded generator (``numpy.random.default_rng(seed)``): a Beta(1 + successes,
  1 + failures) posterior per arm for proportions, a normal posterior N(mean, s²/n) (flat prior)
  for means. Deterministic for a given seed.
* :func:`thompson_weights` -- traffic weights = P(best) with an additive per-arm floor ``f``:
  ``w_i = f + (1 - k·f) · p_i / Σp``, so every arm keeps at least ``f``, the weights sum to 1
  and the order of the arms is kept. (GrowthBook's ``Bandits.compute_result`` in
  ``packages/stats/gbstats/bayesian/bandits.py`` instead raises weights below ``f`` to ``f`` and
  renormalises, which can leave an arm just under ``f``, and by default weights by the top-two
  probabilities rather than P(best).)
* :func:`stratified_lift` -- the lift of a treatment against the control that stays unbiased
  although weights changed between periods. A unit belongs to the period of its *first* exposure
  (GrowthBook's ``bandit_period``, ``packages/back-end/src/integrations/sql/clauses/
  bandit-case-when.ts``); within a period assignment is a fixed-weight randomisation, so the
  period's difference in means is unbiased. The periods are combined with weights equal to
  their share of all units (``__banditPeriodWeights`` in GrowthBook's
  ``sql/ctes/bandit-statistics-cte.ts``): ``Δ = Σ_k w_k (ȳ_tk − ȳ_ck)``,
  ``Var Δ = Σ_k w_k² (s²_t/n_tk + s²_c/n_ck)``, with each arm's variance ``s²`` pooled within
  periods (GrowthBook uses each period's own variance; with a 1 % floor an arm's period holds a
  handful of units and that noisy variance under-covered in ``bench/bench_bandit.py``). Pooling the arms' units across periods instead
  would be biased (Simpson's paradox) whenever the outcome drifts over time while the weights
  move. The relative lift ``Δ/μ̂_c`` gets a delta-method interval.

:func:`period_srm` checks each period's new units against the weights in force in that period.

An update whose weights move no arm by more than :data:`WEIGHT_CHANGE_TOLERANCE`
(:func:`weights_moved`) keeps the weights in force: Monte Carlo noise opens no new period.

A declared winner gets :func:`winner_weights` (all but the other arms' floors). The optional cost
guardrail (:func:`cost_over_cap`) keeps an arm whose cost per call is credibly above a cap at the
floor: such an arm can neither win nor take traffic from the arms within the cap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from .srm import SrmResult, srm_test
from .statistics import MeanStatistic, ProportionStatistic, RatioStatistic

ArmStatistic = ProportionStatistic | MeanStatistic

#: Monte Carlo draws of :func:`probability_best` (the standard error of a probability is at most
#: 0.5/sqrt(draws) = 0.005).
DEFAULT_DRAWS = 10_000


def _constant_arm_variance(arms: Sequence[ArmStatistic]) -> float:
    """Per-unit variance lent to a mean arm with two or more units all of the same value (its own
    s² is 0: a normal posterior of width 0 would make it certainly best or worst, and a fixed wide
    one, whatever the metric's scale, would keep its P(best) near chance for ever):

    * the pooled within-arm variance of the arms that have spread, ``Σ (n−1) s² / Σ (n−1)``;
    * when no arm has spread (every arm constant), the variance of the arms' means (``ddof=1``),
      so the posteriors narrow as units come in; 0 when all the means are equal (then the arms tie
      and share P(best) equally).
    """
    spread = [a for a in arms if a.n >= 2 and a.variance > 0]
    if spread:
        return sum(a.variance * (a.n - 1) for a in spread) / sum(a.n - 1 for a in spread)
    means = [a.mean for a in arms if a.n >= 2]
    return float(np.var(means, ddof=1)) if len(means) >= 2 else 0.0


def _posterior_draws(
    arm: ArmStatistic, rng: np.random.Generator, draws: int, constant_var: float
) -> np.ndarray:
    if isinstance(arm, ProportionStatistic):
        return rng.beta(1.0 + arm.sum, 1.0 + arm.n - arm.sum, size=draws)
    if arm.n < 2:
        # no spread to learn from yet: a wide normal around what was seen (or 0)
        centre = arm.mean if arm.n else 0.0
        return rng.normal(centre, 1e2, size=draws)
    variance = arm.variance if arm.variance > 0 else constant_var
    return rng.normal(arm.mean, math.sqrt(variance / arm.n), size=draws)


def probability_best(
    arms: Sequence[ArmStatistic],
    *,
    seed: int,
    draws: int = DEFAULT_DRAWS,
    higher_is_better: bool = True,
) -> tuple[float, ...]:
    """P(arm i is the best), one per arm, summing to 1.

    Args:
        arms: per-arm data so far, all :class:`ProportionStatistic` (Beta(1+s, 1+n−s) posterior)
            or all :class:`MeanStatistic` (normal posterior N(ȳ, s²/n); an arm with fewer than
            two units gets N(ȳ, 100²), an arm of constant values the variance
            :func:`_constant_arm_variance` lends it).
        seed: seed of the Monte Carlo generator (same seed and data, same answer).
        draws: Monte Carlo draws (>= 100).
        higher_is_better: False for metrics where lower wins (cost, latency).

    Ties between draws (possible only with identical degenerate posteriors, e.g. every arm the
    same constant) are shared equally by the tied arms.

    Raises:
        ValueError: fewer than two arms, mixed statistic types, ``draws`` < 100.
    """
    if len(arms) < 2:
        raise ValueError("probability_best needs at least two arms")
    if len({type(a) for a in arms}) != 1 or not isinstance(arms[0], ProportionStatistic | MeanStatistic):
        raise ValueError("arms must all be ProportionStatistic or all MeanStatistic")
    if draws < 100:
        raise ValueError(f"draws must be >= 100, got {draws}")
    rng = np.random.default_rng(seed)
    constant_var = _constant_arm_variance(arms) if isinstance(arms[0], MeanStatistic) else 0.0
    samples = np.column_stack([_posterior_draws(a, rng, draws, constant_var) for a in arms])
    top = samples.max(axis=1) if higher_is_better else samples.min(axis=1)
    tied = samples == top[:, None]
    share = tied / tied.sum(axis=1, keepdims=True)
    return tuple(float(c) / draws for c in share.sum(axis=0))


def thompson_weights(probabilities: Sequence[float], *, min_weight: float) -> tuple[float, ...]:
    """Traffic weights from P(best) with an additive floor of ``min_weight`` per arm:
    ``w_i = f + (1 − k·f)·p_i/Σp`` (see the module docstring for how GrowthBook's differs).
    Weights are >= ``min_weight`` and sum to 1.

    Raises:
        ValueError: fewer than two arms, negative or non-finite probabilities (or all zero),
            ``min_weight`` outside [0, 1/k].
    """
    k = len(probabilities)
    if k < 2:
        raise ValueError("thompson_weights needs at least two arms")
    p = np.asarray(probabilities, dtype=float)
    if not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"probabilities must be finite, >= 0 and not all zero, got {list(probabilities)}")
    if not (math.isfinite(min_weight) and 0.0 <= min_weight <= 1.0 / k):
        raise ValueError(f"min_weight must be in [0, 1/{k}], got {min_weight}")
    w = min_weight + (1.0 - k * min_weight) * (p / p.sum())
    return tuple(float(x) for x in w / w.sum())


def rounded_weights(weights: Sequence[float], *, step: float = 1e-4) -> tuple[float, ...]:
    """Weights on a grid of ``step`` (the hash's granularity is 1e-4) that sum to exactly 1: each
    rounded down, the missing steps given to the largest remainders (largest-remainder method).

    Raises:
        ValueError: negative/non-finite weights or a zero sum.
    """
    w = np.asarray(weights, dtype=float)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    units = round(1.0 / step)
    scaled = w / w.sum() * units
    base = np.floor(scaled).astype(int)
    for i in np.argsort(-(scaled - base), kind="stable")[: units - int(base.sum())]:
        base[i] += 1
    return tuple(round(int(b) * step, 10) for b in base)


#: Largest move of any arm's weight (a share: 0.02 = 2 percentage points) that an update treats
#: as no change. P(best) is a Monte Carlo estimate drawn with a new seed every slot: with the same
#: data, two updates' P(best) differ with a standard deviation of up to sqrt(2)·0.5/sqrt(draws)
#: = 0.0071 (:data:`DEFAULT_DRAWS`), and a weight by that times ``1 − k·floor``. The weights
#: wandered (40.0/26.5/33.6 → 39.9/26.6/33.5) and each update opened a new phase (a new, smaller
#: period of the lift). 0.5 point would be under one standard deviation near P(best) = 0.5, so
#: noise would still pass it in about 4 updates of 10; 2 points is about 3 of them (under 1 % of
#: updates pass on noise alone). The comparison is with the weights in force, so a real trend
#: smaller than that adds up over updates until it passes.
WEIGHT_CHANGE_TOLERANCE = 0.02


def weights_moved(
    current: Sequence[float], new: Sequence[float], *, tolerance: float = WEIGHT_CHANGE_TOLERANCE
) -> bool:
    """Whether some arm's weight moves by more than ``tolerance`` (a share) from ``current`` to
    ``new`` (same arm order). Different numbers of arms always count as a move.

    Raises:
        ValueError: a negative or non-finite ``tolerance``.
    """
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"tolerance must be finite and >= 0, got {tolerance}")
    if len(current) != len(new):
        return True
    # 1e-9: weights on the 1e-4 grid (rounded_weights) differ from their decimals by float error
    return any(abs(float(a) - float(b)) > tolerance + 1e-9 for a, b in zip(current, new, strict=True))


def winner_weights(arms: int, winner: int, *, min_weight: float) -> tuple[float, ...]:
    """Weights once ``winner`` is declared: every other arm keeps the floor ``min_weight``, the
    winner gets the rest, ``1 − (arms − 1)·min_weight``.

    The floor stays (instead of 100 % to the winner) because GrowthBook keeps at least 1 % per
    variation "in case your user behavior changes over time" (docs.growthbook.io/bandits/overview)
    and marks a winner without starving the others; here it also keeps new units of the control in
    every period, so the period-stratified lift goes on being measured after the declaration.

    Raises:
        ValueError: fewer than two arms, ``winner`` not an arm index, ``min_weight`` outside
            [0, 1/arms].
    """
    if arms < 2:
        raise ValueError("winner_weights needs at least two arms")
    if not 0 <= winner < arms:
        raise ValueError(f"winner must be an arm index in [0, {arms}), got {winner}")
    if not (math.isfinite(min_weight) and 0.0 <= min_weight <= 1.0 / arms):
        raise ValueError(f"min_weight must be in [0, 1/{arms}], got {min_weight}")
    rest = 1.0 - (arms - 1) * min_weight
    return tuple(rest if i == winner else min_weight for i in range(arms))


@dataclass(frozen=True, slots=True)
class CostCheck:
    """One arm's cost per call against the cap.

    Attributes:
        cost_per_call: ``Σ cost / Σ calls`` (USD; None without calls).
        std_error: its delta-method standard error (None with fewer than two units).
        probability_over: P(cost per call > cap) under a normal posterior N(ratio, se²) with a
            flat prior (None when it cannot be computed).
        over_cap: ``probability_over`` > ``probability`` (the arm is credibly above the cap).
    """

    cost_per_call: float | None
    std_error: float | None
    probability_over: float | None
    over_cap: bool


def cost_over_cap(cost: RatioStatistic, cap: float, *, probability: float = 0.95) -> CostCheck:
    """Is the arm's mean cost per call credibly above ``cap`` (USD per call)?

    ``cost`` is the ratio ``Σ cost_usd / Σ calls`` over the arm's units (numerator and denominator
    per unit). Its standard error is the delta method's (Deng et al. 2018, "Applying the Delta
    Method in Metric Analytics", KDD, section 3; :class:`~.statistics.RatioStatistic`). With a
    flat prior and a normal likelihood the posterior of the cost per call is N(r̂, se²), so
    ``P(cost > cap) = Φ((r̂ − cap)/se)``; the arm is over the cap when that exceeds ``probability``
    — the same as the one-sided ``probability`` lower bound ``r̂ − z·se`` lying above the cap.
    An arm with fewer than two units or no call is not over (no evidence yet); with ``se = 0``
    the estimate decides.

    Raises:
        ValueError: ``cap`` not a positive finite number, ``probability`` outside (0.5, 1).
    """
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"cap must be a positive number, got {cap}")
    if not 0.5 < probability < 1.0:
        raise ValueError(f"probability must be in (0.5, 1), got {probability}")
    if cost.d.sum <= 0:
        return CostCheck(None, None, None, False)
    ratio = cost.mean
    if cost.n < 2:
        return CostCheck(ratio, None, None, False)
    se = cost.std_error
    if not math.isfinite(se):
        return CostCheck(ratio, None, None, False)
    # with no spread the estimate is certain: over exactly when it exceeds the cap
    p_over = float(sps.norm.sf((cap - ratio) / se)) if se > 0 else float(ratio > cap)
    return CostCheck(ratio, se, p_over, p_over > probability)


@dataclass(frozen=True, slots=True)
class BanditDecision:
    """What one scheduled update decides.

    Attributes:
        weights: new traffic weights, one per arm (sum 1): equal while ``exploring``, else
            :func:`thompson_weights` of ``probability_best``.
        probability_best: P(arm is best) from :func:`probability_best`, among the arms not over
            the cost cap (an arm over the cap has 0) when some are.
        exploring: the exploration period is not over (weights stay equal, no winner).
        winner: index of the arm whose P(best) reached the stopping threshold, else None.
        over_cap: per arm, whether it was held at the floor for its cost (all False without a cap).
    """

    weights: tuple[float, ...]
    probability_best: tuple[float, ...]
    exploring: bool
    winner: int | None
    over_cap: tuple[bool, ...] = ()


def bandit_decide(
    arms: Sequence[ArmStatistic],
    *,
    exploring: bool,
    min_weight: float,
    stop_when_probability_best: float,
    seed: int,
    higher_is_better: bool = True,
    draws: int = DEFAULT_DRAWS,
    over_cap: Sequence[bool] | None = None,
) -> BanditDecision:
    """One Thompson-sampling update: P(best) of every arm, the new weights and the winner, if any.

    Args:
        arms: each arm's data so far (all its units, every period).
        exploring: True during the exploration time: equal weights and no winner.
        min_weight: per-arm floor of the weights, in [0, 1/k].
        stop_when_probability_best: P(best) at or above which the arm is declared the winner.
        seed, higher_is_better, draws: as for :func:`probability_best`.
        over_cap: per arm, True when its cost is credibly over the cap (:func:`cost_over_cap`).
            After exploration such an arm gets P(best) 0, so only the floor, and cannot win;
            P(best) is computed among the other arms. An arm alone within the cap has P(best) 1,
            so the weight a winner would get, but is not declared the winner: the cost check runs
            again at every update and may clear an arm, whereas a winner is final. When every arm
            is over the cap none meets the constraint: plain Thompson weights and no winner.

    Raises:
        ValueError: as :func:`probability_best` and :func:`thompson_weights`, a threshold
            outside (0.5, 1], or ``over_cap`` not one entry per arm.
    """
    if not 0.5 < stop_when_probability_best <= 1.0:
        raise ValueError(f"stop_when_probability_best must be in (0.5, 1], got {stop_when_probability_best}")
    k = len(arms)
    capped = tuple(bool(x) for x in over_cap) if over_cap is not None else (False,) * k
    if len(capped) != k:
        raise ValueError(f"over_cap needs one entry per arm ({k}), got {len(capped)}")
    p_best = probability_best(arms, seed=seed, draws=draws, higher_is_better=higher_is_better)
    if exploring:
        return BanditDecision(tuple(1.0 / k for _ in arms), p_best, True, None, capped)
    eligible = [i for i in range(k) if not capped[i]]
    can_win = len(eligible) >= 2
    if eligible and len(eligible) < k:
        sub = (
            probability_best(
                [arms[i] for i in eligible], seed=seed, draws=draws, higher_is_better=higher_is_better
            )
            if len(eligible) > 1
            else (1.0,)
        )
        by_arm = dict(zip(eligible, sub, strict=True))
        p_best = tuple(by_arm.get(i, 0.0) for i in range(k))
    weights = thompson_weights(p_best, min_weight=min_weight)
    top = max(range(k), key=lambda i: p_best[i])
    winner = top if can_win and p_best[top] >= stop_when_probability_best else None
    return BanditDecision(weights, p_best, False, winner, capped)


@dataclass(frozen=True, slots=True)
class StratifiedLift:
    """The period-stratified comparison of a treatment with the control.

    Attributes:
        control_mean / treatment_mean: period-weighted means ``Σ_k w_k ȳ_k``.
        absolute_lift: ``treatment_mean − control_mean``; ``absolute_ci`` its two-sided
            ``1 − alpha`` normal interval; ``std_error`` its standard error.
        relative_lift: ``absolute_lift / control_mean`` (None when the control mean is 0);
            ``relative_ci``: delta-method interval.
        p_value: two-sided z-test of ``absolute_lift = 0``.
        periods_used: periods where both arms had a unit (the others carry no within-period
            comparison; their weight is spread over the periods used).
        units: units of the two arms in the periods used.
    """

    control_mean: float
    treatment_mean: float
    absolute_lift: float
    absolute_ci: tuple[float, float]
    std_error: float
    relative_lift: float | None
    relative_ci: tuple[float, float] | None
    p_value: float
    periods_used: int
    units: int
    alpha: float


def _within_variance(stats: Sequence[ArmStatistic]) -> float:
    """An arm's pooled within-period variance per unit: ``Σ_k (n_k − 1) s²_k / Σ_k (n_k − 1)``
    (unbiased s², proportions included), so drifts of the mean between periods do not inflate it
    and small periods do not make the standard error noisy."""
    ss = dof = 0.0
    for s in stats:
        if s.n < 2:
            continue
        if isinstance(s, ProportionStatistic):
            p = s.mean
            ss += s.n * p * (1.0 - p)
        else:
            ss += s.variance * (s.n - 1)
        dof += s.n - 1
    return ss / dof if dof > 0 else math.nan


def stratified_lift(
    control: Sequence[ArmStatistic],
    treatment: Sequence[ArmStatistic],
    period_units: Sequence[int],
    *,
    alpha: float = 0.05,
) -> StratifiedLift | None:
    """Lift of ``treatment`` over ``control`` stratified by period (see the module docstring).

    Args:
        control / treatment: one statistic per period (units first exposed in that period).
        period_units: all units (every arm) first exposed in each period: the period weights.
        alpha: two-sided level of the intervals.

    Returns:
        :class:`StratifiedLift`, or None when no period has a unit in both arms, or an arm has
        no period with two units (no variance).

    Raises:
        ValueError: sequences of different lengths, negative unit counts, alpha outside (0, 1).
    """
    if not (len(control) == len(treatment) == len(period_units)):
        raise ValueError("control, treatment and period_units need one entry per period")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if any(u < 0 for u in period_units):
        raise ValueError("period_units must be >= 0")
    used = [k for k in range(len(control)) if control[k].n >= 1 and treatment[k].n >= 1]
    total = float(sum(period_units[k] for k in used))
    s2_c, s2_t = _within_variance(control), _within_variance(treatment)
    if not used or total <= 0 or math.isnan(s2_c) or math.isnan(s2_t):
        return None
    mc = mt = vc = vt = 0.0
    for k in used:
        w = period_units[k] / total
        mc += w * control[k].mean
        mt += w * treatment[k].mean
        vc += w * w * s2_c / control[k].n
        vt += w * w * s2_t / treatment[k].n
    z = float(sps.norm.ppf(1.0 - alpha / 2.0))
    delta = mt - mc
    se = math.sqrt(vc + vt)
    p_value = float(2.0 * sps.norm.sf(abs(delta) / se)) if se > 0 else (1.0 if delta == 0 else 0.0)
    relative = relative_ci = None
    if mc != 0:
        relative = delta / mc
        # delta method for mt/mc − 1 with independent arms
        se_rel = math.sqrt(vt / mc**2 + mt**2 * vc / mc**4)
        relative_ci = (relative - z * se_rel, relative + z * se_rel)
    return StratifiedLift(
        control_mean=mc,
        treatment_mean=mt,
        absolute_lift=delta,
        absolute_ci=(delta - z * se, delta + z * se),
        std_error=se,
        relative_lift=relative,
        relative_ci=relative_ci,
        p_value=p_value,
        periods_used=len(used),
        units=sum(control[k].n + treatment[k].n for k in used),
        alpha=alpha,
    )


def period_srm(counts: Sequence[Sequence[int]], weights: Sequence[Sequence[float]]) -> list[SrmResult]:
    """One SRM test per period: the units first exposed in period k (``counts[k]``, per arm)
    against the weights in force in period k (``weights[k]``). See :func:`~.srm.srm_test`.

    Raises:
        ValueError: different numbers of periods, or what :func:`~.srm.srm_test` raises.
    """
    if len(counts) != len(weights):
        raise ValueError("counts and weights need one entry per period")
    return [srm_test(list(c), list(w)) for c, w in zip(counts, weights, strict=True)]
