"""From per-variant sufficient statistics to the results an analyst reads (no Django import).

For one population (intent-to-treat or served-as-assigned) and each metric × treatment:

* ``frequentist`` — :func:`analytics.stats.compare` (Welch t for means, two-proportion z for
  proportions, delta method for ratios), two-sided at ``alpha``; the relative lift's CI is the
  delta-method CI (Deng et al. 2018), not the absolute CI rescaled.
* ``cuped`` — when the metric has a pre-exposure covariate: regression adjustment
  (:func:`analytics.stats.compare_cuped`) with its ``variance_reduction``; it is then the
  *primary* result of the row (the unadjusted one is kept under ``unadjusted``). When the
  covariate fails the balance check (constant in one arm, or a pre-period difference with
  p < 0.001) the primary result is the unadjusted one: ``cuped`` is false, ``cuped_status`` and
  ``warning`` say why.
* ``sequential`` — always-valid asymptotic confidence sequence (Waudby-Smith et al. 2023, as
  GrowthBook) on the primary statistic, with ``tuning_parameter`` = the expected total units.
* ``bayesian`` — Gaussian approximation with a flat prior on the relative lift (absolute when the
  relative lift is suppressed): chance to beat control and risk **in the metric's direction**
  (for lower-is-better metrics, beating control means a negative lift).
* ``p_holm`` / ``p_bh`` — Holm and Benjamini–Hochberg adjusted p-values of the primary results
  across every variant × metric of the population.
* SRM of the analysed units against the phase's weights, with every population.

Edge cases come back as explicit ``status`` values with a ``reason``; nothing is NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .stats import (
    CovariateStatistic,
    MeanStatistic,
    ProportionStatistic,
    QuantileStatistic,
    RatioStatistic,
    adjust_p_values,
    compare,
    compare_bayesian,
    compare_sequential,
    json_safe,
    srm_test,
)
from .stats.results import CupedStatus, RelativeStatus, Status
from .sums import ComponentSums, VariantStats

#: status of a metric the experiment names but nobody defined.
UNDEFINED_METRIC = "undefined_metric"
#: status when the database sums violate the statistics' consistency checks.
INVALID_INPUT = "invalid_input"


@dataclass(frozen=True)
class MetricSpec:
    """A metric resolved to SQL component keys: ``keys`` is ``(value,)`` or ``(numerator, denominator)``.

    ``role``: primary | guardrail | secondary. ``definition``: what to show analysts (source,
    aggregation, capping, covariate...). ``undefined``: the experiment names an unknown metric.
    Quantile metrics (``metric_type="quantile"``) have no SQL keys: ``quantile`` (q), ``quantile_of``
    (call | unit) and ``call_value`` say what to rank, and their statistics come precomputed.
    """

    name: str
    role: str
    metric_type: str = "mean"
    higher_is_better: bool = True
    keys: tuple[str, ...] = ()
    covariate: bool = False
    label: str = ""
    definition: dict[str, Any] = field(default_factory=dict)
    undefined: bool = False
    quantile: float | None = None
    quantile_of: str = "call"
    call_value: str = ""


@dataclass(frozen=True)
class VariantInfo:
    """An arm as configured for the phase: ``weight`` is the phase weight (fraction)."""

    key: str
    is_control: bool
    weight: float
    endpoint: str


def statistic_for(metric: MetricSpec, stats: VariantStats | None):
    """The engine input of one arm: Proportion-, Mean-, Ratio- or CovariateStatistic.

    An arm with no analysed unit is ``n = 0`` (the engine reports ``insufficient_data``).
    Raises ValueError (from the statistic) on sums that no real sample could produce.
    """
    stats = stats or VariantStats()
    if metric.metric_type == "ratio":
        num = stats.components.get(metric.keys[0], ComponentSums())
        den = stats.components.get(metric.keys[1], ComponentSums())
        n = stats.units
        return RatioStatistic(
            n=n,
            m=MeanStatistic(n, num.sum, num.sum_squares),
            d=MeanStatistic(n, den.sum, den.sum_squares),
            sum_of_products=stats.cross.get((metric.keys[0], metric.keys[1]), 0.0),
        )
    sums = stats.components.get(metric.keys[0], ComponentSums())
    if metric.covariate:  # CUPED works on 0/1 outcomes too (regression-adjusted Welch)
        return CovariateStatistic(sums.n, sums.sum, sums.sum_squares, sums.sum_x, sums.sum_x2, sums.sum_xy)
    if metric.metric_type == "proportion":
        return ProportionStatistic(n=sums.n, sum=sums.sum)
    return MeanStatistic(sums.n, sums.sum, sums.sum_squares)


def units_with_data(metric: MetricSpec, stats: VariantStats | None, stat) -> int:
    """Units of an arm with an observation of the metric: of any of its components (an event of
    its name, a call with its value; :attr:`ComponentSums.with_data`), for a quantile metric the
    units with an observation (``stat.n``). A unit without one still counts in ``n`` with value 0
    for sums, counts and yes/no metrics, so ``n`` alone cannot tell "no data" from "all zero"."""
    if isinstance(stat, QuantileStatistic):
        return int(stat.n)
    components = (stats or VariantStats()).components
    return max((components[k].with_data for k in metric.keys if k in components), default=0)


def _inputs_of(metric: MetricSpec, stat) -> dict[str, Any]:
    """The sufficient statistics of one arm, as stored in the snapshot."""
    if isinstance(stat, QuantileStatistic):
        return {
            "n": stat.n,
            "n_obs": stat.n_obs,
            "q": stat.q,
            "estimate": stat.estimate,
            "std_error": stat.std_error,
        }
    if isinstance(stat, RatioStatistic):
        return {
            "n": stat.n,
            "numerator_sum": stat.m.sum,
            "numerator_sum_squares": stat.m.sum_squares,
            "denominator_sum": stat.d.sum,
            "denominator_sum_squares": stat.d.sum_squares,
            "sum_of_products": stat.sum_of_products,
        }
    if isinstance(stat, CovariateStatistic):
        return {
            "n": stat.n,
            "sum": stat.sum_y,
            "sum_squares": stat.sum_y2,
            "covariate_sum": stat.sum_x,
            "covariate_sum_squares": stat.sum_x2,
            "sum_of_products": stat.sum_xy,
        }
    if isinstance(stat, ProportionStatistic):
        return {"n": stat.n, "sum": stat.sum}
    return {"n": stat.n, "sum": stat.sum, "sum_squares": stat.sum_squares}


def _no_quantile(metric: MetricSpec) -> QuantileStatistic:
    """The statistic of an arm without any observation of a quantile metric."""
    return QuantileStatistic(
        n=0, n_obs=0, q=metric.quantile or 0.5, estimate=float("nan"), std_error=float("nan")
    )


def _bayesian(control, treatment, higher_is_better: bool) -> dict[str, Any]:
    """Chance to beat control and risk, oriented by the metric's direction."""
    base = compare(control, treatment)
    relative = base.ok and base.relative_status == RelativeStatus.OK
    result = compare_bayesian(control, treatment, relative=relative)
    out = result.to_dict()
    if result.status == Status.OK:
        win = result.chance_to_win
        out["chance_to_beat_control"] = win if higher_is_better else 1.0 - win
        out["risk"] = result.expected_loss_treatment if higher_is_better else result.expected_loss_control
        out["risk_of_control"] = (
            result.expected_loss_control if higher_is_better else result.expected_loss_treatment
        )
    else:
        out.update(chance_to_beat_control=None, risk=None, risk_of_control=None)
    return out


