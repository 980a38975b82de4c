"""The SQL aggregation against the same computation in Python on the raw rows."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from analytics.queries import CALL_VALUE_SQL, Component, aggregate
from routing.models import FALLBACK_REASONS
from tests.analytics.conftest import T0

CALL_VALUES = {
    "latency_ms": lambda c: c["latency_ms"],
    "cost_usd": lambda c: float(c["cost_usd"]),
    "output_tokens": lambda c: float(c["output_tokens"]),
    "calls": lambda c: 1.0,
    "error": lambda c: 1.0 if c["status"] == "failed" else 0.0,
    "fallback": lambda c: 1.0 if c["reason"] in FALLBACK_REASONS else 0.0,
    "has_tool_call": lambda c: 1.0 if c["tool_calls"] > 0 else 0.0,
}


def _agg(aggregation: str, values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    if aggregation == "sum":
        return math.fsum(vals)
    if aggregation == "count":
        return float(len(vals))
    if aggregation == "any":
        return 1.0 if any(v > 0 for v in vals) else 0.0
    return math.fsum(vals) / len(vals) if vals else None


def reference(raw, components, *, include_multiple=False, served_only=False, caps=None):
    """Per variant: units and per component (n, Σy, Σy², Σx, Σx², Σxy), computed in Python."""
    caps = caps or {}
    per_unit = {}
    for unit, (variant, reason, first) in raw.exposures.items():
        if reason == "forced":
            continue
        calls = [c for c in raw.calls if c["unit_id"] == unit and c["experiment_id"] == raw.experiment.id]
        multi = any(c["variant_key"] and c["variant_key"] != variant for c in calls)
        deviates = any(
            c["reason"] not in ("assigned", "sticky")
            or (c["served_endpoint"] and c["served_endpoint"] != raw.endpoints.get(c["variant_key"]))
            for c in calls
        )
        values = {}
        for comp in components:
            if comp.source == "call":
                y = _agg(comp.aggregation, [CALL_VALUES[comp.call_value](c) for c in calls])
                pre = [
                    CALL_VALUES[comp.call_value](c)
                    for c in raw.calls
                    if c["session_id"] == unit
                    and first - timedelta(days=comp.covariate_days) <= c["created_at"] < first
                ]
            else:
                evs = [e for e in raw.events if e["unit"] == unit and e["name"] == comp.event_name]
                y = _agg(comp.aggregation, [e["value"] for e in evs if e["occurred_at"] >= first])
                pre = [
                    e["value"]
                    for e in evs
                    if first - timedelta(days=comp.covariate_days) <= e["occurred_at"] < first
                ]
            x = (_agg(comp.aggregation, pre) or 0.0) if comp.covariate_days else None
            if y is None:
                x = None
            values[comp.key] = (y, x)
        per_unit[unit] = (variant, multi, deviates, values)
    out = {}
    for variant, multi, deviates, values in per_unit.values():
        if (multi and not include_multiple) or (deviates and served_only):
            continue
        slot = out.setdefault(
            variant, {"units": 0, **{c.key: [0, 0.0, 0.0, 0.0, 0.0, 0.0] for c in components}}
        )
        slot["units"] += 1
        for comp in components:
            y, x = values[comp.key]
            if y is None:
                continue
            cap = caps.get(comp.key)
            if cap is not None:
                y = min(y, cap)
                x = None if x is None else min(x, cap)
            s = slot[comp.key]
            s[0] += 1
            s[1] += y
            s[2] += y * y
            if x is not None:
                s[3] += x
                s[4] += x * x
                s[5] += x * y
    return out


def populate(raw, rng: random.Random, units: int = 45) -> None:
    variants = ["control", "fast", "cheap"]
    for i in range(units):
        unit = f"u{i}"
        variant = variants[i % 3]
        raw.expose(unit, variant, at=T0)
        for k in range(rng.randint(1, 4)):
            failed = rng.random() < 0.15
            fallback = not failed and rng.random() < 0.1
            raw.call(
                unit,
                variant,
                at=T0 + timedelta(minutes=k + 1),
                status="failed" if failed else "succeeded",
                reason="error_fallback" if fallback else "assigned",
                served="azure/muse-special" if fallback and variant != "cheap" else None,
                latency_ms=round(rng.lognormvariate(5, 0.6), 3),
                cost_usd=f"{rng.uniform(0, 0.01):.8f}",
                output_tokens=rng.randint(0, 900),
                tool_calls=rng.choice([0, 0, 1, 2]),
            )
        if rng.random() < 0.8:
            raw.event(unit, "task_success", float(rng.random() < 0.5 + 0.1 * (i % 3)))
        for _ in range(rng.randint(0, 2)):
            raw.event(unit, "rating", float(rng.randint(1, 5)))


COMPONENTS = [
    Component("m0", "call", "mean", call_value="latency_ms"),
    Component("m1", "call", "sum", call_value="cost_usd"),
    Component("m2", "call", "sum", call_value="output_tokens"),
    Component("m3", "call", "sum", call_value="calls"),
    Component("m4", "call", "sum", call_value="error"),
    Component("m5", "call", "count", call_value="latency_ms"),
    Component("m6", "call", "any", call_value="has_tool_call"),
    Component("m7", "event", "any", event_name="task_success"),
    Component("m8", "event", "mean", event_name="rating"),
    Component("m9", "event", "sum", event_name="rating"),
]


def assert_matches(got, want, components):
    assert set(got) == set(want)
    for variant, expected in want.items():
        stats = got[variant]
        assert stats.units == expected["units"], variant
        for comp in components:
            sums = stats.components[comp.key].as_list()
            exp = expected[comp.key]
            assert sums[0] == exp[0], (variant, comp.key)
            assert sums[1:] == pytest.approx(exp[1:], rel=1e-12, abs=1e-12), (variant, comp.key)


def run(raw, components, **kwargs):
    return aggregate(
        experiment_id=raw.experiment.id,
        phase=raw.phase,
        unit_type="session",
        variant_endpoints=raw.endpoints,
        components=components,
        **kwargs,
    )


@pytest.mark.django_db
def test_sql_sufficient_statistics_equal_python_on_the_raw_rows(three_arms):
    populate(three_arms, random.Random(7))
    got = run(three_arms, COMPONENTS).population(include_multiple=False, served_only=False)
    assert_matches(got, reference(three_arms, COMPONENTS), COMPONENTS)


@pytest.mark.django_db
def test_units_seen_in_two_variants_are_counted_and_excluded_by_default(three_arms):
    populate(three_arms, random.Random(1), units=12)
    three_arms.call("u0", "fast")  # u0 was exposed to control: a forced switch mid-phase
    three_arms.expose("qa", "fast", reason="forced")
    three_arms.call("qa", "fast")
    aggs = run(three_arms, COMPONENTS[:3])
    assert aggs.counts()["control"]["multiple_exposure"] == 1
    assert "qa" not in str(aggs.counts())  # forced QA units never enter the analysis
    excluded = aggs.population(include_multiple=False, served_only=False)
    included = aggs.population(include_multiple=True, served_only=False)
    assert included["control"].units == excluded["control"].units + 1
    assert_matches(excluded, reference(three_arms, COMPONENTS[:3]), COMPONENTS[:3])
    assert_matches(included, reference(three_arms, COMPONENTS[:3], include_multiple=True), COMPONENTS[:3])


@pytest.mark.django_db
def test_served_as_assigned_drops_units_with_a_fallback_or_foreign_endpoint_while_itt_keeps_them(three_arms):
    for i, variant in enumerate(["control", "control", "fast", "fast", "cheap", "cheap"]):
        three_arms.expose(f"s{i}", variant)
        three_arms.call(f"s{i}", variant, latency_ms=100.0 + i)
    three_arms.call("s1", "control", reason="error_fallback", served="azure/muse-special", latency_ms=900.0)
    three_arms.call("s3", "fast", reason="assigned", served="azure/muse-special", latency_ms=800.0)
    comps = [Component("m0", "call", "mean", call_value="latency_ms")]
    aggs = run(three_arms, comps)
    itt = aggs.population(include_multiple=False, served_only=False)
    served = aggs.population(include_multiple=False, served_only=True)
    assert {k: v.units for k, v in itt.items()} == {"control": 2, "fast": 2, "cheap": 2}
    assert {k: v.units for k, v in served.items()} == {"control": 1, "fast": 1, "cheap": 2}
    assert aggs.counts()["control"]["deviating"] == 1 and aggs.counts()["fast"]["deviating"] == 1
    assert_matches(served, reference(three_arms, comps, served_only=True), comps)
    assert itt["control"].components["m0"].sum == pytest.approx(100.0 + (101.0 + 900.0) / 2)


@pytest.mark.django_db
def test_fixed_and_percentile_caps_winsorise_per_unit_values(three_arms):
    rng = random.Random(3)
    populate(three_arms, rng, units=30)
    comps = [
        Component("m0", "call", "sum", call_value="output_tokens", capping="fixed", cap_value=700.0),
        Component("m1", "call", "mean", call_value="latency_ms", capping="percentile", cap_value=0.9),
        Component("m2", "call", "sum", call_value="cost_usd", capping="percentile", cap_value=0.5),
    ]
    aggs = run(three_arms, comps)
    raw_values = reference(
        three_arms,
        [
            Component("p1", "call", "mean", call_value="latency_ms"),
            Component("p2", "call", "sum", call_value="cost_usd"),
        ],
    )
    assert raw_values  # sanity
    # nearest-rank quantile over all analysed units: value at rank ceil(q·n)
    per_unit = _per_unit_values(three_arms, "latency_ms", "mean")
    per_unit_cost = _per_unit_values(three_arms, "cost_usd", "sum")
    want_cap1 = sorted(per_unit)[math.ceil(0.9 * len(per_unit)) - 1]
    want_cap2 = sorted(per_unit_cost)[math.ceil(0.5 * len(per_unit_cost)) - 1]
    assert aggs.caps == {"m0": 700.0, "m1": pytest.approx(want_cap1), "m2": pytest.approx(want_cap2)}
    got = aggs.population(include_multiple=False, served_only=False)
    want = reference(three_arms, comps, caps={"m0": 700.0, "m1": want_cap1, "m2": want_cap2})
    assert_matches(got, want, comps)
    assert max(v.components["m0"].sum_squares for v in got.values()) <= 700.0**2 * 30


def _per_unit_values(raw, call_value, aggregation):
    out = []
    for unit in raw.exposures:
        calls = [c for c in raw.calls if c["unit_id"] == unit]
        v = _agg(aggregation, [CALL_VALUES[call_value](c) for c in calls])
        if v is not None:
            out.append(v)
    return out


@pytest.mark.django_db
def test_ratio_cross_products_and_pre_exposure_covariates_match_python(three_arms):
    rng = random.Random(11)
    populate(three_arms, rng, units=30)
    for unit in list(three_arms.exposures)[:20]:  # history before the experiment (other traffic)
        for d in (1, 3, 40):
            three_arms.call(
                unit, None, in_experiment=False, at=T0 - timedelta(days=d), output_tokens=rng.randint(0, 500)
            )
        three_arms.event(unit, "rating", float(rng.randint(1, 5)), at=T0 - timedelta(days=2))
    comps = [
        Component("m0", "call", "sum", call_value="error"),
        Component("m1", "call", "sum", call_value="calls"),
        Component("m2", "call", "sum", call_value="output_tokens", covariate_days=7),
        Component("m3", "event", "mean", event_name="rating", covariate_days=7),
    ]
    aggs = run(three_arms, comps, cross_products=[("m0", "m1")])
    got = aggs.population(include_multiple=False, served_only=False)
    assert_matches(got, reference(three_arms, comps), comps)
    for variant, stats in got.items():
        units = [u for u, (v, _, _) in three_arms.exposures.items() if v == variant]
        want = 0.0
        for u in units:
            calls = [c for c in three_arms.calls if c["unit_id"] == u]
            want += sum(c["status"] == "failed" for c in calls) * len(calls)
        assert stats.cross[("m0", "m1")] == want
    assert any(s.components["m2"].sum_x > 0 for s in got.values())


def test_every_call_value_is_whitelisted_sql():
    from analytics.models import CallValue

    assert set(CallValue.values) == set(CALL_VALUE_SQL)
    with pytest.raises(ValueError):
        Component("m0", "call", "sum", call_value="latency_ms; DROP TABLE x")


@pytest.mark.django_db
def test_units_with_data_tell_no_observation_from_a_zero(three_arms):
    """A unit with no event of a name is 0 for sum/count/any like one that posted a 0, but has
    no data; call components have data for every unit with a call."""
    for i, variant in enumerate(["control"] * 4 + ["fast"] * 3):
        three_arms.expose(f"u{i}", variant)
        three_arms.call(f"u{i}", variant)
    three_arms.event("u0", "task_success", 0.0)  # observed: a failure
    three_arms.event("u1", "task_success", 1.0)
    three_arms.event("u1", "rating", 4.0)  # another name: no task_success data for the count
    three_arms.event("u2", "rating", 5.0)
    three_arms.event("u4", "task_success", 1.0, at=T0 - timedelta(minutes=1))  # before exposure: ignored
    components = [
        Component(key=f"ts_{agg}", source="event", aggregation=agg, event_name="task_success")
        for agg in ("any", "sum", "count", "mean")
    ] + [Component(key="calls", source="call", aggregation="sum", call_value="calls")]
    got = run(three_arms, components).population(include_multiple=False, served_only=False)
    with_data = {v: {k: s.with_data for k, s in stats.components.items()} for v, stats in got.items()}
    assert with_data["control"] == {"ts_any": 2, "ts_sum": 2, "ts_count": 2, "ts_mean": 2, "calls": 4}
    assert with_data["fast"] == {"ts_any": 0, "ts_sum": 0, "ts_count": 0, "ts_mean": 0, "calls": 3}
    assert (got["fast"].components["ts_any"].n, got["fast"].components["ts_any"].sum) == (3, 0.0)
