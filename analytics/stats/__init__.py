"""Pure statistics engine for Muse Experiments (numpy/scipy only, no Django).

Public API (stable):

* inputs: :class:`ProportionStatistic`, :class:`MeanStatistic`,
  :class:`RatioStatistic`, :class:`CovariateStatistic`
* :func:`compare` -> :class:`ComparisonResult` (frequentist fixed-horizon; Welch t,
  two-proportion z with Newcombe / MOVER-R intervals, delta-method ratios, CUPED for
  CovariateStatistic after a covariate balance check); ``interval_method`` /
  ``relative_interval_method`` name how each interval was built (:class:`IntervalMethod`),
  ``cuped_status`` whether CUPED was applied (:class:`CupedStatus`)
* :func:`srm_test` -> :class:`SrmResult`
* :func:`compare_cuped`, :func:`cuped_theta` (regression adjustment)
* :func:`compare_sequential` (always-valid confidence sequences)
* :func:`compare_bayesian` -> :class:`BayesianResult` (Gaussian; Beta-Binomial for proportions)
* :func:`adjust_p_values` / :func:`holm` / :func:`benjamini_hochberg` / :func:`bonferroni`
* power: :func:`power_mean`, :func:`sample_size_mean`, :func:`mde_mean`,
  :func:`power_proportion`, :func:`sample_size_proportion`, :func:`mde_proportion`
* :class:`QuantileStatistic` / :func:`quantile_statistic` (p50/p95/p99 with a standard error
  clustered by unit; Woodruff / Deng et al. 2018), compared by :func:`compare` as ``quantile_woodruff_z``
* :func:`compare_many` -> :class:`ManyComparisonResult` (vectorised)
"""

from .bayesian import BayesianResult, compare_bayesian
from .cuped import compare_cuped, cuped_theta
from .frequentist import compare
from .multiple import adjust_p_values, benjamini_hochberg, bonferroni, holm
from .power import (
    PowerEstimate,
    SampleSize,
    mde_from_std_error,
    mde_mean,
    mde_proportion,
    power_estimate,
    power_mean,
    power_proportion,
    sample_size_mean,
    sample_size_proportion,
    units_for_effect,
)
from .quantiles import QuantileStatistic, quantile_statistic
from .results import ComparisonResult, CupedStatus, IntervalMethod, RelativeStatus, Status, json_safe
from .sequential import compare_sequential, sequential_halfwidth, sequential_p_value, sequential_rho
from .srm import SrmResult, srm_test
from .statistics import CovariateStatistic, MeanStatistic, ProportionStatistic, RatioStatistic
from .vectorized import ManyComparisonResult, compare_many

__all__ = [
    "BayesianResult",
    "ComparisonResult",
    "CovariateStatistic",
    "CupedStatus",
    "IntervalMethod",
    "ManyComparisonResult",
    "MeanStatistic",
    "ProportionStatistic",
    "QuantileStatistic",
    "RatioStatistic",
    "RelativeStatus",
    "PowerEstimate",
    "SampleSize",
    "SrmResult",
    "Status",
    "adjust_p_values",
    "benjamini_hochberg",
    "bonferroni",
    "compare",
    "compare_bayesian",
    "compare_cuped",
    "compare_many",
    "compare_sequential",
    "cuped_theta",
    "holm",
    "json_safe",
    "mde_from_std_error",
    "mde_mean",
    "mde_proportion",
    "power_estimate",
    "power_mean",
    "power_proportion",
    "quantile_statistic",
    "sample_size_mean",
    "sample_size_proportion",
    "units_for_effect",
    "sequential_halfwidth",
    "sequential_p_value",
    "sequential_rho",
    "srm_test",
]