def _verdict(primary: dict[str, Any], higher_is_better: bool) -> str:
    """better | worse | inconclusive, or the status when no test ran. Both arms constant with
    different values (``zero_variance``: standard error 0, no test) is a certain difference:
    better or worse by its sign, as the rollout decision reads it
    (:mod:`analytics.rollout_policy`)."""
    if primary["status"] == Status.ZERO_VARIANCE and primary.get("absolute_lift"):
        return "better" if (primary["absolute_lift"] > 0) == higher_is_better else "worse"
    if primary["status"] != Status.OK:
        return primary["status"]
    p, lift = primary.get("p_value"), primary.get("absolute_lift")
    if p is None or lift is None or p >= primary["alpha"]:
        return "inconclusive"
    return "better" if (lift > 0) == higher_is_better else "worse"


def _invalid(variant: str, error: Exception, alpha: float) -> dict[str, Any]:
    return {
        "variant": variant,
        "status": INVALID_INPUT,
        "reason": f"inconsistent sufficient statistics: {error}",
        "alpha": alpha,
        "p_value": None,
        "relative_lift": None,
        "relative_ci": None,
        "absolute_lift": None,
        "verdict": INVALID_INPUT,
    }


def analyse_population(
    *,
    metrics: Sequence[MetricSpec],
    variants: Sequence[VariantInfo],
    population: Mapping[str, VariantStats],
    counts: Mapping[str, Mapping[str, int]],
    alpha: float,
    sequential_tuning: float,
    quantiles: Mapping[str, Mapping[str, QuantileStatistic]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Results and inputs of one population.

    Args:
        metrics: resolved metrics (order kept in the output).
        variants: arms in display order; exactly one ``is_control``.
        population: per-variant sums of the analysed units (:meth:`Aggregates.population`).
        counts: per-variant unit counts for display (``exposed``, ``forced``,
            ``multiple_exposure``, ``deviating``).
        alpha: significance level; sequential_tuning: confidence-sequence tuning parameter.
        quantiles: ``{metric name: {variant: QuantileStatistic}}`` of the quantile metrics
            (:meth:`analytics.quantile_queries.QuantileSamples.statistics`); an arm missing there
            has no observation.

    Returns:
        ``(results, inputs)``; ``results`` = ``{"srm", "variants": [...], "metrics": [{name, role,
        type, higher_is_better, status, variants: [{key, n, mean, units_with_data}], comparisons:
        [...]}],
        "guardrails": [...]}``, JSON-safe. ``inputs`` = per-metric per-variant sufficient stats.

    Raises:
        ValueError: no control among ``variants``.
    """
    control = next((v for v in variants if v.is_control), None)
    if control is None:
        raise ValueError("no control variant")
    units = {v.key: population[v.key].units if v.key in population else 0 for v in variants}
    srm = srm_test([units[v.key] for v in variants], [float(v.weight) for v in variants])
    metric_out: list[dict[str, Any]] = []
    inputs: dict[str, Any] = {}
    primaries: list[dict[str, Any]] = []
    for metric in metrics:
        entry: dict[str, Any] = {
            "name": metric.name,
            "label": metric.label or metric.name,
            "role": metric.role,
            "type": metric.metric_type,
            "kind": metric.metric_type,
            "higher_is_better": metric.higher_is_better,
            "definition": metric.definition,
            "status": "ok",
            "reason": None,
            "variants": [],
            "comparisons": [],
        }
        metric_out.append(entry)
        if metric.undefined:
            entry.update(
                status=UNDEFINED_METRIC, reason=f"no metric named {metric.name!r}: define it in the admin"
            )
            continue
        try:
            if metric.metric_type == "quantile":
                given = (quantiles or {}).get(metric.name, {})
                stats = {v.key: given.get(v.key) or _no_quantile(metric) for v in variants}
            else:
                stats = {v.key: statistic_for(metric, population.get(v.key)) for v in variants}
        except ValueError as exc:
            entry.update(status=INVALID_INPUT, reason=str(exc))
            continue
        inputs[metric.name] = {k: _inputs_of(metric, s) for k, s in stats.items()}
        for v in variants:
            s = stats[v.key]
            row = {
                "key": v.key,
                "n": s.n,
                "mean": s.mean if s.n else None,
                "units_with_data": units_with_data(metric, population.get(v.key), s),
            }
            if isinstance(s, RatioStatistic):
                row.update(
                    numerator_mean=s.m.mean if s.n else None, denominator_mean=s.d.mean if s.n else None
                )
            if isinstance(s, CovariateStatistic):
                row["covariate_mean"] = s.x.mean if s.n else None
            if isinstance(s, QuantileStatistic):
                row.update(mean=s.estimate if s.n_obs else None, q=s.q, observations=s.n_obs)
            entry["variants"].append(row)
        for v in variants:
            if v.is_control:
                continue
            c, t = stats[control.key], stats[v.key]
            try:
                primary = compare(c, t, alpha=alpha)  # CUPED, or its unadjusted fallback
                unadjusted = compare(c.y, t.y, alpha=alpha).to_dict() if metric.covariate else None
                sequential = compare_sequential(c, t, alpha=alpha, tuning_parameter=sequential_tuning)
                bayes = _bayesian(c, t, metric.higher_is_better)
            except (
                ValueError,
                ArithmeticError,
            ) as exc:  # a status for this comparison, never a lost snapshot
                comparison = _invalid(v.key, exc, alpha)
            else:
                comparison = {"variant": v.key, **primary.to_dict()}
                comparison["cuped"] = primary.cuped_status == CupedStatus.APPLIED
                comparison["unadjusted"] = unadjusted
                comparison["sequential"] = sequential.to_dict()
                comparison["bayesian"] = bayes
                comparison["verdict"] = _verdict(comparison, metric.higher_is_better)
                seq = comparison["sequential"]
                comparison["sequential_verdict"] = _verdict(seq, metric.higher_is_better)
            entry["comparisons"].append(comparison)
            primaries.append(comparison)
    pvals = [c.get("p_value") for c in primaries]
    for c, holm, bh in zip(
        primaries, adjust_p_values(pvals, "holm"), adjust_p_values(pvals, "bh"), strict=True
    ):
        c["p_holm"], c["p_bh"] = holm, bh
    guardrails = [
        {
            "metric": m["name"],
            "variant": c["variant"],
            "worse": c.get("sequential_verdict") == "worse",
            "status": c.get("sequential", {}).get("status", c["status"])
            if c.get("sequential")
            else c["status"],
            "sequential_p_value": (c.get("sequential") or {}).get("p_value"),
            "certain": (c.get("sequential") or {}).get("status") == Status.ZERO_VARIANCE,
            "relative_lift": c.get("relative_lift"),
            "absolute_lift": c.get("absolute_lift"),
            "sequential_ci": (c.get("sequential") or {}).get("absolute_ci"),
            "control_n": c.get("control_n"),
            "treatment_n": c.get("treatment_n"),
        }
        for m in metric_out
        if m["role"] == "guardrail"
        for c in m["comparisons"]
    ]
    variants_out = [
        {
            "key": v.key,
            "is_control": v.is_control,
            "weight": v.weight,
            "endpoint": v.endpoint,
            "units": units[v.key],
            **{k: int(n) for k, n in counts.get(v.key, {}).items()},
        }
        for v in variants
    ]
    results = {
        "srm": srm.to_dict(),
        "variants": variants_out,
        "metrics": metric_out,
        "guardrails": guardrails,
        "multiple_comparisons": {
            "family_size": sum(1 for p in pvals if p is not None),
            "methods": ["holm", "benjamini_hochberg"],
        },
    }
    return json_safe(results), json_safe(inputs)
