"""Time-to-first-token quantile metrics (``ttft_p50_ms`` … ``ttft_p99_ms``): call records →
results snapshot over streamed calls only, checked against numpy's quantile and
:func:`analytics.stats.quantile_statistic` on the raw rows; as primary metric, guardrail (results
and rollouts over REST), in the admin, the call rollup and on the results page."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import numpy as np
import pytest
from rest_framework.test import APIClient

from analytics.histograms import LATENCY_MS
from analytics.models import CallRollup, MetricDefinition, RollupSpan
from analytics.rollups import call_rollup_refresh
from analytics.selectors import metric_names
from analytics.services import results_compute
from analytics.stats import compare, quantile_statistic
from routing.catalogue import avocado_id
from tests.analytics.conftest import T0
from tests.factories import api_key, user_in_group

TTFT_METRICS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p95_ms", "ttft_p99_ms")


def _metric(result, name):
    return next(m for m in result["metrics"] if m["name"] == name)


def _simulate(raw, rng, units=240):
    """Per call: a unit effect shared by its calls; 70 % of calls streamed (they have a TTFT), the
    rest not (no TTFT); 10 % fail (neither latency nor TTFT). ``cheap`` starts later."""
    for i in range(units):
        unit, variant = f"u{i}", ["control", "fast", "cheap"][i % 3]
        raw.expose(unit, variant)
        base = rng.lognormvariate(5.0, 0.3)
        for k in range(rng.randint(1, 5)):
            ttft = base * rng.lognormvariate(0.0, 0.4) * (1.5 if variant == "cheap" else 1.0)
            raw.call(
                unit,
                variant,
                at=T0 + timedelta(minutes=k),
                status="failed" if rng.random() < 0.1 else "succeeded",
                latency_ms=ttft + rng.uniform(50.0, 400.0),
                ttft_ms=ttft if rng.random() < 0.7 else None,
            )
    # a unit whose calls were never streamed has no TTFT: it is left out of the TTFT metrics
    raw.expose("never-streamed", "control")
    raw.call("never-streamed", "control", latency_ms=120.0, ttft_ms=None)


def _ttft_rows(raw, variant):
    return [
        (c["unit_id"], c["ttft_ms"])
        for c in raw.calls
        if c["variant_key"] == variant and c["ttft_ms"] is not None
    ]


@pytest.mark.django_db
def test_ttft_quantiles_rank_streamed_calls_only_and_match_numpy(three_arms):
    _simulate(three_arms, random.Random(34))
    experiment = three_arms.experiment
    experiment.primary_metric = "ttft_p95_ms"
    experiment.guardrail_metrics = ["ttft_p99_ms"]
    experiment.save(update_fields=["primary_metric", "guardrail_metrics"])

    r = results_compute(experiment=experiment).results
    json.dumps(r, allow_nan=False)
    p95 = _metric(r, "ttft_p95_ms")
    assert (p95["role"], p95["type"], p95["higher_is_better"]) == ("primary", "quantile", False)
    assert p95["definition"] == {
        "source": "call",
        "call_value": "ttft_ms",
        "quantile": 0.95,
        "quantile_of": "call",
    }
    ref = {}
    for variant in ("control", "fast", "cheap"):
        rows = _ttft_rows(three_arms, variant)
        values = [v for _, v in rows]
        ref[variant] = quantile_statistic(values, [u for u, _ in rows], q=0.95)
        row = next(v for v in p95["variants"] if v["key"] == variant)
        assert row["mean"] == pytest.approx(np.quantile(values, 0.95), rel=1e-12)
        assert row["observations"] == len(values)  # streamed, succeeded calls only
        assert row["n"] == len({u for u, _ in rows})
    # the never-streamed unit counts for latency, not for TTFT
    latency = next(v for v in _metric(r, "latency_ms")["variants"] if v["key"] == "control")
    ttft_control = next(v for v in p95["variants"] if v["key"] == "control")
    assert "never-streamed" not in {u for u, _ in _ttft_rows(three_arms, "control")}
    assert ttft_control["n"] < latency["n"]

    cheap = next(c for c in p95["comparisons"] if c["variant"] == "cheap")
    want = compare(ref["control"], ref["cheap"])
    assert cheap["method"] == "quantile_woodruff_z"
    assert cheap["relative_lift"] == pytest.approx(want.relative_lift, rel=1e-9)
    assert cheap["relative_ci"] == pytest.approx(list(want.relative_ci), rel=1e-9)
    assert cheap["relative_lift"] > 0.15  # cheap starts later (x1.5)
    assert cheap["relative_ci"][0] < cheap["relative_lift"] < cheap["relative_ci"][1]
    guard = next(g for g in r["guardrails"] if g["metric"] == "ttft_p99_ms" and g["variant"] == "cheap")
    assert guard["sequential_ci"] is not None

    # the other levels are built in too, ranked on the same rows
    MetricDefinition.objects.get(name="ttft_p50_ms")  # seeded by analytics 0011 (and results_compute)
    median = {c["variant_key"]: [] for c in three_arms.calls}
    for c in three_arms.calls:
        if c["ttft_ms"] is not None:
            median[c["variant_key"]].append(c["ttft_ms"])
    experiment.primary_metric = "ttft_p50_ms"
    experiment.save(update_fields=["primary_metric"])
    p50 = _metric(results_compute(experiment=experiment).results, "ttft_p50_ms")
    for row in p50["variants"]:
        assert row["mean"] == pytest.approx(np.median(median[row["key"]]), rel=1e-12)


@pytest.mark.django_db
def test_the_ttft_metrics_are_known_names_with_a_400_for_a_level_that_is_not_built_in(three_arms):
    assert set(TTFT_METRICS) <= set(metric_names())
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(['experiments:write', 'analytics:read'])}")
    body = {
        "key": "avocado-16",
        "model": avocado_id(15),
        "replaces": avocado_id(14),
        "guardrails": ["error_rate", "ttft_p95_ms", "ttft_p99_ms"],
    }
    bad = api.post("/api/v1/rollouts", {**body, "guardrails": ["ttft_p42_ms"]}, format="json")
    assert bad.status_code == 400 and "guardrails" in bad.json()["error"]["fields"]
    created = api.post("/api/v1/rollouts", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["guardrails"] == ["error_rate", "ttft_p95_ms", "ttft_p99_ms"]


@pytest.mark.django_db
def test_the_results_api_admin_rollup_and_page_show_time_to_first_token(three_arms, client, admin_client):
    _simulate(three_arms, random.Random(35), units=90)
    experiment = three_arms.experiment
    experiment.primary_metric = "ttft_p95_ms"
    experiment.save(update_fields=["primary_metric"])
    results_compute(experiment=experiment)

    reader = APIClient(HTTP_AUTHORIZATION=f"Bearer {api_key(['analytics:read'])}")
    body = reader.get("/api/v1/experiments/ana/results").json()
    p95 = _metric(body, "ttft_p95_ms")
    assert p95["definition"]["call_value"] == "ttft_ms" and p95["comparisons"]

    streamed = [c for c in three_arms.calls if c["ttft_ms"] is not None]
    call_rollup_refresh()
    hist = [0] * LATENCY_MS.size
    for h in CallRollup.objects.filter(span=RollupSpan.DAY, calls__gt=0).values_list("ttft_hist", flat=True):
        hist = [a + b for a, b in zip(hist, h, strict=True)]
    assert sum(hist) == len(streamed)  # streamed, succeeded calls only
    assert hist[LATENCY_MS.index(min(c["ttft_ms"] for c in streamed))] >= 1

    client.force_login(user_in_group("Analyst", "analyst"))
    page = client.get(f"/results/{experiment.key}/").content.decode()
    assert "Time to first token p95 (ms, over succeeded streamed calls; clustered by unit)" in page
    assert "First token p50" in page and "First token p95" in page

    metrics = admin_client.get("/admin/analytics/metricdefinition/", {"q": "ttft"}).content.decode()
    assert all(name in metrics for name in TTFT_METRICS)
    one = streamed[-1]
    calls = admin_client.get("/admin/routing/callrecord/", {"q": one["unit_id"]}).content.decode()
    assert "First token" in calls and f"{one['ttft_ms']:,.0f} ms" in calls
