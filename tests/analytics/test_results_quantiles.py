"""Quantile metrics end to end: call records → results snapshot, checked against
:func:`analytics.stats.quantile_statistic` on the raw rows and numpy's quantile; definitions are
validated; p95 works as primary metric and as guardrail."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import numpy as np
import pytest
from django.core.exceptions import ValidationError

from analytics.models import MetricDefinition
from analytics.services import results_compute
from analytics.stats import compare, quantile_statistic
from tests.analytics.conftest import T0


def _metric(result, name):
    return next(m for m in result["metrics"] if m["name"] == name)


def _simulate(raw, rng, units=300):
    """Latency per call: a unit effect shared by its calls; ``cheap`` is slower in the tail."""
    for i in range(units):
        unit, variant = f"u{i}", ["control", "fast", "cheap"][i % 3]
        raw.expose(unit, variant)
        base = rng.lognormvariate(5.0, 0.4)
        for k in range(rng.randint(1, 6)):
            failed = rng.random() < 0.1
            latency = base * rng.lognormvariate(0.0, 0.5) * (1.6 if variant == "cheap" else 1.0)
            raw.call(
                unit,
                variant,
                at=T0 + timedelta(minutes=k),
                status="failed" if failed else "succeeded",
                latency_ms=latency,
            )


def _reference(raw, variant, q, *, skip=()):
    rows = [
        (c["unit_id"], c["latency_ms"])
        for c in raw.calls
        if c["variant_key"] == variant and c["latency_ms"] is not None and c["unit_id"] not in skip
    ]
    return quantile_statistic([v for _, v in rows], [u for u, _ in rows], q=q)


@pytest.mark.django_db
def test_p95_latency_as_primary_and_p99_as_guardrail_match_the_raw_rows(three_arms):
    _simulate(three_arms, random.Random(8))
    # A unit seen in two variants is left out (as for every metric); a fallback-served unit is
    # in the intent-to-treat population only.
    three_arms.call("u0", "fast", latency_ms=99999.0)
    three_arms.call("u3", "control", reason="error_fallback", latency_ms=900.0)
    experiment = three_arms.experiment
    experiment.primary_metric = "latency_p95_ms"
    experiment.guardrail_metrics = ["latency_p99_ms"]
    experiment.save(update_fields=["primary_metric", "guardrail_metrics"])

    snapshot = results_compute(experiment=experiment)
    r = snapshot.results
    json.dumps(r, allow_nan=False)
    p95 = _metric(r, "latency_p95_ms")
    assert (p95["role"], p95["type"], p95["higher_is_better"]) == ("primary", "quantile", False)
    assert p95["definition"] == {
        "source": "call",
        "call_value": "latency_ms",
        "quantile": 0.95,
        "quantile_of": "call",
    }
    ref = {v: _reference(three_arms, v, 0.95, skip={"u0"}) for v in ("control", "fast", "cheap")}
    for row in p95["variants"]:
        assert row["mean"] == pytest.approx(ref[row["key"]].estimate, rel=1e-12)
        assert row["n"] == ref[row["key"]].n and row["observations"] == ref[row["key"]].n_obs
    cheap = next(c for c in p95["comparisons"] if c["variant"] == "cheap")
    want = compare(ref["control"], ref["cheap"])
    assert cheap["method"] == "quantile_woodruff_z"
    assert cheap["relative_lift"] == pytest.approx(want.relative_lift, rel=1e-9)
    assert cheap["relative_ci"] == pytest.approx(list(want.relative_ci), rel=1e-9)
    assert cheap["p_value"] == pytest.approx(want.p_value, rel=1e-9)
    assert cheap["relative_lift"] > 0.3  # the slow arm's tail
    assert cheap["sequential"]["method"] == "sequential_quantile_woodruff_z"
    assert 0 <= cheap["bayesian"]["chance_to_beat_control"] < 0.05
    raw_p95 = np.quantile(
        [
            c["latency_ms"]
            for c in three_arms.calls
            if c["variant_key"] == "control" and c["latency_ms"] is not None and c["unit_id"] != "u0"
        ],
        0.95,
    )
    assert _metric(r, "latency_p95_ms")["variants"][0]["mean"] == pytest.approx(raw_p95, rel=1e-12)

    guard = next(g for g in r["guardrails"] if g["metric"] == "latency_p99_ms" and g["variant"] == "cheap")
    assert guard["sequential_ci"] is not None
    served = _metric(r["analyses"]["served"], "latency_p95_ms")
    served_ctl = _reference(three_arms, "control", 0.95, skip={"u0", "u3"})
    assert served["variants"][0]["mean"] == pytest.approx(served_ctl.estimate, rel=1e-12)
    assert snapshot.inputs["metrics"]["itt"]["latency_p95_ms"]["control"]["q"] == 0.95


@pytest.mark.django_db
def test_a_per_unit_quantile_ranks_each_units_mean(three_arms):
    _simulate(three_arms, random.Random(9), units=60)
    MetricDefinition.objects.create(
        name="unit_latency_p50",
        source="call",
        call_value="latency_ms",
        aggregation="quantile",
        metric_type="quantile",
        quantile=0.5,
        quantile_of="unit",
        higher_is_better=False,
    )
    experiment = three_arms.experiment
    experiment.primary_metric = "unit_latency_p50"
    experiment.save(update_fields=["primary_metric"])
    r = results_compute(experiment=experiment).results
    means: dict[str, list[float]] = {}
    for c in three_arms.calls:
        if c["variant_key"] == "fast" and c["latency_ms"] is not None:
            means.setdefault(c["unit_id"], []).append(c["latency_ms"])
    per_unit = [float(np.mean(v)) for v in means.values()]
    fast = next(v for v in _metric(r, "unit_latency_p50")["variants"] if v["key"] == "fast")
    assert fast["mean"] == pytest.approx(np.median(per_unit), rel=1e-12)
    assert fast["n"] == fast["observations"] == len(per_unit)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"aggregation": "quantile", "metric_type": "mean"}, "aggregation"),
        ({"aggregation": "quantile", "metric_type": "quantile", "quantile": 1.5}, "quantile"),
        ({"aggregation": "quantile", "metric_type": "quantile"}, "quantile"),
        ({"aggregation": "sum", "metric_type": "mean", "quantile": 0.9}, "quantile"),
        (
            {
                "aggregation": "quantile",
                "metric_type": "quantile",
                "quantile": 0.9,
                "capping": "fixed",
                "cap_value": 9,
            },
            "capping",
        ),
    ],
)
def test_inconsistent_quantile_definitions_get_field_errors(fields, field):
    metric = MetricDefinition(name="bad", source="call", call_value="latency_ms", **fields)
    with pytest.raises(ValidationError) as err:
        metric.clean()
    assert field in err.value.message_dict


@pytest.mark.django_db
def test_the_results_page_shows_the_quantile_metric_in_ms(three_arms, client):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    _simulate(three_arms, random.Random(10), units=90)
    experiment = three_arms.experiment
    experiment.primary_metric = "latency_p95_ms"
    experiment.save(update_fields=["primary_metric"])
    results_compute(experiment=experiment)
    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    page = client.get(f"/results/{experiment.key}/")
    assert page.status_code == 200
    assert "Latency p95 (ms, over succeeded calls; clustered by unit)" in page.content.decode()
