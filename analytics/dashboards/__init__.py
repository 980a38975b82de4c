"""Reads behind the analyst pages: stored snapshots, the hourly call rollup and lift points.

Nothing here scans raw call records or exposures: a page costs a handful of indexed queries over
pre-aggregated rows (see ``bench/bench_pages.py``). Each builder returns :class:`Table` objects
(HTML and CSV/JSON export from one definition) and plain lists for the charts. One module per
page (:mod:`.experiments`, :mod:`.results`, :mod:`.routing_health`); the results page's parts
live in :mod:`.metrics` (from the snapshot) and :mod:`.calls` (from the call rollup).
"""

from .calls import call_table, exposure_series, rollup_by
from .common import ANALYSES, ENGINES, ResultsOptions, endpoint_labels, results_options
from .experiments import experiment_list, shadow_test_list
from .metrics import cuped_warnings, metric_table, power_table, srm_table
from .results import kills_table, lift_series, results_dashboard
from .routing_health import routing_health

__all__ = [
    "ANALYSES",
    "ENGINES",
    "ResultsOptions",
    "call_table",
    "cuped_warnings",
    "endpoint_labels",
    "experiment_list",
    "exposure_series",
    "kills_table",
    "lift_series",
    "metric_table",
    "power_table",
    "results_dashboard",
    "results_options",
    "rollup_by",
    "routing_health",
    "shadow_test_list",
    "srm_table",
]
