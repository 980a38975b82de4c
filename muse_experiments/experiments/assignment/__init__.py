"""Pure assignment engine (GrowthBook-compatible hashing, targeting and bucketing).

Imports only the standard library and numpy -- never Django -- so it is safe to use from the
routing proxy, Celery workers and offline analysis.
"""

from muse_experiments.experiments.assignment.engine import (
    REASONS,
    ConfigSnapshot,
    Decision,
    ExperimentSpec,
    HoldoutSpec,
    LayerSpec,
    VariantSpec,
    assign,
    assign_many,
    bucket,
    route,
)
from muse_experiments.experiments.assignment.growthbook import (
    choose_variation,
    eval_condition,
    get_bucket_ranges,
    get_equal_weights,
    hash,
    in_namespace,
)

__all__ = [
    "REASONS",
    "ConfigSnapshot",
    "Decision",
    "ExperimentSpec",
    "HoldoutSpec",
    "LayerSpec",
    "VariantSpec",
    "assign",
    "assign_many",
    "bucket",
    "choose_variation",
    "eval_condition",
    "get_bucket_ranges",
    "get_equal_weights",
    "hash",
    "in_namespace",
    "route",
]
