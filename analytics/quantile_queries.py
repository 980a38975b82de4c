"""The call values behind quantile metrics (p50 / p95 / p99), per exposed unit.

A quantile cannot be rebuilt from sums, so unlike :func:`analytics.queries.aggregate` this reads
one row per call of the phase's exposed (non-forced) units: ``(assigned variant, unit, the call's
variant key, routing reason, served endpoint, value per call_value)``, ordered by unit. Python
then flags each unit the way the aggregation statement does (*multiple exposure*: a call carries
another variant key; *deviates*: a call was not served as assigned) so both populations
(intent-to-treat, served-as-assigned) use the same units as every other metric, and builds one
:class:`~analytics.stats.QuantileStatistic` per variant (:meth:`QuantileSamples.statistics`).
Memory and time grow with the calls of the phase (8 bytes per value kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.db import connection

from muse_experiments.experiments.models import Exposure
from routing.models import CallRecord

from .queries import AS_ASSIGNED_REASONS, CALL_VALUE_SQL
from .stats import QuantileStatistic, quantile_statistic


@dataclass
class UnitValues:
    """One exposed unit: its assigned variant, flags, and its calls' values per call value name."""

    variant_key: str
    multi: bool = False
    deviates: bool = False
    values: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class QuantileSamples:
    """Every exposed unit's call values for the requested call values (``units`` by unit id)."""

    units: dict[str, UnitValues]

    def statistics(
        self, *, call_value: str, q: float, per_unit: bool, include_multiple: bool, served_only: bool
    ) -> dict[str, QuantileStatistic]:
        """``{variant: QuantileStatistic}`` of one population.

        ``per_unit=False``: the quantile of every call value, clustered by unit; ``True``: of the
        units' mean values (one per unit). Units without a value (e.g. only failed calls for
        latency) are left out; the population filters are those of
        :meth:`analytics.queries.Aggregates.population`.
        """
        by_variant: dict[str, tuple[list[float], list[int]]] = {}
        for index, unit in enumerate(self.units.values()):
            if (unit.multi and not include_multiple) or (unit.deviates and served_only):
                continue
            values = unit.values.get(call_value) or []
            if not values:
                continue
            vals, ids = by_variant.setdefault(unit.variant_key, ([], []))
            if per_unit:
                vals.append(sum(values) / len(values))
                ids.append(index)
            else:
                vals.extend(values)
                ids.extend([index] * len(values))
        return {
            key: quantile_statistic(np.asarray(vals), None if per_unit else np.asarray(ids), q=q)
            for key, (vals, ids) in by_variant.items()
        }


def quantile_samples(
    *,
    experiment_id: int,
    phase: int,
    variant_endpoints: Mapping[str, str],
    call_values: Sequence[str],
) -> QuantileSamples:
    """Read the phase's call values of every exposed unit (see the module docstring).

    Args:
        variant_endpoints: ``{variant key: endpoint public id}`` for the served-as-assigned flag.
        call_values: names from :data:`analytics.queries.CALL_VALUE_SQL` (e.g. ``latency_ms``).

    Raises:
        ValueError: an unknown call value.
    """
    unknown = [v for v in call_values if v not in CALL_VALUE_SQL]
    if unknown:
        raise ValueError(f"unknown call values {unknown}")
    names = list(dict.fromkeys(call_values))
    exprs = ", ".join(CALL_VALUE_SQL[name] for name in names)
    sql = f"""
        SELECT x.variant_key, x.unit_id, c.variant_key, c.reason, c.served_endpoint{", " if exprs else ""}{exprs}
        FROM {Exposure._meta.db_table} x
        JOIN {CallRecord._meta.db_table} c
          ON c.experiment_id = x.experiment_id AND c.phase = x.phase AND c.unit_id = x.unit_id
        WHERE x.experiment_id = %s AND x.phase = %s AND x.reason <> 'forced'
        ORDER BY x.unit_id, c.id
    """
    units: dict[str, UnitValues] = {}
    with connection.cursor() as cur:
        cur.execute(sql, [experiment_id, phase])
        for assigned, unit_id, call_variant, reason, served, *values in cur.fetchall():
            unit = units.get(unit_id)
            if unit is None:
                unit = units[unit_id] = UnitValues(variant_key=assigned)
            if call_variant and call_variant != assigned:
                unit.multi = True
            endpoint = variant_endpoints.get(call_variant or "")
            if reason not in AS_ASSIGNED_REASONS or (served and endpoint is not None and served != endpoint):
                unit.deviates = True
            for name, value in zip(names, values, strict=True):
                if value is not None:
                    unit.values.setdefault(name, []).append(float(value))
    return QuantileSamples(units=units)
